// Huge-page allocation for large streamed buffers (huge_pages.hpp).
#include "common/huge_pages.hpp"

#include <atomic>

#include <sys/mman.h>

namespace aimcemu {
namespace {

std::atomic<bool> g_advise_huge{true};

}  // namespace

void set_huge_page_advice(bool on) noexcept { g_advise_huge = on; }

void* allocate_maybe_huge(std::size_t bytes) {
    if (bytes < kHugePageBytes) return ::operator new(bytes);
    void* p = ::operator new(bytes, std::align_val_t(kHugePageBytes));
#ifdef MADV_HUGEPAGE
    // Advice only: if the kernel refuses it, the buffer stays on small pages and works the same.
    if (g_advise_huge) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

void free_maybe_huge(void* p, std::size_t bytes) noexcept {
    if (bytes < kHugePageBytes) ::operator delete(p);
    else ::operator delete(p, std::align_val_t(kHugePageBytes));
}

}  // namespace aimcemu
