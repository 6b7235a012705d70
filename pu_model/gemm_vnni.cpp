// AVX-512 VNNI micro-kernels of the fast GEMM (see gemm.hpp).
//
// This file is compiled for AVX-512 VNNI through a target pragma and is only entered after
// detail::cpu_has_vnni512() said yes.  It deliberately uses no standard-library templates, so that
// no inline function compiled here for AVX-512 can be merged into code that runs elsewhere.
//
// Exactness: vpdpbusd multiplies unsigned bytes by signed bytes and adds groups of four products
// to an int32 lane without saturation.  X arrives offset by +128 (u = x + 128, 0..255), so a lane
// accumulates sum(w * x) + 128 * sum(w); the per-channel column term (bias << shift) - 128*rowsum(w)
// restores the definition.  Lanes wrap modulo 2^32 (vpdpbusd does not saturate), and so does the
// column term, so the final value is exact whenever the true result fits in int32.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "pu_model/gemm.hpp"

// GCC compiles the rest of the file for the ISA through a target pragma; clang ignores that
// pragma and instead attaches the same target attribute to every function that follows.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni")
#endif

namespace aimcemu::detail {
namespace {

// One register tile: PR output pixels x NV vectors of 16 output channels.  The weight panel holds,
// for every group g of 4 depth positions, NV vectors of 16 lanes x 4 bytes.
template <int NV, int PR>
void micro_tile(const std::int8_t* panel, std::int64_t groups, const std::uint8_t* x, std::int64_t ldx,
                const std::int32_t* column, __mmask16 last_mask, std::int32_t* out, std::int64_t ldo) {
    __m512i acc[PR][NV];
    for (int r = 0; r < PR; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
    for (std::int64_t g = 0; g < groups; ++g) {
        __m512i wv[NV];
        for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_si512(panel + (g * NV + v) * 64);
        for (int r = 0; r < PR; ++r) {
            std::int32_t four;
            std::memcpy(&four, x + r * ldx + 4 * g, 4);
            const __m512i xv = _mm512_set1_epi32(four);
            for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], xv, wv[v]);
        }
    }
    for (int v = 0; v < NV; ++v) {
        const __m512i col = _mm512_loadu_si512(column + 16 * v);
        const __mmask16 mask = v == NV - 1 ? last_mask : __mmask16(0xFFFF);
        for (int r = 0; r < PR; ++r)
            _mm512_mask_storeu_epi32(out + r * ldo + 16 * v, mask, _mm512_add_epi32(acc[r][v], col));
    }
}

using MicroTile = void (*)(const std::int8_t*, std::int64_t, const std::uint8_t*, std::int64_t, const std::int32_t*,
                           __mmask16, std::int32_t*, std::int64_t);

template <int NV>
MicroTile pick_rows(int rows) {
    switch (rows) {
        case 1: return micro_tile<NV, 1>;
        case 2: return micro_tile<NV, 2>;
        case 3: return micro_tile<NV, 3>;
        case 4: return micro_tile<NV, 4>;
        case 5: return micro_tile<NV, 5>;
        default: return micro_tile<NV, 6>;
    }
}

MicroTile pick(int vectors, int rows) {
    switch (vectors) {
        case 1: return pick_rows<1>(rows);
        case 2: return pick_rows<2>(rows);
        case 3: return pick_rows<3>(rows);
        default: return pick_rows<4>(rows);
    }
}

}  // namespace

void vnni_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const std::uint8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                    std::int32_t* acc) {
    const std::int64_t groups = (m + 3) / 4;
    const std::int64_t depth = groups * 4;
    for (std::int64_t n0 = 0; n0 < n; n0 += kVnniPanel) {
        const std::int64_t lanes = n - n0 < kVnniPanel ? n - n0 : kVnniPanel;
        const int vectors = int((lanes + 15) / 16);
        const int tail = int(lanes - 16 * (vectors - 1));
        const __mmask16 last_mask = __mmask16((1u << tail) - 1u);
        const std::int8_t* panel = packed + n0 * depth;
        for (std::int64_t p0 = p_begin; p0 < p_end; p0 += kVnniRowsPerTile) {
            const int rows = int(p_end - p0 < kVnniRowsPerTile ? p_end - p0 : kVnniRowsPerTile);
            pick(vectors, rows)(panel, groups, xt + p0 * ldx, ldx, column + n0, last_mask, acc + p0 * n + n0, n);
        }
    }
}

}  // namespace aimcemu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
