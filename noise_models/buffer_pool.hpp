// Layer-sized buffers that the float64 noise engine recycles across layers and calls.
//
// Why: a layer's state (the clean weights, g_target, g_prog, nu, the fault codes) and a read's
// output are 50-60 bytes per weight.  glibc maps every allocation of that size fresh and unmaps
// it on free, so each layer page-faulted and zeroed all of it again: about a quarter of the
// CPU time of program + read over ResNet-50.  The pool keeps freed buffers (up to
// kPooledBytesLimit in all) and hands them out again; new large buffers ask for 2 MiB pages.
//
//   PooledVector<double> g = take_doubles(n);   // n elements, contents unspecified
//   ...
//   give_back(std::move(g));                    // its memory goes to the next take_*()
//
// Buffers under kPooledBytesMin are not pooled (glibc's heap reuses those without page faults).
// A PooledVector does not zero the elements it grows by (std::vector<double> would): the engine
// writes every element on its workers anyway, so a fresh buffer's pages are first touched there,
// in parallel, instead of being zeroed and faulted in by the calling thread alone (a serial pass
// that held back two threads), and a recycled buffer grown by a tail costs no fill.
// Every function is thread-safe, and a child forked while another thread uses the pool finds
// it unlocked and whole (buffer_pool.cpp).  Nothing here changes a value the engine computes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "common/default_init_allocator.hpp"

namespace aimcemu::noise {

// std::allocator, except that vector::resize and vector(n) leave new elements unwritten.
template <class T>
using UninitializedAllocator = DefaultInitAllocator<T>;

template <class T>
using PooledVector = std::vector<T, UninitializedAllocator<T>>;

inline constexpr std::size_t kPooledBytesMin = std::size_t(1) << 20;
inline constexpr std::size_t kPooledBytesLimit = std::size_t(256) << 20;

// A vector of n elements whose values are unspecified (recycled memory is not cleared).
PooledVector<double> take_doubles(std::size_t n);
PooledVector<std::uint8_t> take_bytes(std::size_t n);

// Returns the vector's memory to the pool (or frees it: small, or the pool is full).
void give_back(PooledVector<double>&& v);
void give_back(PooledVector<std::uint8_t>&& v);

// Bytes the pool holds now, and freeing all of them (after a long run, or in tests).
std::size_t pooled_bytes();
void release_pooled_buffers();

}  // namespace aimcemu::noise
