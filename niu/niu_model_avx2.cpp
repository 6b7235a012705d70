// AVX2 kernel of the NIU fast path (see niu_model.hpp): the same integer arithmetic as
// noisy_code(), eight streams (eight weights of a beat) per 256-bit vector.
//
// The round half's datapath and the stream generator are niu_simd_body.inc's, shared with the
// AVX-512BW kernel; this file defines the operations it is written in for eight 32-bit lanes
// (its table lookups are gathers), and holds what only AVX2 runs: the Gaussian ROM gathers, the
// chip half and the full model, and the loops over beats.
//
// This file is compiled for AVX2 through a target pragma and is only entered after
// detail::cpu_has_avx2() said yes.  It uses no standard-library templates inside the pragma, so
// no inline function compiled here for AVX2 can be merged into code that runs elsewhere.
//
// Layout: a layer is 32 streams (beat lanes) x kGens generators.  The kernel takes one group of
// eight streams at a time and walks the beats in blocks: first every generator of the group fills
// a block of outputs (its state stays in four registers), then the block's weights go through the
// datapath.  Every product fits a signed 32-bit lane (rtl/niu_gen.py checks the headroom).
#include <limits>
#include <immintrin.h>

#include <cstdint>

#include "niu/niu_model.hpp"
#include "common/isa_target.hpp"

namespace aimcemu::niu::detail {

bool cpu_has_avx2() { return __builtin_cpu_supports("avx2"); }

}  // namespace aimcemu::niu::detail

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx2")

namespace aimcemu::niu::detail {
namespace {

using namespace gen;

constexpr int kBlock = 64;  // beats per block

// Tables widened to 32-bit entries for vpgatherdd.
struct Tables {
    std::int32_t gauss_chip[NIU_GAUSS_ENTRIES];
    std::int32_t gauss_read[NIU_GAUSS_ENTRIES];
    // Two fields per entry, low | high << kTableFieldBits (niu_model.hpp).
    __m256i exp2[NIU_EXP_ENTRIES / 8];             // E[k] | D[k], eight entries per register
    std::int32_t code_lo[NIU_CODE_TABLE];          // GT | SP
    std::int32_t code_hi[NIU_CODE_TABLE];          // MU | SN
    std::int32_t read[NIU_RT_SEGMENTS];            // RT[j] | RD[j] (RD signed)
};

// --- The operations of niu_simd_body.inc, for eight 32-bit lanes ------------------------------
using I = __m256i;
using Negative = __m256i;  // all ones in the negative lanes, as vpcmpgtd gives it
using Normal = __m256i;    // one device's read normal per lane
constexpr std::size_t kLanes = 8;

inline I splat(int v) { return _mm256_set1_epi32(v); }
inline I add(I a, I b) { return _mm256_add_epi32(a, b); }
inline I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
inline I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
inline I min(I a, I b) { return _mm256_min_epi32(a, b); }
inline I max(I a, I b) { return _mm256_max_epi32(a, b); }
inline I and_(I a, I b) { return _mm256_and_si256(a, b); }
inline I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
inline I shift_right_arith(I v, int n) { return _mm256_srai_epi32(v, n); }
inline I shift_right(I v, int n) { return _mm256_srli_epi32(v, n); }
inline I shift_left(I v, int n) { return _mm256_slli_epi32(v, n); }
inline I shift_left_var(I v, I counts) { return _mm256_sllv_epi32(v, counts); }
template <int N> inline I rotate_left(I x) { return _mm256_or_si256(_mm256_slli_epi32(x, N), _mm256_srli_epi32(x, 32 - N)); }
inline I load_aligned(const std::uint32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store_aligned(std::uint32_t* p, I v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
// Eight uint16 widened to eight lanes.
inline I load_run(const std::uint16_t* src) { return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))); }

inline Negative greater(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
// vpsignd by -1 or 1: -v in the negative lanes.
inline I negate_where(I v, Negative neg) { return _mm256_sign_epi32(v, _mm256_or_si256(neg, _mm256_set1_epi32(1))); }
inline I times_normal(I sa, Normal z3) { return _mm256_mullo_epi32(sa, z3); }

// The 32-entry 2^-f ROM sits in four registers: permute each by k mod 8, pick by k >> 3.
static_assert(NIU_EXP_ENTRIES == 32, "the exp lookup below takes 32 entries");
inline I exp2_entry(const Tables& t, I x) {
    const I k = _mm256_and_si256(_mm256_srli_epi32(x, NIU_EXP_FRAC_BITS), _mm256_set1_epi32((1 << NIU_EXP_SEG_BITS) - 1));
    const I bit3 = _mm256_slli_epi32(k, 28), bit4 = _mm256_slli_epi32(k, 27);
    const I lo = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(t.exp2[0], k), _mm256_permutevar8x32_epi32(t.exp2[1], k),
                                    _mm256_srai_epi32(bit3, 31));
    const I hi = _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(t.exp2[2], k), _mm256_permutevar8x32_epi32(t.exp2[3], k),
                                    _mm256_srai_epi32(bit3, 31));
    return _mm256_blendv_epi8(lo, hi, _mm256_srai_epi32(bit4, 31));
}
inline I exp2_fraction(I x) { return _mm256_and_si256(x, _mm256_set1_epi32((1 << NIU_EXP_FRAC_BITS) - 1)); }
// The entry's high word, sign-extended (RD is signed; the 2^-f slopes are below 2^15), times f.
inline I slope_times(I entry, I fraction) { return _mm256_mullo_epi32(_mm256_srai_epi32(entry, kTableFieldBits), fraction); }

// IEEE-754 single precision: where the exponent field starts (23) and its bias (127).
constexpr int kFloatMantissaBits = std::numeric_limits<float>::digits - 1;
constexpr int kFloatExponentBias = std::numeric_limits<float>::max_exponent - 1;

struct SigmaEntry {
    I entry, fraction;
};
// The float exponent of max(gp, 1) is the octave, the mantissa the segment and fraction.
inline SigmaEntry read_sigma_entry(const Tables& t, I gp) {
    const I gbits = _mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_max_epi32(gp, _mm256_set1_epi32(1))));
    const I j = _mm256_sub_epi32(_mm256_srli_epi32(gbits, kFloatMantissaBits - NIU_RT_SEG_BITS),
                                 _mm256_set1_epi32(kFloatExponentBias << NIU_RT_SEG_BITS));
    const I fr = _mm256_and_si256(_mm256_srli_epi32(gbits, kFloatMantissaBits - NIU_RT_SEG_BITS - NIU_RT_FRAC_BITS),
                                  _mm256_set1_epi32((1 << NIU_RT_FRAC_BITS) - 1));
    return {_mm256_i32gather_epi32(t.read, j, 4), fr};
}

#include "niu/niu_simd_body.inc"

// --- AVX2 only: the chip half and the full model (the Gaussian ROMs gathered) -----------------

// Gaussian ROM index of UBits-bit uniforms (niu_rng.hpp gauss_index): the float conversion of v
// (exact below 2^24) holds the leading one's position in its exponent e (v = 0 converts to 0.0f,
// whose group comes out 0 after the clamp at 0); group = max(e - o + span - 1, 0) / span, as a
// multiply and a shift that exact_reciprocal proves exact for every x this width reaches;
// window = ((v << (wbits - 1)) >> (span g + o)) & (2^wbits - 1).
template <int UBits>
inline __m256i gaussian(const std::int32_t* rom, __m256i u) {
    constexpr int vbits = UBits - 1, wbits = NIU_GAUSS_WINDOW_BITS, span = NIU_GAUSS_GROUP_SPAN;
    constexpr int offset = (vbits - 1) % span;
    constexpr ExactReciprocal by_span = exact_reciprocal(span, gauss_group_numerator_max(UBits));
    static_assert(by_span.shift >= 0, "no exact multiply-shift division by the group span for this uniform width");
    static_assert(vbits <= kFloatMantissaBits + 1, "the float conversion of the magnitude must be exact");
    const __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(u, vbits), NIU_GAUSS_GROUP_BITS + wbits);
    const __m256i v = _mm256_and_si256(u, _mm256_set1_epi32((1 << vbits) - 1));
    const __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(v)), kFloatMantissaBits),
                                       _mm256_set1_epi32(kFloatExponentBias));
    const __m256i x = _mm256_max_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(span - 1 - offset)), _mm256_setzero_si256());
    const __m256i group = _mm256_srli_epi32(_mm256_mullo_epi32(x, _mm256_set1_epi32(std::int32_t(by_span.mul))), by_span.shift);
    const __m256i top = _mm256_add_epi32(_mm256_mullo_epi32(group, _mm256_set1_epi32(span)), _mm256_set1_epi32(offset));
    const __m256i window = _mm256_and_si256(_mm256_srlv_epi32(_mm256_slli_epi32(v, wbits - 1), top), _mm256_set1_epi32((1 << wbits) - 1));
    const __m256i index = _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi32(group, wbits)), window);
    return _mm256_i32gather_epi32(rom, index, 4);
}

struct Device {
    __m256i gt, sp, mu, sn;
};

struct Programmed {
    __m256i gp, nu;
};

// The chip half of eight devices (niu_model.cpp program_device).
inline Programmed program_device(const Device& d, __m256i z1, __m256i z2) {
    const __m256i gp = clamp(_mm256_add_epi32(d.gt, rshr(_mm256_mullo_epi32(d.sp, z1), NIU_Z_FRAC)), 0, NIU_G_MAX);
    const __m256i nu = _mm256_min_epi32(_mm256_abs_epi32(_mm256_add_epi32(d.mu, rshr(_mm256_mullo_epi32(d.sn, z2), NIU_Z_FRAC))),
                                        _mm256_set1_epi32(NIU_NU_MAX));
    return {gp, nu};
}

inline __m256i device(const Tables& t, const Device& d, __m256i z1, __m256i z2, __m256i z3, __m256i lt) {
    const Programmed p = program_device(d, z1, z2);
    return read_device(t, p.gp, p.nu, z3, lt);
}

// The chip normals of eight weights from the three chip generators' outputs (niu_rng.hpp
// split_uniforms): z1+, z1-, z2+, z2-.
struct ChipNormals {
    __m256i z1p, z1m, z2p, z2m;
};

inline ChipNormals chip_normals(const Tables& t, const __m256i* u) {
    constexpr int chip = NIU_GAUSS_CHIP_U_BITS, low_bits = kChipLowBits;
    static_assert(kChipGens == 3, "z2- packs the low bits of exactly three chip outputs");
    const __m256i low = _mm256_set1_epi32(std::int32_t(kChipLowMask));
    const __m256i packed = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(u[0], low), 2 * low_bits),
                                                           _mm256_slli_epi32(_mm256_and_si256(u[1], low), low_bits)),
                                           _mm256_and_si256(u[2], low));
    return {gaussian<chip>(t.gauss_chip, _mm256_srli_epi32(u[0], low_bits)),
            gaussian<chip>(t.gauss_chip, _mm256_srli_epi32(u[1], low_bits)),
            gaussian<chip>(t.gauss_chip, _mm256_srli_epi32(u[2], low_bits)), gaussian<chip>(t.gauss_chip, packed)};
}

// The read normals z3+ and z3- of eight weights from the read generator's outputs (the high
// and the low 16 bits).
struct ReadNormals {
    __m256i plus, minus;
};

inline ReadNormals read_normals(const Tables& t, __m256i u) {
    constexpr int read = NIU_GAUSS_READ_U_BITS;
    return {gaussian<read>(t.gauss_read, _mm256_srli_epi32(u, read)),
            gaussian<read>(t.gauss_read, _mm256_and_si256(u, _mm256_set1_epi32(std::int32_t(kReadLowMask))))};
}

// The g+ and g- device parameters of eight clean codes c (g+ is on for c >= 0, g- for c < 0).
struct PairDevices {
    __m256i neg;
    Device plus, minus;
};

inline PairDevices pair_devices(const Tables& t, __m256i c, const Device& off) {
    const __m256i neg = _mm256_cmpgt_epi32(_mm256_setzero_si256(), c);
    const __m256i a = _mm256_min_epi32(_mm256_abs_epi32(c), _mm256_set1_epi32(NIU_CODE_TABLE - 1));
    const __m256i lo = _mm256_i32gather_epi32(t.code_lo, a, 4);
    const __m256i hi = _mm256_i32gather_epi32(t.code_hi, a, 4);
    const Device on{low_field(lo), _mm256_srli_epi32(lo, kTableFieldBits), low_field(hi), _mm256_srli_epi32(hi, kTableFieldBits)};
    return {neg,
            {_mm256_blendv_epi8(on.gt, off.gt, neg), _mm256_blendv_epi8(on.sp, off.sp, neg),
             _mm256_blendv_epi8(on.mu, off.mu, neg), _mm256_blendv_epi8(on.sn, off.sn, neg)},
            {_mm256_blendv_epi8(off.gt, on.gt, neg), _mm256_blendv_epi8(off.sp, on.sp, neg),
             _mm256_blendv_epi8(off.mu, on.mu, neg), _mm256_blendv_epi8(off.sn, on.sn, neg)}};
}

// Eight weights of eight streams: uniforms u[g] of the four generators, clean codes c.
inline __m256i weights(const Tables& t, const __m256i* u, __m256i c, __m256i lt, __m256i back_k, int out_max,
                       const Device& off) {
    const ChipNormals z = chip_normals(t, u);
    const ReadNormals z3 = read_normals(t, u[3]);
    const PairDevices d = pair_devices(t, c, off);
    const __m256i g_plus = device(t, d.plus, z.z1p, z.z2p, z3.plus, lt);
    const __m256i g_minus = device(t, d.minus, z.z1m, z.z2m, z3.minus, lt);
    return code_of_pair(d.neg, g_plus, g_minus, back_k, out_max);
}

void fill_tables(Tables& t, const NiuLayerProgram& layer) {
    for (int i = 0; i < NIU_GAUSS_ENTRIES; ++i) {
        t.gauss_chip[i] = NIU_GAUSS_CHIP_ROM[std::size_t(i)];
        t.gauss_read[i] = NIU_GAUSS_READ_ROM[std::size_t(i)];
    }
    alignas(32) std::int32_t exp2[NIU_EXP_ENTRIES];
    for (int k = 0; k < NIU_EXP_ENTRIES; ++k) exp2[k] = NIU_EXP_VALUE[std::size_t(k)] | (NIU_EXP_SLOPE[std::size_t(k)] << kTableFieldBits);
    for (int r = 0; r < NIU_EXP_ENTRIES / 8; ++r) t.exp2[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(exp2 + 8 * r));
    for (int a = 0; a < NIU_CODE_TABLE; ++a) {
        const CodeEntry& e = layer.code[std::size_t(a)];
        t.code_lo[a] = e.gt | (e.sp << kTableFieldBits);
        t.code_hi[a] = e.mu | (e.sn << kTableFieldBits);
    }
    for (int j = 0; j < NIU_RT_SEGMENTS; ++j)
        t.read[j] = std::int32_t((std::uint32_t(layer.rt[std::size_t(j)]) & kTableFieldMask) |
                                 (std::uint32_t(layer.rd[std::size_t(j)]) << kTableFieldBits));
}

Device off_device(const NiuLayerProgram& layer) {
    return {_mm256_set1_epi32(layer.code[0].gt), _mm256_set1_epi32(layer.code[0].sp), _mm256_set1_epi32(layer.code[0].mu),
            _mm256_set1_epi32(layer.code[0].sn)};
}

// Eight clean codes at `base` (fewer at the layer's end, the rest read as 0).
inline __m256i load_codes(const std::int8_t* clean, std::uint64_t base, std::uint64_t count) {
    std::int64_t c8 = 0;
    if (base + 8 <= count) {
        __builtin_memcpy(&c8, clean + base, 8);
    } else {
        for (std::uint64_t i = base; i < count; ++i) c8 |= std::int64_t(std::uint8_t(clean[i])) << (8 * (i - base));
    }
    return _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(c8));
}

// Stores eight int32 codes (all in -127..127) as bytes at `base` (only those below count).
inline void store_codes(std::int8_t* out, __m256i codes, std::uint64_t base, std::uint64_t count) {
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(codes), _mm256_extracti128_si256(codes, 1));
    const std::int64_t o8 = _mm_cvtsi128_si64(_mm_packs_epi16(w16, w16));
    if (base + 8 <= count) {
        __builtin_memcpy(out + base, &o8, 8);
    } else {
        for (std::uint64_t i = base; i < count; ++i) out[i] = std::int8_t(o8 >> (8 * (i - base)));
    }
}

// Eight non-negative int32 values below 2^16 as eight uint16.
inline void store_u16(std::uint16_t* dst, __m256i v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

}  // namespace

void apply_beats_avx2(const NiuLayerProgram& layer, const std::int8_t* clean, std::int8_t* out, std::uint64_t first_beat,
                      std::uint64_t last_beat, RngState* states) {
    alignas(32) Tables t;
    fill_tables(t, layer);
    const Device off = off_device(layer);
    const __m256i lt = _mm256_set1_epi32(std::int32_t(layer.drift_lt));
    const __m256i back_k = _mm256_set1_epi32(std::int32_t(layer.back_k));
    const int out_max = (1 << (layer.out_bits - 1)) - 1;
    const std::uint64_t count = layer.count;

    alignas(32) std::uint32_t uni[kGens][kBlock][8];
    for (int group = 0; group < kStreams / 8; ++group) {
        for (std::uint64_t b0 = first_beat; b0 < last_beat; b0 += kBlock) {
            const int nb = int(last_beat - b0 < std::uint64_t(kBlock) ? last_beat - b0 : std::uint64_t(kBlock));
            // Two generators per pass: their dependency chains (five XOR/shift steps deep) overlap.
            static_assert(kGens % 2 == 0, "generators are stepped in pairs");
            for (int g = 0; g < kGens; g += 2) {
                StreamLanes x(states + g * kStreams + group * 8), y(states + (g + 1) * kStreams + group * 8);
                for (int b = 0; b < nb; ++b) {
                    _mm256_store_si256(reinterpret_cast<__m256i*>(uni[g][b]), x.next());
                    _mm256_store_si256(reinterpret_cast<__m256i*>(uni[g + 1][b]), y.next());
                }
                x.store(states + g * kStreams + group * 8);
                y.store(states + (g + 1) * kStreams + group * 8);
            }
            for (int b = 0; b < nb; ++b) {
                const std::uint64_t base = (b0 + std::uint64_t(b)) * kBeatLanes + std::uint64_t(group) * 8;
                if (base >= count) break;
                __m256i u[kGens];
                for (int g = 0; g < kGens; ++g) u[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(uni[g][b]));
                store_codes(out, weights(t, u, load_codes(clean, base, count), lt, back_k, out_max, off), base, count);
            }
        }
    }
}

void chip_beats_avx2(const NiuLayerProgram& layer, const std::int8_t* clean, std::uint16_t* words, std::uint64_t first_beat,
                     std::uint64_t last_beat, RngState* states) {
    alignas(32) Tables t;
    fill_tables(t, layer);
    const Device off = off_device(layer);
    const std::uint64_t count = layer.count;
    const __m256i sign_bit = _mm256_set1_epi32(NiuChipState::kSignBit);

    alignas(32) std::uint32_t uni[kChipGens][kBlock][8];
    for (int group = 0; group < kStreams / 8; ++group) {
        for (std::uint64_t b0 = first_beat; b0 < last_beat; b0 += kBlock) {
            const int nb = int(last_beat - b0 < std::uint64_t(kBlock) ? last_beat - b0 : std::uint64_t(kBlock));
            for (int g = 0; g < kChipGens; ++g) {
                StreamLanes x(states + g * kStreams + group * 8);
                for (int b = 0; b < nb; ++b) _mm256_store_si256(reinterpret_cast<__m256i*>(uni[g][b]), x.next());
                x.store(states + g * kStreams + group * 8);
            }
            for (int b = 0; b < nb; ++b) {
                const std::uint64_t base = (b0 + std::uint64_t(b)) * kBeatLanes + std::uint64_t(group) * 8;
                if (base >= count) break;
                __m256i u[kChipGens];
                for (int g = 0; g < kChipGens; ++g) u[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(uni[g][b]));
                const ChipNormals z = chip_normals(t, u);
                const PairDevices d = pair_devices(t, load_codes(clean, base, count), off);
                const Programmed plus = program_device(d.plus, z.z1p, z.z2p);
                const Programmed minus = program_device(d.minus, z.z1m, z.z2m);
                // Weights past the layer's end keep the zero padding (as the scalar kernel leaves it).
                const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(count - base < 8 ? count - base : 8)),
                                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
                std::uint16_t* w = words + chip_run(base);
                constexpr int run = NiuChipState::kBlockWeights;
                store_u16(w, _mm256_and_si256(valid, _mm256_or_si256(plus.gp, _mm256_and_si256(d.neg, sign_bit))));
                store_u16(w + run, _mm256_and_si256(valid, plus.nu));
                store_u16(w + 2 * run, _mm256_and_si256(valid, minus.gp));
                store_u16(w + 3 * run, _mm256_and_si256(valid, minus.nu));
            }
        }
    }
}

void kept_beats_avx2(const NiuLayerProgram& layer, const std::uint16_t* words, std::int8_t* out, std::uint64_t first_beat,
                     std::uint64_t last_beat, RngState* read_states) {
    alignas(32) Tables t;
    fill_tables(t, layer);
    const __m256i lt = _mm256_set1_epi32(std::int32_t(layer.drift_lt));
    const __m256i back_k = _mm256_set1_epi32(std::int32_t(layer.back_k));
    const int out_max = (1 << (layer.out_bits - 1)) - 1;
    const std::uint64_t count = layer.count;

    // The read generator's outputs of a block of beats, in weight order: uni[b][k] is stream k's.
    alignas(32) std::uint32_t uni[kBlock][kStreams];
    for (std::uint64_t b0 = first_beat; b0 < last_beat; b0 += kBlock) {
        const int nb = int(last_beat - b0 < std::uint64_t(kBlock) ? last_beat - b0 : std::uint64_t(kBlock));
        // Two groups of eight streams per pass: their dependency chains overlap.
        static_assert(kStreams % 16 == 0, "stream groups are stepped in pairs");
        for (int group = 0; group < kStreams / 8; group += 2) {
            StreamLanes x(read_states + group * 8), y(read_states + group * 8 + 8);
            for (int b = 0; b < nb; ++b) {
                _mm256_store_si256(reinterpret_cast<__m256i*>(&uni[b][group * 8]), x.next());
                _mm256_store_si256(reinterpret_cast<__m256i*>(&uni[b][group * 8 + 8]), y.next());
            }
            x.store(read_states + group * 8);
            y.store(read_states + group * 8 + 8);
        }
        // Weights in memory order: the kept state, the output and the outputs above stream through once.
        for (int b = 0; b < nb; ++b) {
            for (int group = 0; group < kStreams / 8; ++group) {
                const std::uint64_t base = (b0 + std::uint64_t(b)) * kBeatLanes + std::uint64_t(group) * 8;
                if (base >= count) break;
                const ReadNormals z3 = read_normals(t, _mm256_load_si256(reinterpret_cast<const __m256i*>(&uni[b][group * 8])));
                const __m256i codes = kept_codes(t, words + chip_run(base), z3.plus, z3.minus, lt, back_k, out_max);
                store_codes(out, codes, base, count);
            }
        }
    }
}

}  // namespace aimcemu::niu::detail

AIMCEMU_ISA_END()
