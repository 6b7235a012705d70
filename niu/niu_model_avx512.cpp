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
// Like niu_model_avx2.cpp: compiled for the ISA through a target pragma, entered only after
// detail::cpu_has_avx512bw() said yes, no standard-library templates inside the pragma.
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
static_assert(kReadGroups <= (1 << NIU_GAUSS_GROUP_BITS), "every reachable group has ROM entries");
static_assert(NIU_EXP_ENTRIES == 32, "the 2^-f ROM is one two-register dword permute");
static_assert(NIU_RT_SEGMENTS <= 128, "the read-sigma table fits four two-register dword permutes");

struct Tables {
    __m512i gauss_lo[kReadGroups], gauss_hi[kReadGroups];  // positive half, group g: entries 64g .. 64g+63
    __m512i exp2[2];                                       // E[k] | D[k] << 16
    __m512i read[8];                                       // RT[j] | RD[j] << 16, 16 entries per register
};

inline __m512i rshr(__m512i p, int s) { return _mm512_srai_epi32(_mm512_add_epi32(p, _mm512_set1_epi32(1 << (s - 1))), s); }

inline __m512i clamp(__m512i v, int lo, int hi) {
    return _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi));
}

inline __m512i low16(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)); }

// Normals (Q3.12) of 32 16-bit uniforms in word lanes.  The group of a magnitude v is the number
// of thresholds 2^(3g + offset - 2) it reaches, and its window is v shifted so that the group's
// three bits sit at the window's top: right by 3g + offset - 5 (left for negative counts).
inline __m512i read_normals(const Tables& t, __m512i u) {
    const __mmask32 negative = _mm512_movepi16_mask(u);
    const __m512i v = _mm512_and_si512(u, _mm512_set1_epi16(0x7FFF));
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

// Products of a table word pair (value | slope << 16) with a small fraction: the slope (a signed
// word) times the fraction, by one vpmaddwd with the fraction in the high word of each dword
// and 0 in the low word (so the value word contributes nothing).  Exact: both are words and the
// product fits a dword; cheaper than a shift and a 32-bit multiply.
inline __m512i slope_times(__m512i value_slope, __m512i fraction_high) { return _mm512_madd_epi16(value_slope, fraction_high); }

// The round half of sixteen devices (niu_model.cpp read_device).  z: the two devices' normals as
// words (g- in the low word of each dword, g+ in the high word); `plus` picks this device's.
inline __m512i read_device(const Tables& t, __m512i gp, __m512i nu, __m512i z, bool plus, __m512i lt) {
    const __m512i x = _mm512_min_epi32(rshr(_mm512_mullo_epi32(nu, lt), NIU_NU_FRAC), _mm512_set1_epi32(NIU_X_MAX));
    const __m512i xi = _mm512_srli_epi32(x, NIU_X_FRAC);
    const __m512i k = _mm512_srli_epi32(x, NIU_EXP_FRAC_BITS);  // the permute reads its low five bits
    // f = x mod 2^6, placed in the high word.
    const __m512i f_high = _mm512_and_si512(_mm512_slli_epi32(x, 16), _mm512_set1_epi32(((1 << NIU_EXP_FRAC_BITS) - 1) << 16));
    const __m512i ed = _mm512_permutex2var_epi32(t.exp2[0], k, t.exp2[1]);
    const __m512i ef = _mm512_sub_epi32(low16(ed), rshr(slope_times(ed, f_high), NIU_EXP_FRAC_BITS));
    const __m512i g1 = rshr(_mm512_mullo_epi32(gp, ef), NIU_EXP_ONE_BITS);
    // g1 * 2^(15 - xi) as a shift (the same value; it fits as the product does).
    const __m512i gd = rshr(_mm512_sllv_epi32(g1, _mm512_sub_epi32(_mm512_set1_epi32(NIU_EXP_ONE_BITS), xi)), NIU_EXP_ONE_BITS);
    // Read sigma: the float exponent of gp is the octave, the mantissa the segment and fraction;
    // e = 127 * 8 + j is the biased segment, and the table is stored rotated so that e indexes it
    // directly (read_table_slot).  gp = 0 (no leading one) reads some entry: gd is 0 then, and so
    // is sa whatever the sigma, as in read_device where max(gp, 1) picks the first segment.
    const __m512i gbits = _mm512_castps_si512(_mm512_cvtepi32_ps(gp));
    const __m512i j = _mm512_srli_epi32(gbits, 23 - NIU_RT_SEG_BITS);
    // The interpolation fraction (the mantissa bits below the segment), placed in the high word.
    constexpr int fr_up = 16 - (23 - NIU_RT_SEG_BITS - NIU_RT_FRAC_BITS);
    static_assert(fr_up >= 0 && NIU_RT_FRAC_BITS < 15, "the fraction moves up into a positive word");
    const __m512i fr_high = _mm512_and_si512(_mm512_slli_epi32(gbits, fr_up), _mm512_set1_epi32(((1 << NIU_RT_FRAC_BITS) - 1) << 16));
    const __mmask16 bit5 = _mm512_test_epi32_mask(j, _mm512_set1_epi32(32));
    const __mmask16 bit6 = _mm512_test_epi32_mask(j, _mm512_set1_epi32(64));
    const __m512i r01 = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(t.read[0], j, t.read[1]), bit5,
                                              _mm512_permutex2var_epi32(t.read[2], j, t.read[3]));
    const __m512i r23 = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(t.read[4], j, t.read[5]), bit5,
                                              _mm512_permutex2var_epi32(t.read[6], j, t.read[7]));
    const __m512i rr = _mm512_mask_mov_epi32(r01, bit6, r23);
    const __m512i sr = _mm512_add_epi32(low16(rr), rshr(slope_times(rr, fr_high), NIU_RT_FRAC_BITS));
    const __m512i sa = _mm512_min_epi32(rshr(_mm512_mullo_epi32(gd, sr), NIU_RT_ONE_BITS), _mm512_set1_epi32(NIU_G_MAX));
    // sa * z3 by vpmaddwd: sa is in 0..G_MAX (gd >= 0, and sr >= 0 because RT >= 0 and
    // RT + RD >= 0, which compile_program and from_words guarantee), a positive word; put it
    // against this device's normal word and 0 against the other's.
    static_assert(NIU_G_MAX < (1 << 15), "sa is a positive word");
    const __m512i sa_z = _mm512_madd_epi16(plus ? _mm512_slli_epi32(sa, 16) : sa, z);
    return clamp(_mm512_add_epi32(gd, rshr(sa_z, NIU_Z_FRAC)), 0, NIU_G_MAX);
}

// Back-conversion, sign and saturation of sixteen pairs (niu_model.cpp code_of_pair).
inline __m512i code_of_pair(__mmask16 neg, __m512i g_plus, __m512i g_minus, __m512i back_k, int out_max) {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i d = _mm512_sub_epi32(g_plus, g_minus);
    const __m512i on_minus_off = _mm512_mask_sub_epi32(d, neg, zero, d);
    const __m512i m = rshr(_mm512_mullo_epi32(on_minus_off, back_k), NIU_K_SHIFT);
    return clamp(_mm512_mask_sub_epi32(m, neg, zero, m), -out_max, out_max);
}

// The states of sixteen streams of one generator, transposed into four registers.
struct Lanes16 {
    __m512i s0, s1, s2, s3;
    explicit Lanes16(const RngState* st) {
        alignas(64) std::uint32_t w[4][16];
        for (int l = 0; l < 16; ++l)
            for (int i = 0; i < 4; ++i) w[i][l] = st[l][std::size_t(i)];
        s0 = _mm512_load_si512(w[0]);
        s1 = _mm512_load_si512(w[1]);
        s2 = _mm512_load_si512(w[2]);
        s3 = _mm512_load_si512(w[3]);
    }
    __m512i next() {
        const __m512i o = _mm512_add_epi32(_mm512_rol_epi32(_mm512_add_epi32(s0, s3), NIU_RNG_ROT_OUT), s0);
        const __m512i tt = _mm512_slli_epi32(s1, NIU_RNG_SHIFT_A);
        s2 = _mm512_xor_si512(s2, s0);
        s3 = _mm512_xor_si512(s3, s1);
        s1 = _mm512_xor_si512(s1, s2);
        s0 = _mm512_xor_si512(s0, s3);
        s2 = _mm512_xor_si512(s2, tt);
        s3 = _mm512_rol_epi32(s3, NIU_RNG_ROT_B);
        return o;
    }
    void store(RngState* st) const {
        alignas(64) std::uint32_t w[4][16];
        _mm512_store_si512(w[0], s0);
        _mm512_store_si512(w[1], s1);
        _mm512_store_si512(w[2], s2);
        _mm512_store_si512(w[3], s3);
        for (int l = 0; l < 16; ++l)
            for (int i = 0; i < 4; ++i) st[l][std::size_t(i)] = w[i][l];
    }
};

// Where segment j of the read-sigma table sits: at its float-biased index 127 * 8 + j, modulo
// the table's 128 slots (the permutes read bits 0-4 of the index, the masked moves bits 5 and 6).
constexpr int read_table_slot(int j) { return ((127 << NIU_RT_SEG_BITS) + j) % 128; }

void fill_tables(Tables& t, const NiuLayerProgram& layer) {
    alignas(64) std::int16_t words[64];
    for (int g = 0; g < kReadGroups; ++g) {
        for (int w = 0; w < 64; ++w) words[w] = NIU_GAUSS_READ_ROM[std::size_t(64 * g + w)];
        t.gauss_lo[g] = _mm512_load_si512(words);
        t.gauss_hi[g] = _mm512_load_si512(words + 32);
    }
    alignas(64) std::int32_t dwords[128] = {};
    for (int k = 0; k < NIU_EXP_ENTRIES; ++k) dwords[k] = NIU_EXP_VALUE[std::size_t(k)] | (NIU_EXP_SLOPE[std::size_t(k)] << 16);
    for (int r = 0; r < 2; ++r) t.exp2[r] = _mm512_load_si512(dwords + 16 * r);
    for (int j = 0; j < 128; ++j)
        dwords[read_table_slot(j)] = j < NIU_RT_SEGMENTS ? std::int32_t((std::uint32_t(layer.rt[std::size_t(j)]) & 0xFFFFu) |
                                                                        (std::uint32_t(layer.rd[std::size_t(j)]) << 16))
                                                         : 0;
    for (int r = 0; r < 8; ++r) t.read[r] = _mm512_load_si512(dwords + 16 * r);
}

// One run (sixteen words of one field) of a chip-state block, as sixteen dwords.
static_assert(NiuChipState::kBlockWeights == 16, "a chip-state run is one vector");
inline __m512i load_run(const std::uint16_t* w) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
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
    const __m512i magnitude = _mm512_set1_epi32(0x7FFF);
    static_assert(kStreams == 32, "a beat is two vectors of sixteen streams");

    // Sixteen weights from `base` (a multiple of 16) with their read-generator outputs; only the
    // first `valid` are stored.  Sixteen weights are one chip-state block, which exists even past
    // the layer's end: the state is padded to whole beats.
    const auto sixteen = [&](__m512i outputs, std::uint64_t base, std::uint64_t valid) {
        // Word 2i holds weight i's g- uniform (bits 15:0), word 2i+1 its g+ uniform (bits 31:16).
        const __m512i z = read_normals(t, outputs);
        const std::uint16_t* w = words + base / 16 * NiuChipState::kBlockWords;
        const __m512i w0 = load_run(w);
        const __mmask16 neg = _mm512_cmpgt_epi32_mask(w0, magnitude);
        const __m512i g_plus = read_device(t, _mm512_and_si512(w0, magnitude), load_run(w + 16), z, true, lt);
        const __m512i g_minus = read_device(t, load_run(w + 32), load_run(w + 48), z, false, lt);
        const __m512i codes = code_of_pair(neg, g_plus, g_minus, back_k, out_max);
        if (valid >= 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + base), _mm512_cvtsepi32_epi8(codes));
        else _mm512_mask_cvtsepi32_storeu_epi8(out + base, __mmask16((1u << valid) - 1), codes);
    };
    // The 32 read streams live in two sets of registers for the whole range; each beat steps
    // both (their chains are independent and overlap with the datapath).  Whole beats run as
    // straight-line code (two sets of sixteen); only the layer's last beat checks its end.
    Lanes16 streams[2] = {Lanes16(read_states), Lanes16(read_states + 16)};
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
