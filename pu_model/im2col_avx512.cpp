// IM2COL's interior pixels with AVX-512BW masked moves (see im2col.hpp, detail::im2col_interior_avx512).
//
// Why: a 3-channel input layer (the ResNet stem, 7x7 window) has runs of 7 x 3 = 21 bytes, 49 per
// output pixel.  Copied with overlapping 8- and 16-byte words plus the per-run edge checks, its
// IM2COL cost about three quarters of its GEMM.  A masked load, an XOR and a masked store move a
// run of up to 64 bytes exactly, without reading or writing a byte outside it.  Longer runs (a
// 3x3 window over 64 channels: 192 bytes) take whole 64-byte moves and one masked piece, which
// also drops the generic path's per-run edge checks and 16-byte words.
//
// Compiled for AVX-512BW through a target pragma (a clang attribute twin for clang) and entered
// only after detail::cpu_has_avx512bw() said yes; no standard-library templates, so that nothing
// compiled here for AVX-512 can be merged into code that runs elsewhere.
#include <immintrin.h>

#include <cstdint>

#include "pu_model/im2col.hpp"
#include "common/isa_target.hpp"

AIMCEMU_ISA_BEGIN("avx512f,avx512bw,avx512vl")

namespace aimcemu::detail {
namespace {

// Bytes [m, row_stride) of a row set to xor_mask, in 64-byte pieces (usually one of 0-3 bytes).
inline void fill_padding(std::uint8_t* row, std::int64_t m, std::int64_t row_stride, std::uint8_t xor_mask) {
    for (std::int64_t at = m; at < row_stride; at += 64) {
        const std::int64_t left = row_stride - at;
        const __mmask64 mask = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
        _mm512_mask_storeu_epi8(row + at, mask, _mm512_set1_epi8(char(xor_mask)));
    }
}

// Runs longer than 64 bytes (the 192 and 384 bytes of a 64- and 128-channel 3x3 window): whole
// zmm, then one masked piece for the rest.  A function of its own, so that the short-run loops
// below compile as they did before it existed (inlined here, the 3-channel stem ran 2 % slower).
__attribute__((noinline)) void interior_long_runs(const std::int8_t* src, std::int64_t src_pixel_step,
                                                  std::int64_t src_row_step, int runs, int run_bytes,
                                                  std::int64_t pixels, std::uint8_t xor_mask, std::uint8_t* dst,
                                                  std::int64_t row_stride) {
    const std::int64_t m = std::int64_t(runs) * run_bytes;
    const __m512i flip = _mm512_set1_epi8(char(xor_mask));
    const int whole = run_bytes / 64 * 64, rest = run_bytes - whole;
    const __mmask64 rest_mask = (__mmask64(1) << rest) - 1;   // rest < 64
    for (std::int64_t px = 0; px < pixels; ++px) {
        const std::int8_t* from = src + px * src_pixel_step;
        std::uint8_t* row = dst + px * row_stride;
        for (int r = 0; r < runs; ++r) {
            const std::int8_t* in = from + r * src_row_step;
            std::uint8_t* out = row + r * run_bytes;
            for (int at = 0; at < whole; at += 64)
                _mm512_storeu_si512(out + at, _mm512_xor_si512(_mm512_loadu_si512(in + at), flip));
            if (rest)
                _mm512_mask_storeu_epi8(out + whole, rest_mask,
                                        _mm512_xor_si512(_mm512_maskz_loadu_epi8(rest_mask, in + whole), flip));
        }
        fill_padding(row, m, row_stride, xor_mask);
    }
}

// The masked byte moves of one register width: a run of up to kBytes bytes, one load, one XOR and
// one store, each under the run's mask (ymm for runs up to 32 bytes, zmm up to 64).
struct YmmRuns {
    static constexpr int kBytes = 32;
    using Mask = __mmask32;
    using V = __m256i;
    static Mask mask(int bytes) { return Mask(bytes == kBytes ? ~0u : (1u << bytes) - 1u); }
    static V splat(std::uint8_t b) { return _mm256_set1_epi8(char(b)); }
    static V load(Mask m, const std::int8_t* p) { return _mm256_maskz_loadu_epi8(m, p); }
    static void store(std::uint8_t* p, Mask m, V v) { _mm256_mask_storeu_epi8(p, m, v); }
    static V flip(V a, V b) { return _mm256_xor_si256(a, b); }
};

struct ZmmRuns {
    static constexpr int kBytes = 64;
    using Mask = __mmask64;
    using V = __m512i;
    static Mask mask(int bytes) { return bytes == kBytes ? ~Mask(0) : (Mask(1) << bytes) - 1; }
    static V splat(std::uint8_t b) { return _mm512_set1_epi8(char(b)); }
    static V load(Mask m, const std::int8_t* p) { return _mm512_maskz_loadu_epi8(m, p); }
    static void store(std::uint8_t* p, Mask m, V v) { _mm512_mask_storeu_epi8(p, m, v); }
    static V flip(V a, V b) { return _mm512_xor_si512(a, b); }
};

// Runs of at most Runs::kBytes bytes: one masked move per run; m = runs * run_bytes.  The caller
// computes m once for both widths, as the two loops did when each was written out: computed in
// here, GCC allocated registers differently, reloaded a spilled pointer in the per-pixel loop,
// and the 3-channel stem ran 1.5 % slower in bench_gemm.
template <class Runs>
inline void interior_short_runs(const std::int8_t* src, std::int64_t src_pixel_step, std::int64_t src_row_step, int runs,
                                int run_bytes, std::int64_t m, std::int64_t pixels, std::uint8_t xor_mask, std::uint8_t* dst,
                                std::int64_t row_stride) {
    const typename Runs::Mask run_mask = Runs::mask(run_bytes);
    const typename Runs::V flip = Runs::splat(xor_mask);
    for (std::int64_t px = 0; px < pixels; ++px) {
        const std::int8_t* from = src + px * src_pixel_step;
        std::uint8_t* row = dst + px * row_stride;
        for (int r = 0; r < runs; ++r)
            Runs::store(row + r * run_bytes, run_mask, Runs::flip(Runs::load(run_mask, from + r * src_row_step), flip));
        fill_padding(row, m, row_stride, xor_mask);
    }
}

}  // namespace

void im2col_interior_avx512(const std::int8_t* src, std::int64_t src_pixel_step, std::int64_t src_row_step,
                            int runs, int run_bytes, std::int64_t pixels, std::uint8_t xor_mask, std::uint8_t* dst,
                            std::int64_t row_stride) {
    if (run_bytes > ZmmRuns::kBytes)
        return interior_long_runs(src, src_pixel_step, src_row_step, runs, run_bytes, pixels, xor_mask, dst,
                                  row_stride);
    const std::int64_t m = std::int64_t(runs) * run_bytes;
    if (run_bytes <= YmmRuns::kBytes) {
        interior_short_runs<YmmRuns>(src, src_pixel_step, src_row_step, runs, run_bytes, m, pixels, xor_mask, dst, row_stride);
        return;
    }
    interior_short_runs<ZmmRuns>(src, src_pixel_step, src_row_step, runs, run_bytes, m, pixels, xor_mask, dst, row_stride);
}

void xor_copy_avx512(const std::int8_t* src, std::uint8_t xor_mask, std::int64_t n, std::uint8_t* dst) {
    const __m512i flip = _mm512_set1_epi8(char(xor_mask));
    std::int64_t at = 0;
    for (; at + 64 <= n; at += 64) _mm512_storeu_si512(dst + at, _mm512_xor_si512(_mm512_loadu_si512(src + at), flip));
    if (at < n) {
        const __mmask64 rest = (__mmask64(1) << (n - at)) - 1;   // n - at < 64
        _mm512_mask_storeu_epi8(dst + at, rest, _mm512_xor_si512(_mm512_maskz_loadu_epi8(rest, src + at), flip));
    }
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
