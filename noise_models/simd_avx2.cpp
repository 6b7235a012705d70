// AVX2 + FMA implementation of noise_models/simd.hpp (simd_kernels.hpp's avx2::).
//
// Compiled for AVX2/FMA through a target pragma and entered only through simd.cpp's dispatch,
// after a CPU check.  It uses no standard-library templates, so no AVX2 code can be merged into inline
// functions that run elsewhere.  Every function works lane by lane (no horizontal step), and a
// partial last vector is padded, so a device's result never depends on its neighbours, the block
// it falls in or the thread that computes it.
//
// The math (our own; coefficients are Taylor series, exact rationals rounded to double):
//   log x:  x = 2^e * m with m in [sqrt(1/2), sqrt(2)); t = (m - 1) / (m + 1);
//           log m = 2 * atanh(t) = 2 t (1 + t^2/3 + t^4/5 + ... + t^20/21)   (|t| <= 0.1716)
//           log x = e * ln2_hi + (log m + e * ln2_lo)
//   exp x:  k = round(x / ln2), r = x - k ln2 (two-part ln2), |r| <= 0.347;
//           exp r = sum r^i / i!, i <= 13; times 2^k through the exponent bits
//   sin/cos of 2 pi b / 2^32: the top 3 bits of b give the octant exactly; the rest an angle
//           phi in [0, pi/4] (reflected in odd octants), sin/cos phi by Taylor series to
//           phi^17 / phi^18, then the quadrant's swap and signs.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "noise_models/simd_kernels.hpp"
#include "common/isa_target.hpp"

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx2,fma")

namespace aimcemu::noise::simd::avx2 {
namespace {

using V = __m256d;

inline V splat(double v) { return _mm256_set1_pd(v); }

// Polynomials by Estrin's scheme: c[0] + c[1] x + ... + c[n-1] x^(n-1) as a tree of FMAs over
// x, x^2, x^4, x^8.  Horner's chain of n dependent FMAs kept too few vectors in flight (the
// out-of-order window fills with one long chain); the tree is about log2(n) FMAs deep.
template <int N>
__attribute__((always_inline)) inline V estrin(V x, const double (&c)[N]) {
    static_assert(N >= 2 && N <= 16, "estrin: 2..16 coefficients");
    V level[8];
    int count = 0;
    for (int i = 0; i < N; i += 2)
        level[count++] = i + 1 < N ? _mm256_fmadd_pd(splat(c[i + 1]), x, splat(c[i])) : splat(c[i]);
    V power = _mm256_mul_pd(x, x);   // x^2, then x^4, x^8
    while (count > 1) {
        int next = 0;
        for (int i = 0; i < count; i += 2) level[next++] = i + 1 < count ? _mm256_fmadd_pd(level[i + 1], power, level[i]) : level[i];
        count = next;
        if (count > 1) power = _mm256_mul_pd(power, power);
    }
    return level[0];
}

// --- log -------------------------------------------------------------------------------------
constexpr double kLn2Hi = 6.93147180369123816490e-01;   // ln 2 rounded to 32 significant bits
constexpr double kLn2Lo = 1.90821492927058770002e-10;   // ln 2 - kLn2Hi

__attribute__((always_inline)) inline V vlog(V x) {
    const __m256i bits = _mm256_castpd_si256(x);
    // Exponent field as a double (OR into the mantissa of 2^52, subtract 2^52), then unbias.
    const __m256i field = _mm256_srli_epi64(bits, 52);
    V e = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(field, _mm256_set1_epi64x(0x4330000000000000LL))),
                        splat(4503599627370496.0 + 1023.0));
    // Mantissa m in [1, 2); halve it when above sqrt(2) so that |t| stays small.
    V m = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x(0x000FFFFFFFFFFFFFLL)),
                                              _mm256_set1_epi64x(0x3FF0000000000000LL)));
    const V above = _mm256_cmp_pd(m, splat(1.4142135623730951), _CMP_GT_OQ);
    m = _mm256_blendv_pd(m, _mm256_mul_pd(m, splat(0.5)), above);
    e = _mm256_add_pd(e, _mm256_and_pd(above, splat(1.0)));
    const V t = _mm256_div_pd(_mm256_sub_pd(m, splat(1.0)), _mm256_add_pd(m, splat(1.0)));
    const V t2 = _mm256_mul_pd(t, t);
    static constexpr double kAtanh[] = {1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                        1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21};
    const V p = estrin(t2, kAtanh);
    // log m = 2t + 2t * t2 * p, keeping the leading term exact-ish.
    const V two_t = _mm256_add_pd(t, t);
    const V log_m = _mm256_fmadd_pd(_mm256_mul_pd(two_t, t2), p, two_t);
    return _mm256_fmadd_pd(e, splat(kLn2Hi), _mm256_fmadd_pd(e, splat(kLn2Lo), log_m));
}

// --- exp -------------------------------------------------------------------------------------
__attribute__((always_inline)) inline V vexp(V x) {
    const V k = _mm256_round_pd(_mm256_mul_pd(x, splat(1.4426950408889634)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V r = _mm256_fnmadd_pd(k, splat(kLn2Lo), _mm256_fnmadd_pd(k, splat(kLn2Hi), x));
    static constexpr double kExp[] = {1.0,
                                      1.0,
                                      1.0 / 2,
                                      1.0 / 6,
                                      1.0 / 24,
                                      1.0 / 120,
                                      1.0 / 720,
                                      1.0 / 5040,
                                      1.0 / 40320,
                                      1.0 / 362880,
                                      1.0 / 3628800,
                                      1.0 / 39916800,
                                      1.0 / 479001600,
                                      1.0 / 6227020800};   // 1/i!, i = 0..13
    const V p = estrin(r, kExp);
    // 2^k: k + (2^52 + 2^51) puts k in the low mantissa bits; shift it into the exponent.
    const __m256i ki = _mm256_castpd_si256(_mm256_add_pd(k, splat(6755399441055744.0)));
    const __m256i scale = _mm256_slli_epi64(ki, 52);
    return _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(p), scale));
}

// --- sin/cos of 2 pi b / 2^32 -----------------------------------------------------------------
struct SinCos {
    V s, c;
};

__attribute__((always_inline)) inline SinCos vsincos_turns(__m128i b) {
    const __m128i octant = _mm_srli_epi32(b, 29);
    const __m128i rest = _mm_and_si128(b, _mm_set1_epi32(0x1FFFFFFF));
    const __m128i odd = _mm_and_si128(octant, _mm_set1_epi32(1));
    // Odd octants: reflect, phi = (2^29 - rest) units; exact in int32.
    const __m128i odd_mask = _mm_cmpeq_epi32(odd, _mm_set1_epi32(1));
    const __m128i units = _mm_blendv_epi8(rest, _mm_sub_epi32(_mm_set1_epi32(0x20000000), rest), odd_mask);
    const V phi = _mm256_mul_pd(_mm256_cvtepi32_pd(units), splat(1.4629180792671596e-09));   // (pi/4) / 2^29
    const V p2 = _mm256_mul_pd(phi, phi);
    // sin phi = phi (1 - p2/3! + p2^2/5! - ... - p2^8/17!), cos phi = 1 - p2/2! + ... + p2^9/18!
    static constexpr double kSin[] = {1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800,
                                      1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000};
    static constexpr double kCos[] = {1.0, -1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800,
                                      1.0 / 479001600, -1.0 / 87178291200, 1.0 / 20922789888000,
                                      -1.0 / 6402373705728000};
    const V s = _mm256_mul_pd(estrin(p2, kSin), phi);
    const V c = estrin(p2, kCos);
    // Within the quadrant the angle is phi (even octant) or pi/2 - phi (odd): swap sin and cos.
    const V swap = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(odd_mask));
    const V s_q = _mm256_blendv_pd(s, c, swap), c_q = _mm256_blendv_pd(c, s, swap);
    // Quadrant j = octant >> 1: (s, c) -> (s, c), (c, -s), (-s, -c), (-c, s).
    const __m128i quadrant = _mm_srli_epi32(octant, 1);
    const V q1 = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_and_si128(
        _mm_cmpeq_epi32(_mm_and_si128(quadrant, _mm_set1_epi32(1)), _mm_set1_epi32(1)), _mm_set1_epi32(-1))));
    const V sin_neg = _mm256_castsi256_pd(_mm256_slli_epi64(
        _mm256_cvtepi32_epi64(_mm_srli_epi32(quadrant, 1)), 63));                          // quadrants 2, 3
    const V cos_neg = _mm256_castsi256_pd(_mm256_slli_epi64(
        _mm256_cvtepi32_epi64(_mm_and_si128(_mm_xor_si128(quadrant, _mm_srli_epi32(quadrant, 1)),
                                            _mm_set1_epi32(1))), 63));                      // quadrants 1, 2
    SinCos out;
    out.s = _mm256_xor_pd(_mm256_blendv_pd(s_q, c_q, q1), sin_neg);
    out.c = _mm256_xor_pd(_mm256_blendv_pd(c_q, s_q, q1), cos_neg);
    return out;
}

// u32 lanes to doubles (exact).
__attribute__((always_inline)) inline V u32_to_double(__m128i v) {
    const __m256i wide = _mm256_cvtepu32_epi64(v);
    return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(wide, _mm256_set1_epi64x(0x4330000000000000LL))),
                         splat(4503599627370496.0));
}

// Four Box-Muller pairs from eight raw outputs (a0 b0 a1 b1 ...): returns cos and sin parts.
__attribute__((always_inline)) inline SinCos box_muller4(const std::uint32_t* raw) {
    const __m256i ab = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(raw));
    // Even 32-bit lanes are a, odd lanes b.
    const __m256i gather = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256i split = _mm256_permutevar8x32_epi32(ab, gather);
    const __m128i a = _mm256_castsi256_si128(split), b = _mm256_extracti128_si256(split, 1);
    const V u1 = _mm256_mul_pd(_mm256_add_pd(u32_to_double(a), splat(0.5)), splat(0x1p-32));
    const V radius = _mm256_sqrt_pd(_mm256_mul_pd(splat(-2.0), vlog(u1)));
    const SinCos angle = vsincos_turns(b);
    return {_mm256_mul_pd(radius, angle.s), _mm256_mul_pd(radius, angle.c)};
}

// Loads/stores of a possibly partial vector (count < 4 pads with `fill`).
inline V load(const double* p, std::size_t count, double fill = 0.0) {
    if (count >= 4) return _mm256_loadu_pd(p);
    double tmp[4] = {fill, fill, fill, fill};
    std::memcpy(tmp, p, count * sizeof(double));
    return _mm256_loadu_pd(tmp);
}
inline void store(double* p, V v, std::size_t count) {
    if (count >= 4) {
        _mm256_storeu_pd(p, v);
        return;
    }
    double tmp[4];
    _mm256_storeu_pd(tmp, v);
    std::memcpy(p, tmp, count * sizeof(double));
}

inline V vabs(V v) { return _mm256_andnot_pd(splat(-0.0), v); }
inline V vclamp(V v, double lo, double hi) { return _mm256_min_pd(_mm256_max_pd(v, splat(lo)), splat(hi)); }

// The PCM-like nu parameters from log(max(g/g_max, 1e-7)) (aihwkit pcm.py).
inline V nu_mean(V log_x) { return vclamp(_mm256_fmadd_pd(splat(-0.0155), log_x, splat(0.0244)), 0.049, 0.1); }
inline V nu_std(V log_x) { return vclamp(_mm256_fmadd_pd(splat(-0.0125), log_x, splat(-0.0059)), 0.008, 0.045); }

// Q_s = min(0.0088 / max(x^0.65, 1e-3), 0.2) with x = g/g_max.  For x < 0.0082 the min gives
// 0.2 whatever the max does, so log x is taken of max(x, 1e-3), which keeps it finite at g = 0.
// (x >= 1e-3 makes x^0.65 >= 0.011, so the inner max(., 1e-3) never acts and 0.0088 / x^0.65 is
// 0.0088 * exp(-0.65 log x), one division fewer.)
__attribute__((always_inline)) inline V read_q(V g, double g_max) {
    const V x = _mm256_max_pd(_mm256_mul_pd(vabs(g), splat(1.0 / g_max)), splat(1e-3));
    return _mm256_min_pd(_mm256_mul_pd(splat(0.0088), vexp(_mm256_mul_pd(splat(-0.65), vlog(x)))), splat(0.2));
}

// Even and odd elements of the 8 doubles in (a, b), in order (g+ and g- of four weights).
inline V evens(V a, V b) { return _mm256_permute4x64_pd(_mm256_unpacklo_pd(a, b), 0xD8); }
inline V odds(V a, V b) { return _mm256_permute4x64_pd(_mm256_unpackhi_pd(a, b), 0xD8); }

__attribute__((always_inline)) inline V read_one(const PcmLikeBlock& c, V g_start, V nu, V z, double log_time, double read_factor) {
    const V g_drift = _mm256_mul_pd(g_start, vexp(_mm256_mul_pd(_mm256_sub_pd(_mm256_setzero_pd(), nu), splat(log_time))));
    const V sigma = _mm256_mul_pd(_mm256_mul_pd(vabs(g_drift), read_q(g_start, c.g_max)), splat(read_factor));
    return _mm256_max_pd(_mm256_setzero_pd(),
                         _mm256_fmadd_pd(_mm256_mul_pd(splat(c.read_noise_scale), sigma), z, g_drift));
}

}  // namespace

void log(const double* x, double* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 4) store(out + i, vlog(load(x + i, n - i, 1.0)), n - i);
}

void exp(const double* x, double* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 4) store(out + i, vexp(load(x + i, n - i)), n - i);
}

void sincos_turns(const std::uint32_t* b, double* sin_out, double* cos_out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 4) {
        std::uint32_t lanes[4] = {0, 0, 0, 0};
        std::memcpy(lanes, b + i, (n - i < 4 ? n - i : 4) * sizeof(std::uint32_t));
        const SinCos r = vsincos_turns(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lanes)));
        store(sin_out + i, r.s, n - i);
        store(cos_out + i, r.c, n - i);
    }
}

void box_muller(const std::uint32_t* raw, double* z, std::size_t n) {
    const std::size_t pairs = (n + 1) / 2;
    std::size_t j = 0;
    for (; j + 4 <= pairs && 2 * j + 8 <= n; j += 4) {   // whole groups of four pairs
        const SinCos r = box_muller4(raw + 2 * j);
        // Interleave: z[2j] = cos, z[2j+1] = sin.
        const V lo = _mm256_unpacklo_pd(r.c, r.s), hi = _mm256_unpackhi_pd(r.c, r.s);
        _mm256_storeu_pd(z + 2 * j, _mm256_permute2f128_pd(lo, hi, 0x20));
        _mm256_storeu_pd(z + 2 * j + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
    }
    if (j == pairs) return;
    std::uint32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};   // the last, partial group
    std::memcpy(lanes, raw + 2 * j, 2 * (pairs - j) * sizeof(std::uint32_t));
    const SinCos r = box_muller4(lanes);
    const V lo = _mm256_unpacklo_pd(r.c, r.s), hi = _mm256_unpackhi_pd(r.c, r.s);
    double out[8];
    _mm256_storeu_pd(out, _mm256_permute2f128_pd(lo, hi, 0x20));
    _mm256_storeu_pd(out + 4, _mm256_permute2f128_pd(lo, hi, 0x31));
    std::memcpy(z + 2 * j, out, (n - 2 * j) * sizeof(double));
}

void pcm_like_program(const PcmLikeBlock& c, const double* g_target, const double* z_prog, const double* z_nu,
                      std::size_t devices, double* g_prog, double* nu) {
    for (std::size_t i = 0; i < devices; i += 4) {
        const std::size_t count = devices - i;
        const V g = load(g_target + i, count);
        const V x = _mm256_mul_pd(g, splat(1.0 / c.g_max));
        V sigma = splat(c.prog_coeff[c.prog_coeff_count - 1]);
        for (int k = c.prog_coeff_count - 2; k >= 0; --k) sigma = _mm256_fmadd_pd(sigma, x, splat(c.prog_coeff[k]));
        sigma = _mm256_mul_pd(sigma, splat(c.prog_sigma_scale * c.prog_noise_scale));
        store(g_prog + i, _mm256_max_pd(_mm256_setzero_pd(), _mm256_fmadd_pd(sigma, load(z_prog + i, count), g)), count);
        const V log_x = vlog(_mm256_max_pd(vabs(x), splat(1e-7)));
        const V n = vabs(_mm256_fmadd_pd(nu_std(log_x), load(z_nu + i, count), nu_mean(log_x)));
        store(nu + i, _mm256_mul_pd(splat(c.drift_scale), n), count);
    }
}

void pcm_like_read(const PcmLikeBlock& c, double log_time, double read_factor, const double* g_start,
                   const double* nu, const double* z_read, std::size_t devices, double* g_out) {
    for (std::size_t i = 0; i < devices; i += 4) {
        const std::size_t count = devices - i;
        store(g_out + i,
              read_one(c, load(g_start + i, count), load(nu + i, count), load(z_read + i, count), log_time, read_factor),
              count);
    }
}

void pcm_like_read_reconverted(const PcmLikeBlock& c, double log_time, double read_factor, double scale_prog,
                               double scale_read, const double* g_prog, const double* nu, const double* z_read,
                               std::size_t weights, double* g_out, double* w_out) {
    for (std::size_t i = 0; i < weights; i += 4) {
        const std::size_t count = weights - i;
        // Devices of 4 weights: [g+0 g-0 g+1 g-1] [g+2 g-2 g+3 g-3] -> g+ and g- vectors.
        const V d0 = load(g_prog + 2 * i, 2 * count), d1 = load(g_prog + 2 * i + 4, count > 2 ? 2 * count - 4 : 0);
        const V n0 = load(nu + 2 * i, 2 * count), n1 = load(nu + 2 * i + 4, count > 2 ? 2 * count - 4 : 0);
        const V z0 = load(z_read + 2 * i, 2 * count), z1 = load(z_read + 2 * i + 4, count > 2 ? 2 * count - 4 : 0);
        const V g_plus = evens(d0, d1), g_minus = odds(d0, d1);
        // w_prog as convert_back computes it: ((g+ - 0) - (g- - 0)) / scale_prog.
        const V w_prog = _mm256_div_pd(_mm256_sub_pd(g_plus, g_minus), splat(scale_prog));
        const V positive = _mm256_cmp_pd(w_prog, _mm256_setzero_pd(), _CMP_GE_OQ);
        const V g_start = _mm256_min_pd(_mm256_mul_pd(vabs(w_prog), splat(scale_read)), splat(c.g_max));
        const V nu_on = _mm256_blendv_pd(odds(n0, n1), evens(n0, n1), positive);
        const V z_on = _mm256_blendv_pd(odds(z0, z1), evens(z0, z1), positive);
        const V g_on = read_one(c, g_start, nu_on, z_on, log_time, read_factor);
        const V zero = _mm256_setzero_pd();
        const V g_p = _mm256_blendv_pd(zero, g_on, positive), g_m = _mm256_blendv_pd(g_on, zero, positive);
        if (w_out) store(w_out + i, _mm256_div_pd(_mm256_sub_pd(g_p, g_m), splat(scale_read)), count);
        if (g_out) {
            const V lo = _mm256_unpacklo_pd(g_p, g_m), hi = _mm256_unpackhi_pd(g_p, g_m);
            store(g_out + 2 * i, _mm256_permute2f128_pd(lo, hi, 0x20), 2 * count);
            if (count > 2) store(g_out + 2 * i + 4, _mm256_permute2f128_pd(lo, hi, 0x31), 2 * count - 4);
        }
    }
}

// SinglePairConverter::convert_into on the vector unit: the same expression per weight as its
// scalar loop (a product, std::clamp's two comparisons, a sum), which the compiler vectorises
// for this file's ISA; every operation is exact IEEE, so the values are the scalar loop's.
void single_pair_convert(const double* w, std::size_t n, double scale, double g_max, double g_min, double* g) {
    for (std::size_t i = 0; i < n; ++i) {
        const double plus = w[i] * scale, minus = -w[i] * scale;
        g[2 * i] = (plus < 0.0 ? 0.0 : g_max < plus ? g_max : plus) + g_min;
        g[2 * i + 1] = (minus < 0.0 ? 0.0 : g_max < minus ? g_max : minus) + g_min;
    }
}

}  // namespace aimcemu::noise::simd::avx2

AIMCEMU_ISA_END()
