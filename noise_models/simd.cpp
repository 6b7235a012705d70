// Run-time dispatch for the vectorised noise math (simd.hpp); compiled for the baseline ISA.
#include "noise_models/simd.hpp"

namespace aimcemu::noise::simd {

bool available() {
    static const bool yes = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return yes;
}

}  // namespace aimcemu::noise::simd
