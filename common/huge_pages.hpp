// An allocator for large buffers that are streamed start to end, on 2 MiB pages where the kernel
// gives them.
//
// Why: with transparent huge pages in `madvise` mode (the usual default), a plain allocation gets
// 4 KiB pages, and a kernel streaming a 200 MB buffer (the NIU's kept chip state, 8 bytes per
// weight) takes a TLB miss every 4 KiB.  A buffer of at least 2 MiB is allocated here on a 2 MiB
// boundary and marked MADV_HUGEPAGE, so the kernel can back it with 2 MiB pages (one TLB entry
// per 2 MiB).  Where it cannot (THP off, fragmented memory, another OS), the buffer is an ordinary
// one: the allocator changes where bytes live, never what they are.  Smaller buffers go through
// operator new on a 64-byte cache line: the GEMM kernels load their packed weights 64 bytes at a
// time, and at glibc's 16-byte alignment every such load split over two lines (the deep 1 x 1
// layers of ResNet-50 ran 7 % slower or not depending on where the heap put them).
#pragma once
#include <cstddef>
#include <new>

namespace aimcemu {

inline constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;
inline constexpr std::size_t kCacheLineBytes = 64;

// Allocates `bytes` (from kHugePageBytes on: 2 MiB aligned and advised MADV_HUGEPAGE, so every
// whole 2 MiB of it may be one page; the tail past the last whole 2 MiB stays on small pages,
// which wastes no memory; below that, on a 64-byte cache line); release with
// free_maybe_huge(p, bytes) of the same size.
void* allocate_maybe_huge(std::size_t bytes);
void free_maybe_huge(void* p, std::size_t bytes) noexcept;
// Advises MADV_HUGEPAGE on the whole 2 MiB-aligned part of [data, data + bytes) (the part transparent
// huge pages in madvise mode can back with 2 MiB pages); for buffers allocated elsewhere, before
// anything touches them.  A hint: where the kernel refuses it nothing changes.
void advise_huge_pages(void* data, std::size_t bytes) noexcept;
// Whether allocate_maybe_huge and advise_huge_pages advise MADV_HUGEPAGE (default on).  For benchmarks that measure
// what the advice gives in one run; the bytes are the same either way.
void set_huge_page_advice(bool on) noexcept;

template <class T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(allocate_maybe_huge(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept { free_maybe_huge(p, n * sizeof(T)); }
    template <class U>
    bool operator==(const HugePageAllocator<U>&) const noexcept {
        return true;
    }
};

}  // namespace aimcemu
