// IM2COL's interior pixels and pad_input_into's rows with AVX2 (see im2col.hpp,
// detail::im2col_interior_avx2), for CPUs without AVX-512 (AMD Zen 2 and 3).
//
// Why: the portable copy moves each kernel row with overlapping 8- and 16-byte words after the
// per-run edge checks of the generic path; the 3-channel stem's 21-byte runs (49 per output
// pixel) made its IM2COL a large part of that layer.  AVX2 has no byte masks, so a run is moved in
// one of two ways:
//   - as one whole 8-, 16- or 32-byte piece, longer than the run, where the destination row has
//     room for the piece: the bytes past the run belong to the next run or to the row's padding,
//     which are written after it, in that order, so the extra bytes never survive.  The piece also
//     reads past the run's end in the source; it is taken only where that read stays before
//     src_end (the end of the image), so the last pixels of an image take the exact moves;
//   - exactly, as whole 32-byte pieces and one that ends at the run's end, or two overlapping
//     pieces for a short run: XOR with one mask writes the same byte twice, and nothing outside
//     the run is read or written.
// Runs longer than 32 bytes (a 64-channel 3x3 window's 192) always take the exact form.
//
// Compiled for AVX2 through a target pragma and entered only after detail::cpu_has_avx2() said
// yes; no standard-library templates, so that nothing compiled here for AVX2 can be merged into
// code that runs elsewhere (common/isa_target.hpp).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "pu_model/im2col.hpp"
#include "common/isa_target.hpp"

AIMCEMU_ISA_BEGIN("avx2")

namespace aimcemu::detail {
namespace {

// The XOR mask at every width a move uses, built once per call.
struct Flip {
    __m256i v32;
    __m128i v16;
    std::uint32_t v4;
    std::uint8_t v1;
};

inline Flip make_flip(std::uint8_t xor_mask) {
    return {_mm256_set1_epi8(char(xor_mask)), _mm_set1_epi8(char(xor_mask)), 0x01010101u * xor_mask, xor_mask};
}

// One piece of Width bytes: load, XOR, store (unaligned).
template <int Width>
inline void xor_piece(const std::int8_t* in, std::uint8_t* out, const Flip& flip) {
    if constexpr (Width == 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_xor_si256(v, flip.v32));
    } else if constexpr (Width == 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_xor_si128(v, flip.v16));
    } else if constexpr (Width == 8) {
        const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_xor_si128(v, flip.v16));
    } else {
        static_assert(Width == 4);
        std::uint32_t word;
        std::memcpy(&word, in, 4);
        word ^= flip.v4;
        std::memcpy(out, &word, 4);
    }
}

// Exactly n bytes: whole 32-byte pieces and one more that ends at n, or two overlapping pieces
// of the widest width <= n; nothing outside [0, n) is read or written.
inline void xor_run_exact(const std::int8_t* in, std::int64_t n, std::uint8_t* out, const Flip& flip) {
    if (n >= 32) {
        std::int64_t at = 0;
        for (; at + 32 <= n; at += 32) xor_piece<32>(in + at, out + at, flip);
        if (at < n) xor_piece<32>(in + n - 32, out + n - 32, flip);
    } else if (n >= 16) {
        xor_piece<16>(in, out, flip);
        xor_piece<16>(in + n - 16, out + n - 16, flip);
    } else if (n >= 8) {
        xor_piece<8>(in, out, flip);
        xor_piece<8>(in + n - 8, out + n - 8, flip);
    } else if (n >= 4) {
        xor_piece<4>(in, out, flip);
        xor_piece<4>(in + n - 4, out + n - 4, flip);
    } else {
        for (std::int64_t i = 0; i < n; ++i) out[i] = std::uint8_t(in[i]) ^ flip.v1;
    }
}

// Bytes [m, row_stride) of a row set to the mask, without a byte past row_stride (the next row
// may belong to another worker): 32-byte stores, then 16, 8, 4 and single bytes.
inline void fill_padding(std::uint8_t* row, std::int64_t m, std::int64_t row_stride, const Flip& flip) {
    std::int64_t at = m;
    for (; at + 32 <= row_stride; at += 32) _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + at), flip.v32);
    if (at + 16 <= row_stride) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + at), flip.v16);
        at += 16;
    }
    if (at + 8 <= row_stride) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(row + at), flip.v16);
        at += 8;
    }
    if (at + 4 <= row_stride) {
        std::memcpy(row + at, &flip.v4, 4);
        at += 4;
    }
    for (; at < row_stride; ++at) row[at] = flip.v1;
}

// How many of a pixel's runs, from the first, may take a whole Width-byte piece without writing
// past the row: run r's piece ends at r * run_bytes + Width.
inline int runs_with_room(int runs, int run_bytes, int width, std::int64_t row_stride) {
    if (row_stride < width) return 0;
    const std::int64_t fit = (row_stride - width) / run_bytes + 1;
    return fit < runs ? int(fit) : runs;
}

// How many pixels, from the first, may read their first `whole_runs` runs as whole pieces without
// reading at or past src_end: pixel px's last such piece reads up to
// px * src_pixel_step + (whole_runs - 1) * src_row_step + width bytes after src.
inline std::int64_t pixels_with_room(const std::int8_t* src, const std::int8_t* src_end, std::int64_t src_pixel_step,
                                     std::int64_t src_row_step, int whole_runs, int width, std::int64_t pixels) {
    if (whole_runs == 0) return pixels;
    const std::int64_t last_piece_end = std::int64_t(whole_runs - 1) * src_row_step + width;
    const std::int64_t readable = src_end - src;
    if (readable < last_piece_end) return 0;
    const std::int64_t fit = (readable - last_piece_end) / src_pixel_step + 1;
    return fit < pixels ? fit : pixels;
}

// Runs of at most Width bytes (and more than half of it, or 8 for the shortest): a whole piece
// per run where the row and the source have room, the exact moves elsewhere.
template <int Width>
void interior_short_runs(const std::int8_t* src, const std::int8_t* src_end, std::int64_t src_pixel_step,
                         std::int64_t src_row_step, int runs, int run_bytes, std::int64_t pixels, const Flip& flip,
                         std::uint8_t* dst, std::int64_t row_stride) {
    const std::int64_t m = std::int64_t(runs) * run_bytes;
    const int whole_runs = runs_with_room(runs, run_bytes, Width, row_stride);
    const std::int64_t fast_pixels =
        pixels_with_room(src, src_end, src_pixel_step, src_row_step, whole_runs, Width, pixels);
    for (std::int64_t px = 0; px < pixels; ++px) {
        const std::int8_t* from = src + px * src_pixel_step;
        std::uint8_t* row = dst + px * row_stride;
        int r = 0;
        if (px < fast_pixels)
            for (; r < whole_runs; ++r) xor_piece<Width>(from + r * src_row_step, row + r * run_bytes, flip);
        for (; r < runs; ++r) xor_run_exact(from + r * src_row_step, run_bytes, row + r * run_bytes, flip);
        fill_padding(row, m, row_stride, flip);
    }
}

// Runs longer than 32 bytes: the exact moves (whole pieces and one that ends at the run's end).
void interior_long_runs(const std::int8_t* src, std::int64_t src_pixel_step, std::int64_t src_row_step, int runs,
                        int run_bytes, std::int64_t pixels, const Flip& flip, std::uint8_t* dst,
                        std::int64_t row_stride) {
    const std::int64_t m = std::int64_t(runs) * run_bytes;
    for (std::int64_t px = 0; px < pixels; ++px) {
        const std::int8_t* from = src + px * src_pixel_step;
        std::uint8_t* row = dst + px * row_stride;
        for (int r = 0; r < runs; ++r) xor_run_exact(from + r * src_row_step, run_bytes, row + r * run_bytes, flip);
        fill_padding(row, m, row_stride, flip);
    }
}

}  // namespace

void im2col_interior_avx2(const std::int8_t* src, const std::int8_t* src_end, std::int64_t src_pixel_step,
                          std::int64_t src_row_step, int runs, int run_bytes, std::int64_t pixels,
                          std::uint8_t xor_mask, std::uint8_t* dst, std::int64_t row_stride) {
    const Flip flip = make_flip(xor_mask);
    if (run_bytes > 32)
        interior_long_runs(src, src_pixel_step, src_row_step, runs, run_bytes, pixels, flip, dst, row_stride);
    else if (run_bytes > 16)
        interior_short_runs<32>(src, src_end, src_pixel_step, src_row_step, runs, run_bytes, pixels, flip, dst,
                                row_stride);
    else if (run_bytes > 8)
        interior_short_runs<16>(src, src_end, src_pixel_step, src_row_step, runs, run_bytes, pixels, flip, dst,
                                row_stride);
    else
        interior_short_runs<8>(src, src_end, src_pixel_step, src_row_step, runs, run_bytes, pixels, flip, dst,
                               row_stride);
}

void xor_copy_avx2(const std::int8_t* src, std::uint8_t xor_mask, std::int64_t n, std::uint8_t* dst) {
    xor_run_exact(src, n, dst, make_flip(xor_mask));
}

}  // namespace aimcemu::detail

AIMCEMU_ISA_END()
