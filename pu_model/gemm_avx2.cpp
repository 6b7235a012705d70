// AVX2 micro-kernels of the fast GEMM (see gemm.hpp), exact for every int8 operand.
//
// Compiled for AVX2 through a target pragma and entered only after detail::cpu_has_avx2() said
// yes; like gemm_vnni.cpp it uses no standard-library templates, so no AVX2 code can leak into
// inline functions shared with code that runs on older CPUs.
//
// The multiply is vpmaddubsw (u8 x s8, adjacent products summed into a *saturating* int16) and
// vpmaddwd with a vector of ones (int16 pairs summed into int32), then vpaddd.  It is exact
// because the unsigned operand never exceeds 128 (docs/arithmetic.md has the proof):
//   activations a in [0, 127], weights w in [-128, 127]:  a0*w0 + a1*w1 in [-32512, 32258]
//   activations a in [0, 128]:                            a0*w0 + a1*w1 in [-32768, 32512]
// both inside int16 [-32768, 32767], so vpmaddubsw never saturates.  A block of pixel rows
// whose bytes are all >= 0 (every layer after a ReLU) takes that path directly.  A block with a
// negative byte (the network's input layer) takes the wide path instead: the block and each
// weight panel are widened once to int16 and multiplied with vpmaddwd alone (s16 x s16, pairs
// summed into int32: exact for any int8 operands), the same multiply-port work per product as
// the byte path; an earlier x = x+ - x- split needed twice as many.  int32 lanes then hold the
// exact sum whenever it fits int32 (check_gemm_fits_int32).
//
// The epilogue adds the per-channel column term and either stores int32 accumulators or
// requantises in registers (round half up, saturate, ReLU: the rules of postproc.hpp), so that a
// layer's int32 accumulators never travel through memory.
//
// Zen 3 issues one vpmaddubsw and one vpmaddwd per cycle on its two multiply pipes, so the peak
// is 32 int8 MACs per cycle per core (docs/performance.md).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "pu_model/gemm.hpp"
#include "common/isa_target.hpp"

// The rest of the file is compiled for the ISA (common/isa_target.hpp says how and why).
AIMCEMU_ISA_BEGIN("avx2")

namespace aimcemu::detail {
namespace {

// Products of one broadcast group of 4 activations with one weight vector (8 channels x 4
// depth positions), widened to 8 int32 sums.
inline __m256i dot4(__m256i x, __m256i w, __m256i ones) { return _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), ones); }

inline __m256i broadcast4(const std::int8_t* p) {
    std::int32_t four;
    std::memcpy(&four, p, 4);
    return _mm256_set1_epi32(four);
}

// The epilogue's requantisation of 16 channels (two vectors of int32 with the column added):
// (v >> s) + bit s-1 of v (= round_shift, postproc.cpp), saturating packs to int8, ReLU.
__attribute__((always_inline)) inline __m128i requantize16(__m256i v0, __m256i v1, const GemmOutput& out) {
    if (out.out_shift > 0) {
        const __m128i s = _mm_cvtsi32_si128(out.out_shift), s1 = _mm_cvtsi32_si128(out.out_shift - 1);
        const __m256i one = _mm256_set1_epi32(1);
        v0 = _mm256_add_epi32(_mm256_sra_epi32(v0, s), _mm256_and_si256(_mm256_sra_epi32(v0, s1), one));
        v1 = _mm256_add_epi32(_mm256_sra_epi32(v1, s), _mm256_and_si256(_mm256_sra_epi32(v1, s1), one));
    }
    // packs work per 128-bit half: fix the order after each step.
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xD8);   // v0[0..7], v1[0..7]
    const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packs_epi16(words, words), 0x08);
    const __m128i y = _mm256_castsi256_si128(bytes);
    return out.relu ? _mm_max_epi8(y, _mm_setzero_si128()) : y;
}

// acc[r][*] + column, stored as int32 or requantised int8, for `lanes` <= 16 channels.
template <int R>
__attribute__((always_inline)) inline void store_tile(__m256i (&acc)[R][2], const std::int32_t* column, int lanes, const GemmOutput& out, std::int64_t row0,
                std::int64_t n0, std::int64_t ldo) {
    const __m256i col0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(column));
    const __m256i col1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(column + 8));
    for (int r = 0; r < R; ++r) {
        acc[r][0] = _mm256_add_epi32(acc[r][0], col0);
        acc[r][1] = _mm256_add_epi32(acc[r][1], col1);
    }
    if (out.y) {
        for (int r = 0; r < R; ++r) {
            const __m128i y = requantize16(acc[r][0], acc[r][1], out);
            std::int8_t* dst = out.y + (row0 + r) * ldo + n0;
            if (lanes == 16) {
                _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), y);
            } else {
                alignas(16) std::int8_t tmp[16];
                _mm_store_si128(reinterpret_cast<__m128i*>(tmp), y);
                std::memcpy(dst, tmp, std::size_t(lanes));
            }
        }
        return;
    }
    if (lanes == 16) {
        for (int r = 0; r < R; ++r) {
            std::int32_t* dst = out.acc + (row0 + r) * ldo + n0;
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), acc[r][0]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 8), acc[r][1]);
        }
        return;
    }
    // Partial panel (N not a multiple of 16): masked stores of the first `lanes` channels.
    const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), index);
    const __m256i mask1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes - 8), index);
    for (int r = 0; r < R; ++r) {
        std::int32_t* dst = out.acc + (row0 + r) * ldo + n0;
        _mm256_maskstore_epi32(dst, mask0, acc[r][0]);
        _mm256_maskstore_epi32(dst + 8, mask1, acc[r][1]);
    }
}

// One register tile: R pixel rows x 16 output channels (two vectors of 8 int32 lanes).  The
// panel holds, for every group g of 4 depth positions, 2 vectors x 8 lanes x 4 bytes; x holds
// non-negative rows.
template <int R>
void micro_tile(const std::int8_t* panel, std::int64_t groups, const std::int8_t* x, std::int64_t ldx,
                const std::int32_t* column, int lanes, const GemmOutput& out, std::int64_t row0, std::int64_t n0,
                std::int64_t ldo) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (std::int64_t g = 0; g < groups; ++g) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + g * 64));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + g * 64 + 32));
        for (int r = 0; r < R; ++r) {
            const __m256i xv = broadcast4(x + r * ldx + 4 * g);
            acc[r][0] = _mm256_add_epi32(acc[r][0], dot4(xv, w0, ones));
            acc[r][1] = _mm256_add_epi32(acc[r][1], dot4(xv, w1, ones));
        }
    }
    store_tile<R>(acc, column, lanes, out, row0, n0, ldo);
}

// The wide path's register tile: R rows x 16 channels from int16 operands.  The wide panel
// holds, for every pair j of depth positions, 2 vectors x 8 lanes x 2 int16 (widen_panel); x16
// holds each row's depth as int16 (row stride ldx16 elements), two of which are broadcast per
// pair.
template <int R>
void wide_tile(const std::int16_t* panel, std::int64_t pairs, const std::int16_t* x16, std::int64_t ldx16,
               const std::int32_t* column, int lanes, const GemmOutput& out, std::int64_t row0, std::int64_t n0,
               std::int64_t ldo) {
    __m256i acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (std::int64_t j = 0; j < pairs; ++j) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + j * 32));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + j * 32 + 16));
        for (int r = 0; r < R; ++r) {
            std::int32_t two;
            std::memcpy(&two, x16 + r * ldx16 + 2 * j, 4);
            const __m256i xv = _mm256_set1_epi32(two);
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(xv, w0));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(xv, w1));
        }
    }
    store_tile<R>(acc, column, lanes, out, row0, n0, ldo);
}

// The full tiles in assembly: 6 rows x 16 channels.  GCC's register allocation of the intrinsic
// versions above kept one accumulator on the stack and added a register copy per accumulation,
// which made the loop dispatch-bound at about 2/3 of the peak.  The twelve accumulators are asm
// operands, so they stay in registers into the epilogue.  The rest is fixed to stay within GCC's
// 30 asm operands: ymm12/13 hold the step's two weight vectors, ymm14 the broadcast activations,
// ymm15 a product, rax the fourth row's address, and the byte path's int16 ones are read from
// memory (AT&T order: vpmaddubsw w, x, dst = x (u8) * w (s8)).  Each step reads 64 bytes of
// panel and 4 bytes of each row: 4 depth positions of bytes, or 2 of int16.
alignas(32) __attribute__((used)) static const std::int16_t kOnes16[16] asm("aimcemu_avx2_int16_ones") = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

// The loop of a 6 x 16 tile; ROW(address, acc0, acc1) is one row's multiply-accumulate.
#define AIMCEMU_AVX2_TILE_6X16_LOOP(ROW)                                                                          \
    "lea (%[x], %[ldx], 2), %%rax\n add %[ldx], %%rax\n" /* row 3 */                                             \
    "1:\n"                                                                                                        \
    "vmovdqu (%[w]), %%ymm12\n"                                                                                   \
    "vmovdqu 32(%[w]), %%ymm13\n"                                                                                 \
    ROW("(%[x])", a00, a01) ROW("(%[x], %[ldx], 1)", a10, a11) ROW("(%[x], %[ldx], 2)", a20, a21)                 \
    ROW("(%%rax)", a30, a31) ROW("(%%rax, %[ldx], 1)", a40, a41) ROW("(%%rax, %[ldx], 2)", a50, a51)             \
    "add $64, %[w]\n add $4, %[x]\n add $4, %%rax\n cmp %[end], %[w]\n jne 1b\n"
#define AIMCEMU_AVX2_TILE_6X16_OPERANDS(PANEL, ROWS, ACC, ROW_BYTES, PANEL_END)                                      \
    : [w] "+r"(PANEL), [x] "+r"(ROWS), [a00] "+x"(ACC[0][0]), [a01] "+x"(ACC[0][1]), [a10] "+x"(ACC[1][0]),         \
      [a11] "+x"(ACC[1][1]), [a20] "+x"(ACC[2][0]), [a21] "+x"(ACC[2][1]), [a30] "+x"(ACC[3][0]),                 \
      [a31] "+x"(ACC[3][1]), [a40] "+x"(ACC[4][0]), [a41] "+x"(ACC[4][1]), [a50] "+x"(ACC[5][0]),                 \
      [a51] "+x"(ACC[5][1])                                                                                       \
    : [ldx] "r"(ROW_BYTES), [end] "r"(PANEL_END)                                                                  \
    : "rax", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc"
// Byte path: u8 x s8 pairs (vpmaddubsw), widened to int32 by vpmaddwd with ones.
#define AIMCEMU_AVX2_BYTE_ROW(addr, a0, a1)                                                                       \
    "vpbroadcastd " addr ", %%ymm14\n"                                                                            \
    "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n"                                                                      \
    "vpmaddubsw %%ymm13, %%ymm14, %%ymm14\n"                                                                      \
    "vpmaddwd aimcemu_avx2_int16_ones(%%rip), %%ymm15, %%ymm15\n"                                                 \
    "vpmaddwd aimcemu_avx2_int16_ones(%%rip), %%ymm14, %%ymm14\n"                                                 \
    "vpaddd %%ymm15, %[" #a0 "], %[" #a0 "]\n"                                                                    \
    "vpaddd %%ymm14, %[" #a1 "], %[" #a1 "]\n"
// Wide path: s16 x s16 pairs summed into int32 by vpmaddwd alone.
#define AIMCEMU_AVX2_WIDE_ROW(addr, a0, a1)                                                                       \
    "vpbroadcastd " addr ", %%ymm14\n"                                                                            \
    "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n"                                                                        \
    "vpmaddwd %%ymm13, %%ymm14, %%ymm14\n"                                                                        \
    "vpaddd %%ymm15, %[" #a0 "], %[" #a0 "]\n"                                                                    \
    "vpaddd %%ymm14, %[" #a1 "], %[" #a1 "]\n"

void micro_tile_6x16(const std::int8_t* panel, std::int64_t groups, const std::int8_t* x, std::int64_t ldx,
                     const std::int32_t* column, int lanes, const GemmOutput& out, std::int64_t row0, std::int64_t n0,
                     std::int64_t ldo) {
    const std::int8_t* panel_end = panel + 64 * groups;
    __m256i acc[6][2];
    for (int r = 0; r < 6; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    asm volatile(AIMCEMU_AVX2_TILE_6X16_LOOP(AIMCEMU_AVX2_BYTE_ROW)
                 AIMCEMU_AVX2_TILE_6X16_OPERANDS(panel, x, acc, ldx, panel_end));
    store_tile<6>(acc, column, lanes, out, row0, n0, ldo);
}

void wide_tile_6x16(const std::int16_t* panel, std::int64_t pairs, const std::int16_t* x16, std::int64_t ldx16,
                    const std::int32_t* column, int lanes, const GemmOutput& out, std::int64_t row0, std::int64_t n0,
                    std::int64_t ldo) {
    const std::int16_t* panel_end = panel + 32 * pairs;
    const std::int64_t row_bytes = 2 * ldx16;
    __m256i acc[6][2];
    for (int r = 0; r < 6; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    asm volatile(AIMCEMU_AVX2_TILE_6X16_LOOP(AIMCEMU_AVX2_WIDE_ROW)
                 AIMCEMU_AVX2_TILE_6X16_OPERANDS(panel, x16, acc, row_bytes, panel_end));
    store_tile<6>(acc, column, lanes, out, row0, n0, ldo);
}
#undef AIMCEMU_AVX2_WIDE_ROW
#undef AIMCEMU_AVX2_BYTE_ROW
#undef AIMCEMU_AVX2_TILE_6X16_OPERANDS
#undef AIMCEMU_AVX2_TILE_6X16_LOOP

template <typename Operand>
using Tile = void (*)(const Operand*, std::int64_t, const Operand*, std::int64_t, const std::int32_t*, int,
                      const GemmOutput&, std::int64_t, std::int64_t, std::int64_t);

Tile<std::int8_t> pick_byte_tile(int rows) {
    switch (rows) {
        case 1: return micro_tile<1>;
        case 2: return micro_tile<2>;
        case 3: return micro_tile<3>;
        case 4: return micro_tile<4>;
        case 5: return micro_tile<5>;
        default: return micro_tile_6x16;
    }
}

Tile<std::int16_t> pick_wide_tile(int rows) {
    switch (rows) {
        case 1: return wide_tile<1>;
        case 2: return wide_tile<2>;
        case 3: return wide_tile<3>;
        case 4: return wide_tile<4>;
        case 5: return wide_tile<5>;
        default: return wide_tile_6x16;
    }
}

// True if any of the first `bytes` bytes of rows [0, rows) (row stride ldx) is negative.
bool any_negative(const std::int8_t* x, std::int64_t ldx, std::int64_t rows, std::int64_t bytes) {
    __m256i sign = _mm256_setzero_si256();
    std::uint8_t tail = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int8_t* row = x + r * ldx;
        std::int64_t k = 0;
        for (; k + 32 <= bytes; k += 32)
            sign = _mm256_or_si256(sign, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k)));
        for (; k < bytes; ++k) tail |= std::uint8_t(row[k]);
    }
    return _mm256_movemask_epi8(sign) != 0 || (tail & 0x80) != 0;
}

// The first `depth` bytes (a multiple of 4) of each of `rows` rows, sign-extended to int16 rows
// of stride `depth`.
void widen_rows(const std::int8_t* x, std::int64_t ldx, std::int64_t rows, std::int64_t depth, std::int16_t* x16) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int8_t* src = x + r * ldx;
        std::int16_t* dst = x16 + r * depth;
        std::int64_t k = 0;
        for (; k + 16 <= depth; k += 16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))));
        for (; k < depth; ++k) dst[k] = src[k];
    }
}

// One panel of the byte layout (per group of 4 depth positions: 16 lanes x 4 bytes) in the wide
// layout (per pair of depth positions: 16 lanes x 2 int16), as wide_tile reads it.  Per 8-lane
// half of a group, a shuffle puts each lane's first pair of bytes in the low 8 bytes of each
// 128-bit half and its second pair in the high 8; a qword permute gathers the 8 lanes' first
// pairs and second pairs, and each is sign-extended to one vector of the wide panel.
void widen_panel(const std::int8_t* panel, std::int64_t groups, std::int16_t* wide) {
    const __m256i pairs_apart = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,   //
                                                 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    for (std::int64_t g = 0; g < groups; ++g) {
        for (int half = 0; half < 2; ++half) {   // lanes 0-7, then 8-15
            const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + g * 64 + half * 32));
            const __m256i grouped = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(bytes, pairs_apart), 0xD8);
            std::int16_t* first = wide + (2 * g) * 32 + half * 16;   // depth positions 4g, 4g+1
            std::int16_t* second = first + 32;                        // depth positions 4g+2, 4g+3
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(first), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(grouped)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(second),
                                _mm256_cvtepi8_epi16(_mm256_extracti128_si256(grouped, 1)));
        }
    }
}

// Rows [b0, b1) of the output from the block of X at x (non-negative bytes): every panel.
void byte_block(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t groups,
                const std::int8_t* x, std::int64_t ldx, std::int64_t b0, std::int64_t b1, const GemmOutput& out) {
    for (std::int64_t n0 = 0; n0 < n; n0 += kAvx2Panel) {
        const int lanes = int(n - n0 < kAvx2Panel ? n - n0 : kAvx2Panel);
        const std::int8_t* panel = packed + n0 * groups * 4;
        for (std::int64_t p0 = b0; p0 < b1; p0 += kAvx2RowsPerTile) {
            const int rows = int(b1 - p0 < kAvx2RowsPerTile ? b1 - p0 : kAvx2RowsPerTile);
            pick_byte_tile(rows)(panel, groups, x + (p0 - b0) * ldx, ldx, column + n0, lanes, out, p0, n0, n);
        }
    }
}

// The same from a block widened to int16 (x16, stride depth); wide_panel holds one widened
// panel at a time (groups * 64 int16).
void wide_block(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t groups,
                const std::int16_t* x16, std::int16_t* wide_panel, std::int64_t b0, std::int64_t b1,
                const GemmOutput& out) {
    const std::int64_t depth = groups * 4;
    for (std::int64_t n0 = 0; n0 < n; n0 += kAvx2Panel) {
        const int lanes = int(n - n0 < kAvx2Panel ? n - n0 : kAvx2Panel);
        widen_panel(packed + n0 * depth, groups, wide_panel);
        for (std::int64_t p0 = b0; p0 < b1; p0 += kAvx2RowsPerTile) {
            const int rows = int(b1 - p0 < kAvx2RowsPerTile ? b1 - p0 : kAvx2RowsPerTile);
            pick_wide_tile(rows)(wide_panel, 2 * groups, x16 + (p0 - b0) * depth, depth, column + n0, lanes, out, p0,
                                 n0, n);
        }
    }
}

}  // namespace

void avx2_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const std::int8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                    const GemmOutput& out) {
    const std::int64_t groups = (m + 3) / 4;
    const std::int64_t depth = groups * 4;
    // Blocks of rows small enough that the block of X stays in L2 while every panel passes.
    const std::int64_t block = kAvx2RowsPerTile * (depth <= 1024 ? 16 : 6);
    std::int16_t* wide = nullptr;   // a block with negative bytes and one panel, as int16; on demand
    for (std::int64_t b0 = p_begin; b0 < p_end; b0 += block) {
        const std::int64_t b1 = p_end - b0 < block ? p_end : b0 + block;
        const std::int8_t* x = xt + (b0 - p_begin) * ldx;
        if (!any_negative(x, ldx, b1 - b0, m)) {
            byte_block(packed, column, n, groups, x, ldx, b0, b1, out);
            continue;
        }
        if (!wide) wide = new std::int16_t[std::size_t((block + kAvx2Panel) * depth)];
        widen_rows(x, ldx, b1 - b0, depth, wide);
        wide_block(packed, column, n, groups, wide, wide + block * depth, b0, b1, out);
    }
    delete[] wide;
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
