// AVX-512 implementation of noise_models/simd.hpp (simd_kernels.hpp's avx512::): eight doubles
// per step, the same operations per element as simd_avx2.cpp, so the results are bit-identical.
//
// Compiled for AVX-512 F/DQ/VL through a target pragma and entered only through simd.cpp's
// dispatch, after a CPU check.  Like the AVX2 file it uses no standard-library templates (no
// AVX-512 code can be merged into inline functions that run elsewhere) and works lane by lane;
// a partial last vector is loaded and stored under a lane mask instead of through a padded copy
// (masked-off lanes compute on zeros, or ones for log, and are never stored).
//
// Keeping the bits equal to AVX2's: every AVX2 step maps to the AVX-512 instruction with the same
// IEEE result (fmadd, div, sqrt, round-to-nearest via roundscale, min/max with the same operand
// order); AVX2's blendv selections become mask blends on the same comparisons; the exact
// u32 -> double conversion uses vcvtudq2pd instead of the 2^52 trick (both exact).  The math and
// its coefficients are simd_avx2.cpp's; see there for the derivations.
#include <immintrin.h>

#include <cstdint>

#include "noise_models/simd_kernels.hpp"
#include "common/isa_target.hpp"

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx512f,avx512dq,avx512vl,avx2,fma")

namespace aimcemu::noise::simd::avx512 {
namespace {

using V = __m512d;
using Mask = __mmask8;

inline V splat(double v) { return _mm512_set1_pd(v); }

// The lanes [0, count) of a vector (all eight when count >= 8).
inline Mask lanes(std::size_t count) { return count >= 8 ? Mask(0xFF) : Mask((1u << count) - 1u); }

// Estrin's scheme, the same tree of FMAs as simd_avx2.cpp's estrin().
template <int N>
__attribute__((always_inline)) inline V estrin(V x, const double (&c)[N]) {
    static_assert(N >= 2 && N <= 16, "estrin: 2..16 coefficients");
    V level[8];
    int count = 0;
    for (int i = 0; i < N; i += 2)
        level[count++] = i + 1 < N ? _mm512_fmadd_pd(splat(c[i + 1]), x, splat(c[i])) : splat(c[i]);
    V power = _mm512_mul_pd(x, x);
    while (count > 1) {
        int next = 0;
        for (int i = 0; i < count; i += 2) level[next++] = i + 1 < count ? _mm512_fmadd_pd(level[i + 1], power, level[i]) : level[i];
        count = next;
        if (count > 1) power = _mm512_mul_pd(power, power);
    }
    return level[0];
}

// --- log -------------------------------------------------------------------------------------
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;

__attribute__((always_inline)) inline V vlog(V x) {
    const __m512i bits = _mm512_castpd_si512(x);
    const __m512i field = _mm512_srli_epi64(bits, 52);
    V e = _mm512_sub_pd(_mm512_castsi512_pd(_mm512_or_si512(field, _mm512_set1_epi64(0x4330000000000000LL))),
                        splat(4503599627370496.0 + 1023.0));
    V m = _mm512_castsi512_pd(_mm512_or_si512(_mm512_and_si512(bits, _mm512_set1_epi64(0x000FFFFFFFFFFFFFLL)),
                                              _mm512_set1_epi64(0x3FF0000000000000LL)));
    const Mask above = _mm512_cmp_pd_mask(m, splat(1.4142135623730951), _CMP_GT_OQ);
    m = _mm512_mask_blend_pd(above, m, _mm512_mul_pd(m, splat(0.5)));
    // AVX2 adds (above & 1.0), i.e. 1.0 or +0.0; e + 0.0 is e (e is never -0.0).
    e = _mm512_add_pd(e, _mm512_maskz_mov_pd(above, splat(1.0)));
    const V t = _mm512_div_pd(_mm512_sub_pd(m, splat(1.0)), _mm512_add_pd(m, splat(1.0)));
    const V t2 = _mm512_mul_pd(t, t);
    static constexpr double kAtanh[] = {1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,  1.0 / 11,
                                        1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19, 1.0 / 21};
    const V p = estrin(t2, kAtanh);
    const V two_t = _mm512_add_pd(t, t);
    const V log_m = _mm512_fmadd_pd(_mm512_mul_pd(two_t, t2), p, two_t);
    return _mm512_fmadd_pd(e, splat(kLn2Hi), _mm512_fmadd_pd(e, splat(kLn2Lo), log_m));
}

// --- exp -------------------------------------------------------------------------------------
__attribute__((always_inline)) inline V vexp(V x) {
    // roundscale with scale 0 and round-to-nearest-even is AVX2's _mm256_round_pd(TO_NEAREST_INT).
    const V k = _mm512_roundscale_pd(_mm512_mul_pd(x, splat(1.4426950408889634)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V r = _mm512_fnmadd_pd(k, splat(kLn2Lo), _mm512_fnmadd_pd(k, splat(kLn2Hi), x));
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
                                      1.0 / 6227020800};
    const V p = estrin(r, kExp);
    const __m512i ki = _mm512_castpd_si512(_mm512_add_pd(k, splat(6755399441055744.0)));
    const __m512i scale = _mm512_slli_epi64(ki, 52);
    return _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(p), scale));
}

// --- sin/cos of 2 pi b / 2^32 -----------------------------------------------------------------
struct SinCos {
    V s, c;
};

// Flips the sign of the lanes in `mask` (AVX2 XORs the sign bit in the same lanes).
inline V negate(V v, Mask mask) { return _mm512_mask_xor_pd(v, mask, v, splat(-0.0)); }

__attribute__((always_inline)) inline SinCos vsincos_turns(__m256i b) {
    const __m256i octant = _mm256_srli_epi32(b, 29);
    const __m256i rest = _mm256_and_si256(b, _mm256_set1_epi32(0x1FFFFFFF));
    const __m256i one = _mm256_set1_epi32(1);
    const Mask odd = _mm256_cmpeq_epi32_mask(_mm256_and_si256(octant, one), one);
    const __m256i units = _mm256_mask_blend_epi32(odd, rest, _mm256_sub_epi32(_mm256_set1_epi32(0x20000000), rest));
    const V phi = _mm512_mul_pd(_mm512_cvtepi32_pd(units), splat(1.4629180792671596e-09));
    const V p2 = _mm512_mul_pd(phi, phi);
    static constexpr double kSin[] = {1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800,
                                      1.0 / 6227020800, -1.0 / 1307674368000, 1.0 / 355687428096000};
    static constexpr double kCos[] = {1.0, -1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800,
                                      1.0 / 479001600, -1.0 / 87178291200, 1.0 / 20922789888000,
                                      -1.0 / 6402373705728000};
    const V s = _mm512_mul_pd(estrin(p2, kSin), phi);
    const V c = estrin(p2, kCos);
    const V s_q = _mm512_mask_blend_pd(odd, s, c), c_q = _mm512_mask_blend_pd(odd, c, s);
    const __m256i quadrant = _mm256_srli_epi32(octant, 1);
    const Mask q1 = _mm256_cmpeq_epi32_mask(_mm256_and_si256(quadrant, one), one);
    const Mask sin_neg = _mm256_cmpeq_epi32_mask(_mm256_srli_epi32(quadrant, 1), one);   // quadrants 2, 3
    const Mask cos_neg = _mm256_cmpeq_epi32_mask(
        _mm256_and_si256(_mm256_xor_si256(quadrant, _mm256_srli_epi32(quadrant, 1)), one), one);   // quadrants 1, 2
    SinCos out;
    out.s = negate(_mm512_mask_blend_pd(q1, s_q, c_q), sin_neg);
    out.c = negate(_mm512_mask_blend_pd(q1, c_q, s_q), cos_neg);
    return out;
}

// Eight Box-Muller pairs from sixteen raw outputs (a0 b0 a1 b1 ...): cos and sin parts.
__attribute__((always_inline)) inline SinCos box_muller8(__m512i ab) {
    const __m512i gather = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    const __m512i split = _mm512_permutexvar_epi32(gather, ab);
    const __m256i a = _mm512_castsi512_si256(split), b = _mm512_extracti64x4_epi64(split, 1);
    const V u1 = _mm512_mul_pd(_mm512_add_pd(_mm512_cvtepu32_pd(a), splat(0.5)), splat(0x1p-32));
    const V radius = _mm512_sqrt_pd(_mm512_mul_pd(splat(-2.0), vlog(u1)));
    const SinCos angle = vsincos_turns(b);
    return {_mm512_mul_pd(radius, angle.s), _mm512_mul_pd(radius, angle.c)};
}

// Interleaves two vectors: lo = a0 b0 a1 b1 a2 b2 a3 b3, hi = a4 b4 ... a7 b7.
inline V interleave_lo(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), b); }
inline V interleave_hi(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15), b); }
// Even and odd elements of the 16 doubles in (a, b), in order (g+ and g- of eight weights).
inline V evens(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), b); }
inline V odds(V a, V b) { return _mm512_permutex2var_pd(a, _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15), b); }

inline V load(const double* p, std::size_t count, double fill = 0.0) {
    if (count >= 8) return _mm512_loadu_pd(p);
    return _mm512_mask_loadu_pd(splat(fill), lanes(count), p);
}
inline void store(double* p, V v, std::size_t count) {
    if (count >= 8) {
        _mm512_storeu_pd(p, v);
        return;
    }
    _mm512_mask_storeu_pd(p, lanes(count), v);
}

inline V vabs(V v) { return _mm512_andnot_pd(splat(-0.0), v); }
inline V vclamp(V v, double lo, double hi) { return _mm512_min_pd(_mm512_max_pd(v, splat(lo)), splat(hi)); }

inline V nu_mean(V log_x) { return vclamp(_mm512_fmadd_pd(splat(-0.0155), log_x, splat(0.0244)), 0.049, 0.1); }
inline V nu_std(V log_x) { return vclamp(_mm512_fmadd_pd(splat(-0.0125), log_x, splat(-0.0059)), 0.008, 0.045); }

__attribute__((always_inline)) inline V read_q(V g, double g_max) {
    const V x = _mm512_max_pd(_mm512_mul_pd(vabs(g), splat(1.0 / g_max)), splat(1e-3));
    return _mm512_min_pd(_mm512_mul_pd(splat(0.0088), vexp(_mm512_mul_pd(splat(-0.65), vlog(x)))), splat(0.2));
}

__attribute__((always_inline)) inline V read_one(const PcmLikeBlock& c, V g_start, V nu, V z, double log_time, double read_factor) {
    const V g_drift = _mm512_mul_pd(g_start, vexp(_mm512_mul_pd(_mm512_sub_pd(_mm512_setzero_pd(), nu), splat(log_time))));
    const V sigma = _mm512_mul_pd(_mm512_mul_pd(vabs(g_drift), read_q(g_start, c.g_max)), splat(read_factor));
    return _mm512_max_pd(_mm512_setzero_pd(),
                         _mm512_fmadd_pd(_mm512_mul_pd(splat(c.read_noise_scale), sigma), z, g_drift));
}

}  // namespace

void log(const double* x, double* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 8) store(out + i, vlog(load(x + i, n - i, 1.0)), n - i);
}

void exp(const double* x, double* out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 8) store(out + i, vexp(load(x + i, n - i)), n - i);
}

void sincos_turns(const std::uint32_t* b, double* sin_out, double* cos_out, std::size_t n) {
    for (std::size_t i = 0; i < n; i += 8) {
        const __m256i v = _mm256_maskz_loadu_epi32(lanes(n - i), b + i);
        const SinCos r = vsincos_turns(v);
        store(sin_out + i, r.s, n - i);
        store(cos_out + i, r.c, n - i);
    }
}

void box_muller(const std::uint32_t* raw, double* z, std::size_t n) {
    const std::size_t pairs = (n + 1) / 2;
    for (std::size_t j = 0; j < pairs; j += 8) {
        const std::size_t group = pairs - j < 8 ? pairs - j : 8;   // pairs in this group
        const __m512i ab = group == 8 ? _mm512_loadu_si512(raw + 2 * j)
                                      : _mm512_maskz_loadu_epi32(__mmask16((1u << (2 * group)) - 1u), raw + 2 * j);
        const SinCos r = box_muller8(ab);
        // z[2j] = cos, z[2j+1] = sin; n - 2j values remain (odd n drops the last sine).
        const std::size_t left = n - 2 * j;
        store(z + 2 * j, interleave_lo(r.c, r.s), left);
        if (left > 8) store(z + 2 * j + 8, interleave_hi(r.c, r.s), left - 8);
    }
}

void pcg32_outputs(std::uint64_t& state, std::uint64_t increment, std::uint32_t* out, std::size_t n) {
    constexpr std::uint64_t a = 6364136223846793005ULL;   // pcg32's LCG multiplier
    // Lane k holds the state k steps ahead; all eight step by A^8 and C (A^7 + ... + A + 1).
    std::uint64_t lane[8], a8 = 1, c8 = 0;
    lane[0] = state;
    for (int k = 1; k < 8; ++k) lane[k] = lane[k - 1] * a + increment;
    for (int k = 0; k < 8; ++k) {
        c8 = c8 * a + increment;
        a8 *= a;
    }
    __m512i s = _mm512_loadu_si512(lane);
    const __m512i mul = _mm512_set1_epi64(std::int64_t(a8)), add = _mm512_set1_epi64(std::int64_t(c8));
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        // XSH-RR: rotate the 32 bits ((s >> 18) ^ s) >> 27 right by s >> 59.
        const __m256i xorshifted = _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_xor_si512(_mm512_srli_epi64(s, 18), s), 27));
        const __m256i rot = _mm512_cvtepi64_epi32(_mm512_srli_epi64(s, 59));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_rorv_epi32(xorshifted, rot));
        s = _mm512_add_epi64(_mm512_mullo_epi64(s, mul), add);
    }
    _mm512_storeu_si512(lane, s);
    std::uint64_t next = lane[0];   // the state after the i outputs written
    for (; i < n; ++i) {
        const auto xorshifted = std::uint32_t(((next >> 18u) ^ next) >> 27u);
        const auto rot = std::uint32_t(next >> 59u);
        out[i] = (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
        next = next * a + increment;
    }
    state = next;
}

namespace {
// One vector of devices programmed, given ln of the clipped relative conductance of each.
__attribute__((always_inline)) inline void program8(const PcmLikeBlock& c, V g, V x, V log_x, const double* z_prog,
                                                    const double* z_nu, std::size_t count, double* g_prog, double* nu) {
    V sigma = splat(c.prog_coeff[c.prog_coeff_count - 1]);
    for (int k = c.prog_coeff_count - 2; k >= 0; --k) sigma = _mm512_fmadd_pd(sigma, x, splat(c.prog_coeff[k]));
    sigma = _mm512_mul_pd(sigma, splat(c.prog_sigma_scale * c.prog_noise_scale));
    store(g_prog, _mm512_max_pd(_mm512_setzero_pd(), _mm512_fmadd_pd(sigma, load(z_prog, count), g)), count);
    const V n = vabs(_mm512_fmadd_pd(nu_std(log_x), load(z_nu, count), nu_mean(log_x)));
    store(nu, _mm512_mul_pd(splat(c.drift_scale), n), count);
}

// The logarithm's argument: |x| clipped below at aihwkit's floor.
inline V clipped(V x) { return _mm512_max_pd(vabs(x), splat(1e-7)); }
}  // namespace

// Sixteen devices at a time where it pays: a pair's "off" device (g = 0, the other sign of a
// single pair) sits at the floor, whose logarithm is one constant; when every (even, odd) pair of
// the sixteen has a device at the floor, one vlog over the other devices gives all sixteen
// logarithms.  vlog works lane by lane, so each device's logarithm has the same bits as before
// (and as the AVX2 path's), whichever device of its pair it is.
void pcm_like_program(const PcmLikeBlock& c, const double* g_target, const double* z_prog, const double* z_nu,
                      std::size_t devices, double* g_prog, double* nu) {
    const V floor = splat(1e-7);
    const V log_floor = vlog(floor);
    const V inv_g_max = splat(1.0 / c.g_max);
    std::size_t i = 0;
    for (; i + 16 <= devices; i += 16) {
        const V g0 = _mm512_loadu_pd(g_target + i), g1 = _mm512_loadu_pd(g_target + i + 8);
        const V x0 = _mm512_mul_pd(g0, inv_g_max), x1 = _mm512_mul_pd(g1, inv_g_max);
        const V a0 = clipped(x0), a1 = clipped(x1);
        const V even = evens(a0, a1), odd = odds(a0, a1);
        const Mask even_floor = _mm512_cmp_pd_mask(even, floor, _CMP_EQ_OQ);
        const Mask odd_floor = _mm512_cmp_pd_mask(odd, floor, _CMP_EQ_OQ);
        V log0, log1;
        if (Mask(even_floor | odd_floor) == Mask(0xFF)) {
            const V log_on = vlog(_mm512_mask_blend_pd(even_floor, even, odd));   // the device not at the floor
            const V log_even = _mm512_mask_blend_pd(even_floor, log_on, log_floor);
            const V log_odd = _mm512_mask_blend_pd(odd_floor, log_on, log_floor);
            log0 = interleave_lo(log_even, log_odd);
            log1 = interleave_hi(log_even, log_odd);
        } else {
            log0 = vlog(a0);
            log1 = vlog(a1);
        }
        program8(c, g0, x0, log0, z_prog + i, z_nu + i, 8, g_prog + i, nu + i);
        program8(c, g1, x1, log1, z_prog + i + 8, z_nu + i + 8, 8, g_prog + i + 8, nu + i + 8);
    }
    for (; i < devices; i += 8) {
        const std::size_t count = devices - i;
        const V g = load(g_target + i, count);
        const V x = _mm512_mul_pd(g, inv_g_max);
        program8(c, g, x, vlog(clipped(x)), z_prog + i, z_nu + i, count, g_prog + i, nu + i);
    }
}

void pcm_like_read(const PcmLikeBlock& c, double log_time, double read_factor, const double* g_start,
                   const double* nu, const double* z_read, std::size_t devices, double* g_out) {
    for (std::size_t i = 0; i < devices; i += 8) {
        const std::size_t count = devices - i;
        store(g_out + i,
              read_one(c, load(g_start + i, count), load(nu + i, count), load(z_read + i, count), log_time, read_factor),
              count);
    }
}

void pcm_like_read_reconverted(const PcmLikeBlock& c, double log_time, double read_factor, double scale_prog,
                               double scale_read, const double* g_prog, const double* nu, const double* z_read,
                               std::size_t weights, double* g_out, double* w_out) {
    for (std::size_t i = 0; i < weights; i += 8) {
        const std::size_t count = weights - i;
        const std::size_t first = 2 * count, second = count > 4 ? 2 * count - 8 : 0;   // devices in each half
        const V d0 = load(g_prog + 2 * i, first), d1 = load(g_prog + 2 * i + 8, second);
        const V n0 = load(nu + 2 * i, first), n1 = load(nu + 2 * i + 8, second);
        const V z0 = load(z_read + 2 * i, first), z1 = load(z_read + 2 * i + 8, second);
        const V g_plus = evens(d0, d1), g_minus = odds(d0, d1);
        const V w_prog = _mm512_div_pd(_mm512_sub_pd(g_plus, g_minus), splat(scale_prog));
        const Mask positive = _mm512_cmp_pd_mask(w_prog, _mm512_setzero_pd(), _CMP_GE_OQ);
        const V g_start = _mm512_min_pd(_mm512_mul_pd(vabs(w_prog), splat(scale_read)), splat(c.g_max));
        const V nu_on = _mm512_mask_blend_pd(positive, odds(n0, n1), evens(n0, n1));
        const V z_on = _mm512_mask_blend_pd(positive, odds(z0, z1), evens(z0, z1));
        const V g_on = read_one(c, g_start, nu_on, z_on, log_time, read_factor);
        const V zero = _mm512_setzero_pd();
        const V g_p = _mm512_mask_blend_pd(positive, zero, g_on), g_m = _mm512_mask_blend_pd(positive, g_on, zero);
        if (w_out) store(w_out + i, _mm512_div_pd(_mm512_sub_pd(g_p, g_m), splat(scale_read)), count);
        if (g_out) {
            store(g_out + 2 * i, interleave_lo(g_p, g_m), first);
            if (count > 4) store(g_out + 2 * i + 8, interleave_hi(g_p, g_m), second);
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

}  // namespace aimcemu::noise::simd::avx512

AIMCEMU_ISA_END()
