// An Hbm built in an earlier Hbm's memory (what a sweep's later emulator does, emulator.hpp
// kept_hbm_bytes): every byte outside the regions its owner writes before reading must read as
// in fresh memory, zero, whatever the earlier Hbm held there; the memory is reused only when it
// holds the new layout, and accesses stop at the new layout's end.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <unistd.h>

#include "common/errors.hpp"
#include "pu_model/hbm.hpp"

using namespace aimcemu;

namespace {

constexpr std::uint8_t kStale = 0xA5;

bool not_activations(const HbmRegion& r) { return r.kind != HbmRegionKind::Activations; }

std::uint64_t page() { return std::uint64_t(::sysconf(_SC_PAGESIZE)); }

// An Hbm whose every byte is kStale, given up for the next one.
ZeroedBytes stale_memory(std::uint64_t bytes) {
    HbmLayout layout;
    layout.add("all", HbmRegionKind::Weights, 0, bytes);
    Hbm hbm(layout);
    hbm.write(0, std::vector<std::uint8_t>(std::size_t(layout.size()), kStale));
    return std::move(hbm).take_memory();
}

// Regions of odd sizes that start and end inside pages and span whole pages, with gaps between
// them (the 32-byte alignment) and activation regions that must read as zero.
HbmLayout mixed_layout() {
    HbmLayout layout;
    layout.add("input", HbmRegionKind::Activations, kNetworkInput, 100);
    layout.add("l0/out", HbmRegionKind::Activations, 0, 3 * page() + 17);
    layout.add("l0/weights0", HbmRegionKind::Weights, 0, 5000);
    layout.add("l0/weights1", HbmRegionKind::Weights, 0, 5000, 1);
    layout.add("l0/clean", HbmRegionKind::CleanWeights, 0, 5000);
    layout.add("l1/out", HbmRegionKind::Activations, 1, 7);
    layout.add("l1/weights0", HbmRegionKind::Weights, 1, 2 * page() + 3);
    layout.add("l2/out", HbmRegionKind::Activations, 2, 4 * page());
    return layout;
}

bool inside_named_region(const HbmLayout& layout, std::uint64_t addr) {
    for (const HbmRegion& r : layout.regions())
        if (not_activations(r) && addr >= r.base && addr < r.base + r.bytes) return true;
    return false;
}

}  // namespace

TEST(HbmRecycled, EveryByteOutsideTheWrittenRegionsReadsAsZeroWhateverTheMemoryHeld) {
    const HbmLayout layout = mixed_layout();
    ZeroedBytes memory = stale_memory(layout.size() + 3 * page());
    const std::uint8_t* const address = memory.data();
    Hbm hbm(layout, std::move(memory), not_activations);
    EXPECT_EQ(reinterpret_cast<const std::uint8_t*>(hbm.bytes(0, 1).data()), address) << "the memory was not reused";
    std::vector<std::uint8_t> bytes(std::size_t(layout.size()));
    hbm.read(0, bytes);
    std::size_t stale_kept = 0;
    for (std::uint64_t a = 0; a < layout.size(); ++a) {
        if (inside_named_region(layout, a)) {
            stale_kept += bytes[std::size_t(a)] == kStale;   // unspecified; here the old bytes stay
            continue;
        }
        ASSERT_EQ(bytes[std::size_t(a)], 0) << "byte " << a << " of a region or gap that must read as zero";
    }
    EXPECT_GT(stale_kept, 0u) << "the named regions were zeroed too: the test would not see a leak";
    // The memory is larger than the layout: the Hbm still ends where its layout ends.
    EXPECT_THROW(hbm.read(layout.size(), std::span<std::uint8_t>(bytes.data(), 1)), FormatError);
}

TEST(HbmRecycled, LargerMemoryShrinksToTheLayoutsPages) {
    // Kept from a larger network for a smaller one, the memory keeps only the pages the smaller
    // layout covers: what the next emulator gets, and what kept_hbm_bytes reports, is its size.
    const HbmLayout layout = mixed_layout();
    const std::uint64_t layout_pages = (layout.size() + page() - 1) / page() * page();
    ZeroedBytes memory = stale_memory(layout.size() + 40 * page());
    const std::uint8_t* const address = memory.data();
    Hbm hbm(layout, std::move(memory), not_activations);
    ZeroedBytes given_up = std::move(hbm).take_memory();
    EXPECT_EQ(given_up.data(), address) << "the memory was not reused";
    EXPECT_EQ(given_up.size(), layout_pages);
    // The page that holds the layout's end stays mapped and zero past it.
    EXPECT_EQ(given_up.data()[given_up.size() - 1], 0);
}

TEST(HbmRecycled, MemoryTooSmallIsReplacedByFreshZeroedMemory) {
    const HbmLayout layout = mixed_layout();
    Hbm hbm(layout, stale_memory(page()), not_activations);
    std::vector<std::uint8_t> bytes(std::size_t(layout.size()));
    hbm.read(0, bytes);
    EXPECT_EQ(bytes, std::vector<std::uint8_t>(bytes.size(), 0));
    Hbm from_nothing(layout, ZeroedBytes(0), not_activations);
    from_nothing.read(0, bytes);
    EXPECT_EQ(bytes, std::vector<std::uint8_t>(bytes.size(), 0));
}

TEST(HbmRecycled, AnHbmThatGaveUpItsMemoryRefusesEveryAccess) {
    const HbmLayout layout = mixed_layout();
    Hbm hbm(layout);
    const ZeroedBytes memory = std::move(hbm).take_memory();
    EXPECT_EQ(memory.size(), layout.size());
    std::uint8_t byte = 0;
    EXPECT_THROW(hbm.read(0, std::span<std::uint8_t>(&byte, 1)), FormatError);
}
