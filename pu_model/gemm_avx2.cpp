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
// negative byte (the network's input layer) is split once into x+ = max(x, 0) and
// x- = max(-x, 0), both in [0, 128], and the two products are subtracted in int32, at twice the
// multiply cost.  int32 lanes then hold the exact sum whenever it fits int32
// (check_gemm_fits_int32).
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
// panel holds, for every group g of 4 depth positions, 2 vectors x 8 lanes x 4 bytes.
// x holds non-negative rows; with Split, x is x+ and x_neg holds x- (same stride).
template <int R, bool Split>
void micro_tile(const std::int8_t* panel, std::int64_t groups, const std::int8_t* x, const std::int8_t* x_neg,
                std::int64_t ldx, const std::int32_t* column, int lanes, const GemmOutput& out, std::int64_t row0,
                std::int64_t n0, std::int64_t ldo) {
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
            if (Split) {
                const __m256i xn = broadcast4(x_neg + r * ldx + 4 * g);
                acc[r][0] = _mm256_sub_epi32(acc[r][0], dot4(xn, w0, ones));
                acc[r][1] = _mm256_sub_epi32(acc[r][1], dot4(xn, w1, ones));
            }
        }
    }
    store_tile<R>(acc, column, lanes, out, row0, n0, ldo);
}

// The full tile of the non-negative path in assembly: 6 rows x 16 channels.  GCC's register
// allocation of the intrinsic version above kept one accumulator on the stack and added a
// register copy per accumulation, which made the loop dispatch-bound at about 2/3 of the peak.
// The twelve accumulators are asm operands, so they stay in registers into the epilogue.  The
// rest is fixed to stay within GCC's 30 asm operands: ymm12/13 hold the group's two weight
// vectors, ymm14 the broadcast activations, ymm15 a product, rax the fourth row's address, and
// the int16 ones are read from memory (AT&T order: vpmaddubsw w, x, dst = x (u8) * w (s8)).
alignas(32) __attribute__((used)) static const std::int16_t kOnes16[16] asm("aimcemu_avx2_int16_ones") = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

void micro_tile_6x16(const std::int8_t* panel, std::int64_t groups, const std::int8_t* x, const std::int8_t*,
                     std::int64_t ldx, const std::int32_t* column, int lanes, const GemmOutput& out,
                     std::int64_t row0, std::int64_t n0, std::int64_t ldo) {
    const std::int8_t* panel_end = panel + 64 * groups;
    __m256i acc[6][2];
    for (int r = 0; r < 6; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    asm volatile(
        "lea (%[x], %[ldx], 2), %%rax\n add %[ldx], %%rax\n"   // row 3
        "1:\n"
        "vmovdqu (%[w]), %%ymm12\n"
        "vmovdqu 32(%[w]), %%ymm13\n"
#define AIMCEMU_AVX2_ROW(addr, a0, a1)                                  \
        "vpbroadcastd " addr ", %%ymm14\n"                              \
        "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n"                        \
        "vpmaddubsw %%ymm13, %%ymm14, %%ymm14\n"                        \
        "vpmaddwd aimcemu_avx2_int16_ones(%%rip), %%ymm15, %%ymm15\n"   \
        "vpmaddwd aimcemu_avx2_int16_ones(%%rip), %%ymm14, %%ymm14\n"   \
        "vpaddd %%ymm15, %[" #a0 "], %[" #a0 "]\n"                      \
        "vpaddd %%ymm14, %[" #a1 "], %[" #a1 "]\n"
        AIMCEMU_AVX2_ROW("(%[x])", a00, a01)
        AIMCEMU_AVX2_ROW("(%[x], %[ldx], 1)", a10, a11)
        AIMCEMU_AVX2_ROW("(%[x], %[ldx], 2)", a20, a21)
        AIMCEMU_AVX2_ROW("(%%rax)", a30, a31)
        AIMCEMU_AVX2_ROW("(%%rax, %[ldx], 1)", a40, a41)
        AIMCEMU_AVX2_ROW("(%%rax, %[ldx], 2)", a50, a51)
#undef AIMCEMU_AVX2_ROW
        "add $64, %[w]\n add $4, %[x]\n add $4, %%rax\n cmp %[end], %[w]\n jne 1b\n"
        : [w] "+r"(panel), [x] "+r"(x), [a00] "+x"(acc[0][0]), [a01] "+x"(acc[0][1]), [a10] "+x"(acc[1][0]),
          [a11] "+x"(acc[1][1]), [a20] "+x"(acc[2][0]), [a21] "+x"(acc[2][1]), [a30] "+x"(acc[3][0]),
          [a31] "+x"(acc[3][1]), [a40] "+x"(acc[4][0]), [a41] "+x"(acc[4][1]), [a50] "+x"(acc[5][0]),
          [a51] "+x"(acc[5][1])
        : [ldx] "r"(ldx), [end] "r"(panel_end)
        : "rax", "xmm12", "xmm13", "xmm14", "xmm15", "memory", "cc");
    store_tile<6>(acc, column, lanes, out, row0, n0, ldo);
}

// The split path needs two broadcasts per row; two 3-row tiles keep its accumulators in registers.
void micro_tile_split_6x16(const std::int8_t* panel, std::int64_t groups, const std::int8_t* x,
                           const std::int8_t* x_neg, std::int64_t ldx, const std::int32_t* column, int lanes,
                           const GemmOutput& out, std::int64_t row0, std::int64_t n0, std::int64_t ldo) {
    micro_tile<3, true>(panel, groups, x, x_neg, ldx, column, lanes, out, row0, n0, ldo);
    micro_tile<3, true>(panel, groups, x + 3 * ldx, x_neg + 3 * ldx, ldx, column, lanes, out, row0 + 3, n0, ldo);
}

using MicroTile = void (*)(const std::int8_t*, std::int64_t, const std::int8_t*, const std::int8_t*, std::int64_t,
                           const std::int32_t*, int, const GemmOutput&, std::int64_t, std::int64_t, std::int64_t);

template <bool Split>
MicroTile pick(int rows) {
    switch (rows) {
        case 1: return micro_tile<1, Split>;
        case 2: return micro_tile<2, Split>;
        case 3: return micro_tile<3, Split>;
        case 4: return micro_tile<4, Split>;
        case 5: return micro_tile<5, Split>;
        default: return Split ? micro_tile_split_6x16 : micro_tile_6x16;
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

// x+ = max(x, 0) and x- = |min(x, 0)| (-128 becomes the byte 0x80, read as 128 unsigned) for
// `bytes` bytes (a multiple of 4) of each of `rows` rows.
void split_signs(const std::int8_t* x, std::int64_t ldx, std::int64_t rows, std::int64_t bytes, std::int8_t* pos,
                 std::int8_t* neg) {
    const __m256i zero = _mm256_setzero_si256();
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::int8_t* src = x + r * ldx;
        std::int8_t* p = pos + r * ldx;
        std::int8_t* q = neg + r * ldx;
        std::int64_t k = 0;
        for (; k + 32 <= bytes; k += 32) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + k), _mm256_max_epi8(v, zero));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), _mm256_abs_epi8(_mm256_min_epi8(v, zero)));
        }
        for (; k < bytes; ++k) {
            p[k] = src[k] > 0 ? src[k] : std::int8_t(0);
            q[k] = src[k] < 0 ? std::int8_t(-src[k]) : std::int8_t(0);   // -(-128) wraps to 0x80 = 128 unsigned
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
    std::int8_t* split = nullptr;   // x+ and x- of a block with negative bytes, allocated on demand
    for (std::int64_t b0 = p_begin; b0 < p_end; b0 += block) {
        const std::int64_t b1 = p_end - b0 < block ? p_end : b0 + block;
        const std::int8_t* x = xt + (b0 - p_begin) * ldx;
        const std::int8_t* x_neg = nullptr;
        if (any_negative(x, ldx, b1 - b0, m)) {
            if (!split) split = new std::int8_t[std::size_t(2 * block * ldx)];
            split_signs(x, ldx, b1 - b0, depth, split, split + block * ldx);
            x = split;
            x_neg = split + block * ldx;
        }
        for (std::int64_t n0 = 0; n0 < n; n0 += kAvx2Panel) {
            const int lanes = int(n - n0 < kAvx2Panel ? n - n0 : kAvx2Panel);
            const std::int8_t* panel = packed + n0 * depth;
            for (std::int64_t p0 = b0; p0 < b1; p0 += kAvx2RowsPerTile) {
                const int rows = int(b1 - p0 < kAvx2RowsPerTile ? b1 - p0 : kAvx2RowsPerTile);
                const std::int64_t offset = (p0 - b0) * ldx;
                const MicroTile tile = x_neg ? pick<true>(rows) : pick<false>(rows);
                tile(panel, groups, x + offset, x_neg ? x_neg + offset : nullptr, ldx, column + n0, lanes, out, p0, n0,
                     n);
            }
        }
    }
    delete[] split;
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
