// The vector ISAs this CPU and OS offer, read here from CPUID and XCR0 rather than through the
// library's own checks (__builtin_cpu_supports behind detail::cpu_has_* and simd::supported), so
// that a test comparing the path a dispatcher chose with these catches a broken check as well as
// a path that silently dropped out.
#pragma once
#include <cpuid.h>

namespace aimcemu::test_cpu {

struct VectorFeatures {
    bool popcnt = false;  // not a vector ISA, but the metrics' AVX2 kernel counts with it
    bool avx2 = false, fma = false;
    bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
};

inline VectorFeatures vector_features() {
    VectorFeatures f;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
    f.popcnt = ecx & bit_POPCNT;  // needs no register state saved by the OS
    if (!(ecx & bit_OSXSAVE)) return f;  // no XGETBV
    const bool fma_cpu = ecx & bit_FMA;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool os_ymm = (xcr0_lo & 0x6u) == 0x6u;       // XMM and YMM state saved
    const bool os_zmm = (xcr0_lo & 0xe6u) == 0xe6u;     // and the opmask and both ZMM halves
    if (!os_ymm || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
    f.fma = fma_cpu;
    f.avx2 = ebx & bit_AVX2;
    if (!os_zmm) return f;
    f.avx512f = ebx & bit_AVX512F;
    f.avx512dq = ebx & bit_AVX512DQ;
    f.avx512bw = ebx & bit_AVX512BW;
    f.avx512vl = ebx & bit_AVX512VL;
    return f;
}

}  // namespace aimcemu::test_cpu
