// AVX-512BW kernel of the NIU's round half (apply_kept, see niu_model.hpp): sixteen weights per
// 512-bit vector, the same integer arithmetic as read_device() and code_of_pair().
//
// Why a second ISA: the round half is a chain of short table lookups (the read Gaussian ROM, the
// 2^-f ROM, the read-sigma table), and AVX2 can only gather them, eight 32-bit loads at a time.
// AVX-512 looks a 64-entry table of words up with one two-register permute (vpermt2w), and the
// ROM's structure allows it: an address is {sign, group, 6-bit window}, so each group of the
// ROM is exactly one such table, the sign half is the negated positive half (the generator makes
// the ROM odd), and a 16-bit read uniform reaches only five groups.  One read generator output
// holds both devices' 16-bit uniforms, so a vector of sixteen outputs is the 32 word lanes of
// sixteen weights' two normals: five permutes and four masked moves replace four gathers.
// The 2^-f ROM (32 entries) and the read-sigma table (at most 128) are dword permutes too.
//
// The datapath itself (read_device, code_of_pair, the stream generator) is niu_simd_body.inc's,
// shared with the AVX2 kernel; this file defines the operations it is written in for sixteen
// lanes (the permute lookups above among them), the read normals and the loop over beats.
//
// Like niu_model_avx2.cpp: compiled for the ISA through a target pragma, entered only after
// detail::cpu_has_avx512bw() said yes, no standard-library templates inside the pragma.
#include <limits>
#include <immintrin.h>

#include <cstdint>

#include "niu/niu_model.hpp"
#include "common/isa_target.hpp"

namespace aimcemu::niu::detail {

bool cpu_has_avx512bw() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

namespace {

// The kernel multiplies 16-bit table slopes by small fractions with vpmaddwd (signed words), so
// the 2^-f slopes must be below 2^15 (checked here, outside the ISA pragma).
constexpr bool exp_slopes_fit_signed_words() {
    for (std::int32_t d : gen::NIU_EXP_SLOPE)
        if (d < 0 || d >= (1 << 15)) return false;
    return true;
}
static_assert(exp_slopes_fit_signed_words(), "the 2^-f slopes are signed words for vpmaddwd");

}  // namespace
}  // namespace aimcemu::niu::detail

AIMCEMU_ISA_BEGIN("avx2,avx512f,avx512bw")

namespace aimcemu::niu::detail {
namespace {

using namespace gen;

// The read Gaussian's address fields (niu_rng.hpp gauss_index) for 16-bit uniforms.
constexpr int kReadVBits = NIU_GAUSS_READ_U_BITS - 1;                       // magnitude bits (15)
constexpr int kReadOffset = (kReadVBits - 1) % NIU_GAUSS_GROUP_SPAN;        // 2
constexpr int kReadGroups = (kReadVBits - 1 - kReadOffset + NIU_GAUSS_GROUP_SPAN - 1) / NIU_GAUSS_GROUP_SPAN + 1;  // 5
static_assert(NIU_GAUSS_WINDOW_BITS == 6, "a window addresses the 64 words of a two-register permute");
static_assert(NIU_GAUSS_READ_U_BITS == 16, "the read uniforms are the two 16-bit halves of a generator output");
static_assert(kTableFieldBits == 16, "a table entry is two words for vpmaddwd and the word permutes");
static_assert(kReadGroups <= (1 << NIU_GAUSS_GROUP_BITS), "every reachable group has ROM entries");
static_assert(NIU_EXP_ENTRIES == 32, "the 2^-f ROM is one two-register dword permute");
static_assert(NIU_RT_SEGMENTS <= 128, "the read-sigma table fits four two-register dword permutes");

struct Tables {
    __m512i gauss_lo[kReadGroups], gauss_hi[kReadGroups];  // positive half, group g: entries 64g .. 64g+63
    __m512i exp2[2];                                       // E[k] | D[k] << 16
    __m512i read[8];                                       // RT[j] | RD[j] << 16, 16 entries per register
};

// --- The operations of niu_simd_body.inc, for sixteen 32-bit lanes ----------------------------
using I = __m512i;
using Negative = __mmask16;
// The read normals of sixteen weights as words (g- in the low word of each dword, g+ in the high
// word, as read_normals gives them) and which of the two is this device's.
struct Normal {
    __m512i words;
    bool plus;
};
constexpr std::size_t kLanes = 16;

inline I splat(int v) { return _mm512_set1_epi32(v); }
inline I add(I a, I b) { return _mm512_add_epi32(a, b); }
inline I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
inline I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
inline I min(I a, I b) { return _mm512_min_epi32(a, b); }
inline I max(I a, I b) { return _mm512_max_epi32(a, b); }
inline I and_(I a, I b) { return _mm512_and_si512(a, b); }
inline I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
inline I shift_right_arith(I v, int n) { return _mm512_srai_epi32(v, unsigned(n)); }
inline I shift_right(I v, int n) { return _mm512_srli_epi32(v, unsigned(n)); }
inline I shift_left(I v, int n) { return _mm512_slli_epi32(v, unsigned(n)); }
inline I shift_left_var(I v, I counts) { return _mm512_sllv_epi32(v, counts); }
template <int N> inline I rotate_left(I x) { return _mm512_rol_epi32(x, N); }
inline I load_aligned(const std::uint32_t* p) { return _mm512_load_si512(p); }
inline void store_aligned(std::uint32_t* p, I v) { _mm512_store_si512(p, v); }
// One run (sixteen words of one field) of a chip-state block, as sixteen dwords.
static_assert(NiuChipState::kBlockWeights == 16, "a chip-state run is one vector");
inline I load_run(const std::uint16_t* w) { return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))); }

inline Negative greater(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
inline I negate_where(I v, Negative neg) { return _mm512_mask_sub_epi32(v, neg, _mm512_setzero_si512(), v); }

// sa * z3 by vpmaddwd: sa is in 0..G_MAX (gd >= 0, and sr >= 0 because RT >= 0 and RT + RD >= 0,
// which compile_program and from_words guarantee), a positive word; put it against this
// device's normal word and 0 against the other's.
static_assert(NIU_G_MAX < (1 << 15), "sa is a positive word");
inline I times_normal(I sa, Normal z3) { return _mm512_madd_epi16(z3.plus ? _mm512_slli_epi32(sa, 16) : sa, z3.words); }

// Products of a table word pair (value | slope << 16) with a small fraction: the slope (a signed
// word) times the fraction, by one vpmaddwd with the fraction in the high word of each dword
// and 0 in the low word (so the value word contributes nothing).  Exact: both are words and the
// product fits a dword; cheaper than a shift and a 32-bit multiply.
inline I slope_times(I entry, I fraction_high) { return _mm512_madd_epi16(entry, fraction_high); }

// The permute reads the low five bits of k = x >> FRAC.
inline I exp2_entry(const Tables& t, I x) { return _mm512_permutex2var_epi32(t.exp2[0], _mm512_srli_epi32(x, NIU_EXP_FRAC_BITS), t.exp2[1]); }
// f = x mod 2^6, placed in the high word.
inline I exp2_fraction(I x) {
    return _mm512_and_si512(_mm512_slli_epi32(x, 16), _mm512_set1_epi32(((1 << NIU_EXP_FRAC_BITS) - 1) << 16));
}

// IEEE-754 single precision: where the exponent field starts (23) and its bias (127).
constexpr int kFloatMantissaBits = std::numeric_limits<float>::digits - 1;
constexpr int kFloatExponentBias = std::numeric_limits<float>::max_exponent - 1;

struct SigmaEntry {
    I entry, fraction;
};
// The float exponent of gp is the octave, the mantissa the segment and fraction; e = 127 * 8 + j
// is the biased segment, and the table is stored rotated so that e indexes it directly
// (read_table_slot).  gp = 0 (no leading one) reads some entry: gd is 0 then, and so is sa
// whatever the sigma, as in read_device where max(gp, 1) picks the first segment.
inline SigmaEntry read_sigma_entry(const Tables& t, I gp) {
    const I gbits = _mm512_castps_si512(_mm512_cvtepi32_ps(gp));
    const I j = _mm512_srli_epi32(gbits, kFloatMantissaBits - NIU_RT_SEG_BITS);
    // The interpolation fraction (the mantissa bits below the segment), placed in the high word.
    constexpr int fr_up = 16 - (kFloatMantissaBits - NIU_RT_SEG_BITS - NIU_RT_FRAC_BITS);
    static_assert(fr_up >= 0 && NIU_RT_FRAC_BITS < 15, "the fraction moves up into a positive word");
    const I fr_high = _mm512_and_si512(_mm512_slli_epi32(gbits, fr_up), _mm512_set1_epi32(((1 << NIU_RT_FRAC_BITS) - 1) << 16));
    const __mmask16 bit5 = _mm512_test_epi32_mask(j, _mm512_set1_epi32(32));
    const __mmask16 bit6 = _mm512_test_epi32_mask(j, _mm512_set1_epi32(64));
    const I r01 = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(t.read[0], j, t.read[1]), bit5,
                                        _mm512_permutex2var_epi32(t.read[2], j, t.read[3]));
    const I r23 = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(t.read[4], j, t.read[5]), bit5,
                                        _mm512_permutex2var_epi32(t.read[6], j, t.read[7]));
    return {_mm512_mask_mov_epi32(r01, bit6, r23), fr_high};
}

#include "niu/niu_simd_body.inc"

// --- AVX-512 only: the read normals by word permutes -------------------------------------------

// Normals (Q3.12) of 32 16-bit uniforms in word lanes.  The group of a magnitude v is the number
// of thresholds 2^(3g + offset - 2) it reaches, and its window is v shifted so that the group's
// three bits sit at the window's top: right by 3g + offset - 5 (left for negative counts).
inline __m512i read_normals(const Tables& t, __m512i u) {
    const __mmask32 negative = _mm512_movepi16_mask(u);
    const __m512i v = _mm512_and_si512(u, _mm512_set1_epi16(std::int16_t((1 << kReadVBits) - 1)));
    constexpr int shift0 = kReadOffset - (NIU_GAUSS_WINDOW_BITS - 1);
    static_assert(shift0 <= 0, "group 0's window is the magnitude shifted left");
    __m512i z = _mm512_permutex2var_epi16(t.gauss_lo[0], _mm512_slli_epi16(v, -shift0), t.gauss_hi[0]);
    for (int g = 1; g < kReadGroups; ++g) {
        const int shift = NIU_GAUSS_GROUP_SPAN * g + shift0;
        const __mmask32 in_group = _mm512_cmpge_epu16_mask(v, _mm512_set1_epi16(std::int16_t(1 << (NIU_GAUSS_GROUP_SPAN * g + kReadOffset - 2))));
        const __m512i window = shift >= 0 ? _mm512_srli_epi16(v, unsigned(shift)) : _mm512_slli_epi16(v, unsigned(-shift));
        z = _mm512_mask_mov_epi16(z, in_group, _mm512_permutex2var_epi16(t.gauss_lo[g], window, t.gauss_hi[g]));
    }
    return _mm512_mask_sub_epi16(z, negative, _mm512_setzero_si512(), z);
}

// Where segment j of the read-sigma table sits: at its float-biased index 127 * 8 + j, modulo
// the table's 128 slots (the permutes read bits 0-4 of the index, the masked moves bits 5 and 6).
constexpr int read_table_slot(int j) { return ((kFloatExponentBias << NIU_RT_SEG_BITS) + j) % 128; }

void fill_tables(Tables& t, const NiuLayerProgram& layer) {
    alignas(64) std::int16_t words[64];
    for (int g = 0; g < kReadGroups; ++g) {
        for (int w = 0; w < 64; ++w) words[w] = NIU_GAUSS_READ_ROM[std::size_t(64 * g + w)];
        t.gauss_lo[g] = _mm512_load_si512(words);
        t.gauss_hi[g] = _mm512_load_si512(words + 32);
    }
    alignas(64) std::int32_t dwords[128] = {};
    for (int k = 0; k < NIU_EXP_ENTRIES; ++k) dwords[k] = NIU_EXP_VALUE[std::size_t(k)] | (NIU_EXP_SLOPE[std::size_t(k)] << kTableFieldBits);
    for (int r = 0; r < 2; ++r) t.exp2[r] = _mm512_load_si512(dwords + 16 * r);
    for (int j = 0; j < 128; ++j)
        dwords[read_table_slot(j)] = j < NIU_RT_SEGMENTS ? std::int32_t((std::uint32_t(layer.rt[std::size_t(j)]) & kTableFieldMask) |
                                                                        (std::uint32_t(layer.rd[std::size_t(j)]) << kTableFieldBits))
                                                         : 0;
    for (int r = 0; r < 8; ++r) t.read[r] = _mm512_load_si512(dwords + 16 * r);
}

}  // namespace

void kept_beats_avx512(const NiuLayerProgram& layer, const std::uint16_t* words, std::int8_t* out, std::uint64_t first_beat,
                       std::uint64_t last_beat, RngState* read_states) {
    Tables t;
    fill_tables(t, layer);
    const __m512i lt = _mm512_set1_epi32(std::int32_t(layer.drift_lt));
    const __m512i back_k = _mm512_set1_epi32(std::int32_t(layer.back_k));
    const int out_max = (1 << (layer.out_bits - 1)) - 1;
    const std::uint64_t count = layer.count;
    static_assert(kStreams == 32, "a beat is two vectors of sixteen streams");

    // Sixteen weights from `base` (a multiple of 16) with their read-generator outputs; only the
    // first `valid` are stored.  Sixteen weights are one chip-state block, which exists even past
    // the layer's end: the state is padded to whole beats.
    const auto sixteen = [&](__m512i outputs, std::uint64_t base, std::uint64_t valid) {
        // Word 2i holds weight i's g- uniform (bits 15:0), word 2i+1 its g+ uniform (bits 31:16).
        const __m512i z = read_normals(t, outputs);
        const std::uint16_t* w = words + base / 16 * NiuChipState::kBlockWords;
        const __m512i codes = kept_codes(t, w, {z, true}, {z, false}, lt, back_k, out_max);
        if (valid >= 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + base), _mm512_cvtsepi32_epi8(codes));
        else _mm512_mask_cvtsepi32_storeu_epi8(out + base, __mmask16((1u << valid) - 1), codes);
    };
    // The 32 read streams live in two sets of registers for the whole range; each beat steps
    // both (their chains are independent and overlap with the datapath).  Whole beats run as
    // straight-line code (two sets of sixteen); only the layer's last beat checks its end.
    StreamLanes streams[2] = {StreamLanes(read_states), StreamLanes(read_states + 16)};
    const std::uint64_t whole_end = last_beat < count / kBeatLanes ? last_beat : count / kBeatLanes;
    std::uint64_t beat = first_beat;
    for (; beat < whole_end; ++beat) {
        const __m512i low = streams[0].next(), high = streams[1].next();
        sixteen(low, beat * kBeatLanes, 16);
        sixteen(high, beat * kBeatLanes + 16, 16);
    }
    for (; beat < last_beat; ++beat) {  // the beat the layer ends in, and any past it
        const __m512i outputs[2] = {streams[0].next(), streams[1].next()};
        for (int half = 0; half < 2; ++half) {
            const std::uint64_t base = beat * kBeatLanes + std::uint64_t(half) * 16;
            if (base < count) sixteen(outputs[half], base, count - base);
        }
    }
    streams[0].store(read_states);
    streams[1].store(read_states + 16);
}

}  // namespace aimcemu::niu::detail

AIMCEMU_ISA_END()
