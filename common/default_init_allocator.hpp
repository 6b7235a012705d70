// An allocator adaptor whose value-initialisation leaves elements unwritten.
//
// Why: std::vector<T>::resize(n) and vector(n) value-initialise, i.e. zero, every new element,
// on the calling thread.  Buffers that a kernel then writes whole (the NIU's chip state, the
// float64 engine's layer arrays) would be written twice, and their pages faulted in by one
// thread instead of by the workers that write them.  With this adaptor those elements are
// default-initialised instead (for arithmetic types: left as the memory was); every other
// construction (push_back, resize(n, value), assign) is as with `Base`.
//
//   std::vector<double, DefaultInitAllocator<double>> v(n);                    // n unwritten doubles
//   std::vector<std::uint16_t, DefaultInitAllocator<std::uint16_t, HugePageAllocator>> w(n);
//
// Only for element types whose every element the code writes before it reads it.
#pragma once
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace aimcemu {

template <class T, template <class> class Base = std::allocator>
struct DefaultInitAllocator : Base<T> {
    using value_type = T;
    template <class U>
    struct rebind {
        using other = DefaultInitAllocator<U, Base>;
    };
    DefaultInitAllocator() = default;
    template <class U>
    DefaultInitAllocator(const DefaultInitAllocator<U, Base>&) noexcept {}

    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
        ::new (static_cast<void*>(p)) U;  // default-, not value-initialised
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
};

}  // namespace aimcemu
