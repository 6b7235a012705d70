// Huge-page allocation for large streamed buffers (huge_pages.hpp).
#include "common/huge_pages.hpp"

#include <atomic>
#include <cstdint>

#include <sys/mman.h>

namespace aimcemu {
namespace {

std::atomic<bool> g_advise_huge{true};

}  // namespace

void set_huge_page_advice(bool on) noexcept { g_advise_huge = on; }

void advise_huge_pages(void* data, std::size_t bytes) noexcept {
#ifdef MADV_HUGEPAGE
    if (!g_advise_huge) return;
    const auto page = std::uintptr_t(kHugePageBytes);
    const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) & ~(page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(data) + bytes) & ~(page - 1);
    // Advice only: if the kernel refuses it, the buffer stays on small pages and works the same.
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
    (void)data, (void)bytes;
#endif
}

void* allocate_maybe_huge(std::size_t bytes) {
    if (bytes < kHugePageBytes) return ::operator new(bytes, std::align_val_t(kCacheLineBytes));
    void* p = ::operator new(bytes, std::align_val_t(kHugePageBytes));
    advise_huge_pages(p, bytes);
    return p;
}

void free_maybe_huge(void* p, std::size_t bytes) noexcept {
    if (bytes < kHugePageBytes) ::operator delete(p, std::align_val_t(kCacheLineBytes));
    else ::operator delete(p, std::align_val_t(kHugePageBytes));
}

}  // namespace aimcemu
