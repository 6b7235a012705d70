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
#include "common/isa_target.hpp"

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx512f,avx512bw,avx512vnni")

namespace aimcemu::detail {
namespace {

// acc += u8(x) * s8(w) in groups of four.  An asm statement rather than the intrinsic: with the
// intrinsic GCC 12 copied every accumulator through a spare register and spilled it to the stack on
// each step (four extra moves per vpdpbusd, measured at under half of oneDNN's speed); as asm
// operands the accumulators stay in registers for the whole depth loop.
__attribute__((always_inline)) inline void dpbusd(__m512i& acc, __m512i x, __m512i w) {
    asm("vpdpbusd %[w], %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [w] "v"(w));
}

// The epilogue: the accumulators (which started at the column term) stored as int32 or
// requantised to int8 (round half up, saturate, ReLU: the rules of postproc.hpp, bit-exact with
// requantize()).  When `folded`, the accumulators also started at the rounding half 2^(shift-1),
// so rounding is one arithmetic shift: floor((v + 2^(s-1)) / 2^s) is round half up of v / 2^s,
// exact whenever v + 2^(s-1) cannot wrap (gemm_fast decides that from the depth and bias bound).
// On layers of depth 64 this epilogue is 3 instructions per vector instead of 7, against 16
// vpdpbusd per accumulator.  The output's fields are copied into locals first: int8 stores may
// alias anything, so read through GemmOutput they were reloaded after every store.
struct Epilogue {
    std::int32_t* acc;
    std::int8_t* y;
    __m128i shift, shift_less_one;
    bool rounds, relu, folded;
    std::int32_t start;   // what every accumulator starts from on top of the column term
    // The fused residual add (GemmOutput::residual; null: none) and its alignment shifts.
    const std::int8_t* residual;
    __m128i residual_left, residual_right, residual_right_less_one;
    bool residual_shifts_left, relu_after_residual;
    Epilogue(const GemmOutput& out, bool fold_rounding)
        : acc(out.acc), y(out.y), shift(_mm_cvtsi32_si128(out.out_shift)),
          shift_less_one(_mm_cvtsi32_si128(out.out_shift - 1)), rounds(out.out_shift > 0), relu(out.relu),
          folded(fold_rounding && out.y && out.out_shift > 0),
          start(folded ? std::int32_t(std::uint32_t(1) << (out.out_shift - 1)) : 0),
          residual(out.y ? out.residual : nullptr),
          residual_left(_mm_cvtsi32_si128(out.residual_shift > 0 ? out.residual_shift : 0)),
          residual_right(_mm_cvtsi32_si128(out.residual_shift < 0 ? -out.residual_shift : 0)),
          residual_right_less_one(_mm_cvtsi32_si128(out.residual_shift < 0 ? -out.residual_shift - 1 : 0)),
          residual_shifts_left(out.residual_shift >= 0), relu_after_residual(out.relu_after_residual) {}
};

// y + align(r, shift) for the 16 outputs of `sum` (already requantised: the conv's int8 value,
// saturated here first), then ReLU if asked; the caller's saturating store is the final sat8.
// align's right shift rounds half up as round_shift does: the floor plus bit -shift - 1 of r.
__attribute__((always_inline)) inline __m512i add_residual(__m512i sum, __mmask16 mask, const Epilogue& out,
                                                          std::int64_t offset) {
    sum = _mm512_min_epi32(_mm512_max_epi32(sum, _mm512_set1_epi32(-128)), _mm512_set1_epi32(127));
    // 16 bytes under a 64-bit mask (AVX-512BW alone, no VL): lanes past the mask read nothing.
    const __m512i bytes = _mm512_maskz_loadu_epi8(__mmask64(mask), out.residual + offset);
    const __m512i r = _mm512_cvtepi8_epi32(_mm512_castsi512_si128(bytes));
    const __m512i aligned =
        out.residual_shifts_left
            ? _mm512_sll_epi32(r, out.residual_left)
            : _mm512_add_epi32(_mm512_sra_epi32(r, out.residual_right),
                               _mm512_and_si512(_mm512_sra_epi32(r, out.residual_right_less_one), _mm512_set1_epi32(1)));
    sum = _mm512_add_epi32(sum, aligned);
    return out.relu_after_residual ? _mm512_max_epi32(sum, _mm512_setzero_si512()) : sum;
}

__attribute__((always_inline)) inline void store_lanes(__m512i sum, __mmask16 mask, const Epilogue& out,
                                                      std::int64_t offset) {
    if (!out.y) {
        _mm512_mask_storeu_epi32(out.acc + offset, mask, sum);
        return;
    }
    if (out.folded) {
        sum = _mm512_sra_epi32(sum, out.shift);
    } else if (out.rounds) {   // (v >> s) + bit s-1 of v: round half up without a wider type
        const __m512i q = _mm512_sra_epi32(sum, out.shift);
        const __m512i half = _mm512_sra_epi32(sum, out.shift_less_one);
        sum = _mm512_add_epi32(q, _mm512_and_si512(half, _mm512_set1_epi32(1)));
    }
    if (out.relu) sum = _mm512_max_epi32(sum, _mm512_setzero_si512());
    if (out.residual) sum = add_residual(sum, mask, out, offset);
    _mm512_mask_cvtsepi32_storeu_epi8(out.y + offset, mask, sum);   // vpmovsdb: saturates
}

// Where a register tile's operand rows are: row r's depth is `segments` runs of `segment_groups`
// groups of 4 bytes, run s starting at rows[r] + s * segment_step.  An IM2COL'd operand has one run
// per row (or the kernel rows left after the depth skip, back to back); a convolution read in
// place has one run per kernel row, a padded input row apart (vnni_conv_rows).
struct TileRows {
    const std::uint8_t* rows[kVnniRowsPerTile];
    std::int64_t segments, segment_groups, segment_step;
    std::int64_t row_stride;   // with one run: rows[r] = rows[0] + r * row_stride
};

// One register tile: PR output pixels x NV vectors of 16 output channels.  The weight panel holds,
// for every group g of 4 depth positions, NV vectors of 16 lanes x 4 bytes, the tile's depth
// runs one after the other.  `offset` is the element offset of the tile's first output in out
// (row stride ldo).
// Segmented: false when the depth is one run (x.segments == 1), which leaves out the run loop and
// its set-up (on the 1 x 1 layers of depth 64 that set-up cost up to 16 % of the layer).
template <int NV, int PR, bool Segmented>
void micro_tile(const std::int8_t* panel, const TileRows& x, const std::int32_t* column, __mmask16 last_mask,
                const Epilogue& out, std::int64_t offset, std::int64_t ldo) {
    // The accumulators start at the column term (and the rounding half, when folded), so the
    // epilogue does not add it.  column is zero-padded to whole panels, so the loads stay inside.
    __m512i acc[PR][NV];
    {
        const __m512i start = _mm512_set1_epi32(out.start);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            const __m512i first = _mm512_add_epi32(_mm512_loadu_si512(column + 16 * v), start);
#pragma GCC unroll 8
            for (int r = 0; r < PR; ++r) acc[r][v] = first;
        }
    }
    const std::int64_t segments = Segmented ? x.segments : 1;
    for (std::int64_t s = 0; s < segments; ++s) {
        const std::uint8_t* row[PR];
#pragma GCC unroll 8
        for (int r = 0; r < PR; ++r) row[r] = x.rows[r] + s * x.segment_step;
        for (std::int64_t g = 0; g < x.segment_groups; ++g) {
            __m512i wv[NV];
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_si512(panel + (g * NV + v) * 64);
#pragma GCC unroll 8
            for (int r = 0; r < PR; ++r) {
                std::int32_t four;
                // One run: the rows a fixed stride apart, addressed from the first (as one pointer and
                // multiples of the stride, the deep 1 x 1 layers ran 6-7 % faster than from six).
                std::memcpy(&four, (Segmented ? row[r] : x.rows[0] + r * x.row_stride) + 4 * g, 4);
                const __m512i xv = _mm512_set1_epi32(four);
#pragma GCC unroll 8
                for (int v = 0; v < NV; ++v) dpbusd(acc[r][v], xv, wv[v]);
            }
        }
        panel += x.segment_groups * NV * 64;
    }
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
        const __mmask16 mask = v == NV - 1 ? last_mask : __mmask16(0xFFFF);
#pragma GCC unroll 8
        for (int r = 0; r < PR; ++r) store_lanes(acc[r][v], mask, out, offset + r * ldo + 16 * v);
    }
}

using MicroTile = void (*)(const std::int8_t*, const TileRows&, const std::int32_t*, __mmask16, const Epilogue&,
                           std::int64_t, std::int64_t);

template <int NV, bool Segmented>
MicroTile pick_rows(int rows) {
    switch (rows) {
        case 1: return micro_tile<NV, 1, Segmented>;
        case 2: return micro_tile<NV, 2, Segmented>;
        case 3: return micro_tile<NV, 3, Segmented>;
        case 4: return micro_tile<NV, 4, Segmented>;
        case 5: return micro_tile<NV, 5, Segmented>;
        default: return micro_tile<NV, 6, Segmented>;
    }
}

template <bool Segmented>
MicroTile pick(int vectors, int rows) {
    switch (vectors) {
        case 1: return pick_rows<1, Segmented>(rows);
        case 2: return pick_rows<2, Segmented>(rows);
        case 3: return pick_rows<3, Segmented>(rows);
        default: return pick_rows<4, Segmented>(rows);
    }
}

// Whether bytes [begin, begin + count) after each of the first `rows` row pointers are 0x80 (X = 0
// after the +128 offset): the padding above or below the image in a conv's kernel row.
bool rows_read_zero(const std::uint8_t* const* x, int rows, std::int64_t begin, std::int64_t count) {
    const __m512i zero = _mm512_set1_epi8(char(0x80));
    for (int r = 0; r < rows; ++r)
        for (std::int64_t at = begin; at < begin + count; at += 64) {
            const std::int64_t left = begin + count - at;
            const __mmask64 mask = left >= 64 ? ~__mmask64(0) : (__mmask64(1) << left) - 1;
            if (_mm512_mask_cmpneq_epi8_mask(mask, _mm512_maskz_loadu_epi8(mask, x[r] + at), zero)) return false;
        }
    return true;
}

// The channel panel at n0 of n channels: how many 16-lane vectors it has and the lanes of its last.
struct PanelShape {
    int vectors;
    __mmask16 last_mask;
    PanelShape(std::int64_t n, std::int64_t n0) {
        const std::int64_t lanes = n - n0 < kVnniPanel ? n - n0 : kVnniPanel;
        vectors = int((lanes + 15) / 16);
        last_mask = __mmask16((1u << (lanes - 16 * (vectors - 1))) - 1u);
    }
};

// The tile's runs [lo, hi) that are not all zero: runs [0, lo) and [hi, x.segments) read as zero
// (0x80) in every row of the tile (the padding above or below the image, in a conv's kernel
// rows).  It depends on the rows alone, not on the channel panel.
struct LiveRuns {
    std::int64_t lo, hi;
};
LiveRuns live_runs(const TileRows& x, int rows) {
    const std::int64_t bytes = x.segment_groups * 4;
    LiveRuns live{0, x.segments};
    while (live.lo < live.hi && rows_read_zero(x.rows, rows, live.lo * x.segment_step, bytes)) ++live.lo;
    while (live.hi > live.lo && rows_read_zero(x.rows, rows, (live.hi - 1) * x.segment_step, bytes)) --live.hi;
    return live;
}

// One tile of `rows` rows x the panel of `vectors` vectors at n0 (the part both row layouts
// share), multiplying only its live runs: it starts from column + 128 * sum(w) over the runs
// left out (the offset those bytes would have contributed), so the sum is the same integer.
void run_tile(const std::int8_t* panel, TileRows x, LiveRuns live, int rows, int vectors, std::int64_t n0,
              const std::int32_t* column, const VnniDepthSkip& skip, __mmask16 last_mask, const Epilogue& out,
              std::int64_t offset, std::int64_t ldo) {
    const std::int32_t* start = column + n0;
    alignas(64) std::int32_t shifted[kVnniPanel];
    if (live.lo > 0 || live.hi < x.segments) {
        const std::int32_t* sums = skip.sums + n0;
        for (int v = 0; v < kVnniPanel / 16; ++v) {
            const __m512i below = _mm512_loadu_si512(sums + live.lo * skip.channels + 16 * v);
            const __m512i above = _mm512_sub_epi32(_mm512_loadu_si512(sums + x.segments * skip.channels + 16 * v),
                                                   _mm512_loadu_si512(sums + live.hi * skip.channels + 16 * v));
            const __m512i col = _mm512_loadu_si512(column + n0 + 16 * v);
            _mm512_store_si512(shifted + 16 * v, _mm512_add_epi32(col, _mm512_add_epi32(below, above)));
        }
        start = shifted;
        panel += live.lo * x.segment_groups * vectors * 64;
        for (int r = 0; r < rows; ++r) x.rows[r] += live.lo * x.segment_step;
        x.segments = live.hi - live.lo;
    }
    pick<true>(vectors, rows)(panel, x, start, last_mask, out, offset, ldo);
}

}  // namespace

void vnni_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const std::uint8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                    std::int64_t n_begin, std::int64_t n_end, const GemmOutput& output, bool fold_rounding,
                    const VnniDepthSkip& skip) {
    const Epilogue out(output, fold_rounding);
    const std::int64_t groups = (m + 3) / 4;
    const std::int64_t depth = groups * 4;
    // With the skip, the depth is its kernel rows, back to back; without, one run.
    const bool skippable = skip.segment > 0;
    for (std::int64_t n0 = n_begin; n0 < n_end; n0 += kVnniPanel) {
        const PanelShape shape(n, n0);
        const int vectors = shape.vectors;
        const __mmask16 last_mask = shape.last_mask;
        const std::int8_t* panel = packed + n0 * depth;
        for (std::int64_t p0 = p_begin; p0 < p_end; p0 += kVnniRowsPerTile) {
            const int rows = int(p_end - p0 < kVnniRowsPerTile ? p_end - p0 : kVnniRowsPerTile);
            TileRows x;
            for (int r = 0; r < rows; ++r) x.rows[r] = xt + (p0 - p_begin + r) * ldx;
            if (!skippable) {   // the whole depth in one run
                x.segments = 1;
                x.segment_groups = groups;
                x.segment_step = 0;
                x.row_stride = ldx;
                pick<false>(vectors, rows)(panel, x, column + n0, last_mask, out, p0 * n + n0, n);
                continue;
            }
            x.segments = m / skip.segment;
            x.segment_groups = skip.segment / 4;
            x.segment_step = skip.segment;
            run_tile(panel, x, live_runs(x, rows), rows, vectors, n0, column, skip, last_mask, out, p0 * n + n0, n);
        }
    }
}

void vnni_conv_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const VnniConvOperand& conv, std::int64_t p_begin, std::int64_t p_end, std::int64_t n_begin,
                    std::int64_t n_end, const GemmOutput& output, bool fold_rounding, const VnniDepthSkip& skip) {
    const Epilogue out(output, fold_rounding);
    const std::int64_t depth = m;   // a multiple of 4: so is C (conv_reads_in_place)
    const std::int64_t run_bytes = std::int64_t(conv.kernel_w) * conv.channels;
    const std::int64_t row_bytes = std::int64_t(conv.padded_w) * conv.channels;
    const bool skippable = skip.segment == run_bytes;
    // Blocks of up to 16 tiles: each output pixel's window start (by stepping along the output
    // rows, no division per pixel) and each tile's live kernel rows are found once per block and
    // used by every panel.
    constexpr int kBlockRows = 16 * kVnniRowsPerTile;
    std::int64_t image = p_begin / (std::int64_t(conv.out_h) * conv.out_w);
    std::int64_t pixel = p_begin % (std::int64_t(conv.out_h) * conv.out_w);
    std::int64_t oy = pixel / conv.out_w, ox = pixel % conv.out_w;
    for (std::int64_t b0 = p_begin; b0 < p_end; b0 += kBlockRows) {
        const std::int64_t b1 = p_end - b0 < kBlockRows ? p_end : b0 + kBlockRows;
        const int tiles = int((b1 - b0 + kVnniRowsPerTile - 1) / kVnniRowsPerTile);
        TileRows tile[kBlockRows / kVnniRowsPerTile];
        LiveRuns live[kBlockRows / kVnniRowsPerTile];
        for (int t = 0; t < tiles; ++t) {
            const int rows = int(b1 - b0 - t * kVnniRowsPerTile < kVnniRowsPerTile ? b1 - b0 - t * kVnniRowsPerTile
                                                                                    : kVnniRowsPerTile);
            TileRows& x = tile[t];
            for (int r = 0; r < rows; ++r) {   // output pixel: its window's top-left byte
                x.rows[r] = conv.padded + image * conv.image_bytes + oy * conv.stride_h * row_bytes +
                            ox * conv.stride_w * conv.channels;
                if (++ox == conv.out_w) {
                    ox = 0;
                    if (++oy == conv.out_h) oy = 0, ++image;
                }
            }
            x.segments = conv.kernel_h;
            x.segment_groups = run_bytes / 4;
            x.segment_step = row_bytes;
            x.row_stride = 0;
            live[t] = skippable ? live_runs(x, rows) : LiveRuns{0, x.segments};
        }
        for (std::int64_t n0 = n_begin; n0 < n_end; n0 += kVnniPanel) {
            const PanelShape shape(n, n0);
            const int vectors = shape.vectors;
            const __mmask16 last_mask = shape.last_mask;
            const std::int8_t* panel = packed + n0 * depth;
            for (int t = 0; t < tiles; ++t) {
                const std::int64_t p0 = b0 + t * kVnniRowsPerTile;
                const int rows = int(b1 - p0 < kVnniRowsPerTile ? b1 - p0 : kVnniRowsPerTile);
                run_tile(panel, tile[t], live[t], rows, vectors, n0, column, skip, last_mask, out, p0 * n + n0, n);
            }
        }
    }
}

namespace {

// rows[i] (dword j) -> rows[j] (dword i) for a 16 x 16 matrix of dwords, in registers: dwords
// and then qwords interleaved inside each 128-bit lane (each lane then holds one column of four
// rows), then the 128-bit lanes gathered across rows in two steps.
__attribute__((always_inline)) inline void transpose_16x16_dwords(__m512i (&rows)[16]) {
    __m512i t[16], u[16];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
        t[2 * k] = _mm512_unpacklo_epi32(rows[2 * k], rows[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(rows[2 * k], rows[2 * k + 1]);
    }
    // u[4 * b + q], lane L: column 4 L + q of rows 4 b .. 4 b + 3.
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) {
        u[4 * b] = _mm512_unpacklo_epi64(t[4 * b], t[4 * b + 2]);
        u[4 * b + 1] = _mm512_unpackhi_epi64(t[4 * b], t[4 * b + 2]);
        u[4 * b + 2] = _mm512_unpacklo_epi64(t[4 * b + 1], t[4 * b + 3]);
        u[4 * b + 3] = _mm512_unpackhi_epi64(t[4 * b + 1], t[4 * b + 3]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
        const __m512i even01 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0x88);   // lanes 0, 2 of rows 0-7
        const __m512i odd01 = _mm512_shuffle_i32x4(u[q], u[4 + q], 0xDD);    // lanes 1, 3
        const __m512i even23 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0x88);
        const __m512i odd23 = _mm512_shuffle_i32x4(u[8 + q], u[12 + q], 0xDD);
        rows[q] = _mm512_shuffle_i32x4(even01, even23, 0x88);
        rows[8 + q] = _mm512_shuffle_i32x4(even01, even23, 0xDD);
        rows[4 + q] = _mm512_shuffle_i32x4(odd01, odd23, 0x88);
        rows[12 + q] = _mm512_shuffle_i32x4(odd01, odd23, 0xDD);
    }
}

}  // namespace

void vnni_pack_weights_avx512(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed,
                              std::int32_t* rowsum, const VnniSegmentSums& segments) {
    // 16 channels x 16 groups of 4 depth positions at a time: one 64-byte load per channel row
    // (16 sequential streams), a 16 x 16 dword transpose, and the 16 output vectors (one group of
    // 16 channels each) stored in place.  Rows past the last channel load as zero, and m % 4 == 0
    // makes the last block's masked loads whole dwords, so every byte of the packed size is
    // written (no zero fill) and no load reaches past a row.
    const std::int64_t groups = m / 4, depth = m;
    const __m512i ones = _mm512_set1_epi8(1);
    const std::int64_t segment_groups = segments.segment / 4;
    for (std::int64_t n0 = 0; n0 < n; n0 += kVnniPanel) {
        const std::int64_t vectors = ((n - n0 < kVnniPanel ? n - n0 : kVnniPanel) + 15) / 16;
        std::int8_t* const panel = packed + n0 * depth;
        for (std::int64_t v = 0; v < vectors; ++v) {
            const std::int64_t r0 = n0 + 16 * v, rows = n - r0 < 16 ? n - r0 : 16;
            const __mmask16 lanes = __mmask16((1u << rows) - 1u);
            // Lane i: the sum of row r0 + i's weights so far (vpdpbusd by a vector of ones: each
            // lane adds its four signed bytes, exactly; |sum| <= 128 m fits in int32).
            __m512i sum = _mm512_setzero_si512();
            for (std::int64_t g0 = 0; g0 < groups; g0 += 16) {
                const std::int64_t count = groups - g0 < 16 ? groups - g0 : 16;
                const __mmask16 loaded = __mmask16((1u << count) - 1u);
                __m512i block[16];
                // A row past the last channel has an empty mask: zeros, its memory never read.
#pragma GCC unroll 16
                for (int i = 0; i < 16; ++i)
                    block[i] = _mm512_maskz_loadu_epi32(i < rows ? loaded : __mmask16(0), w + (r0 + i) * m + 4 * g0);
                transpose_16x16_dwords(block);
                for (std::int64_t j = 0; j < count; ++j) {
                    const std::int64_t g = g0 + j;
                    _mm512_storeu_si512(panel + g * vectors * 64 + v * 64, block[j]);
                    dpbusd(sum, ones, block[j]);
                    if (segment_groups > 0 && (g + 1) % segment_groups == 0)   // 128 * prefix sum, mod 2^32
                        _mm512_mask_storeu_epi32(segments.sums + ((g + 1) / segment_groups) * segments.channels + r0,
                                                 lanes, _mm512_slli_epi32(sum, 7));
                }
            }
            _mm512_mask_storeu_epi32(rowsum + r0, lanes, sum);
        }
    }
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
