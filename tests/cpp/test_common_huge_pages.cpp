// The huge-page allocator (common/huge_pages.hpp): buffers from 2 MiB on start on a 2 MiB
// boundary and their memory is advised MADV_HUGEPAGE (the kernel's VmFlags "hg" on the mapping,
// where the kernel has transparent huge pages), smaller ones are ordinary; contents behave as in
// any buffer, with the advice on or off.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/huge_pages.hpp"

using namespace aimcemu;

namespace {

bool kernel_has_thp() { return std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good(); }

// The VmFlags of the mapping that holds `p` (/proc/self/smaps), "" if none is found.
std::string vm_flags_of(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    bool inside = false;
    for (std::string line; std::getline(smaps, line);) {
        std::uintptr_t lo = 0, hi = 0;
        char dash = 0;
        std::istringstream head(line);
        if (head >> std::hex >> lo >> dash >> hi && dash == '-') inside = lo <= addr && addr < hi;
        else if (inside && line.rfind("VmFlags:", 0) == 0) return line;
    }
    return "";
}

bool advised_huge(const void* p) { return vm_flags_of(p).find(" hg") != std::string::npos; }

}  // namespace

TEST(HugePages, LargeBuffersAreAlignedAndAdvisedSmallOnesAreOrdinary) {
    // 40 MiB: above the C library's largest mmap threshold, so every buffer is a mapping of its own.
    const std::size_t big = (std::size_t(40) << 20) + 5;
    set_huge_page_advice(false);
    void* plain = allocate_maybe_huge(big);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(plain) % kHugePageBytes, 0u);
    if (kernel_has_thp()) EXPECT_FALSE(advised_huge(plain)) << vm_flags_of(plain);
    free_maybe_huge(plain, big);
    set_huge_page_advice(true);
    void* huge = allocate_maybe_huge(big);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(huge) % kHugePageBytes, 0u);
    if (kernel_has_thp()) EXPECT_TRUE(advised_huge(huge)) << vm_flags_of(huge);
    // Every byte is usable.
    auto* bytes = static_cast<unsigned char*>(huge);
    for (std::size_t i = 0; i < big; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
    for (std::size_t i = 0; i < big; i += 4093) ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 7)) << i;
    EXPECT_EQ(bytes[big - 1], static_cast<unsigned char>((big - 1) * 7));
    free_maybe_huge(huge, big);
    void* small = allocate_maybe_huge(1000);
    ASSERT_NE(small, nullptr);
    static_cast<unsigned char*>(small)[999] = 1;
    free_maybe_huge(small, 1000);
}

TEST(HugePages, VectorsKeepTheirContentsAcrossCopiesAndGrowth) {
    using HugeVector = std::vector<std::uint16_t, HugePageAllocator<std::uint16_t>>;
    HugeVector v;
    for (std::uint32_t i = 0; i < 3'000'000; ++i) v.push_back(static_cast<std::uint16_t>(i * 2654435761u >> 16));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % kHugePageBytes, 0u);
    const HugeVector copy = v;
    EXPECT_EQ(copy, v);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy.data()) % kHugePageBytes, 0u);
    HugeVector small(10, 3);
    small = v;  // small -> large storage
    EXPECT_EQ(small, v);
    v.assign(7, 9);
    v.shrink_to_fit();  // large -> small storage
    EXPECT_EQ(v, HugeVector(7, 9));
}
