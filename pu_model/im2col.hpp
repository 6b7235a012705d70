// IM2COL: turns a convolution over an HWC int8 feature map into the activation operand of a GEMM.
//
// The PU does this by address generation (ADM commands reading HWC segments from HBM); here it is
// a gather into a buffer.  Orientation: the operand is stored P x M ("patch-major"): row p is the
// receptive field of output pixel p = oy * out_w + ox, laid out in (ky, kx, c) order, which is the
// order of one row of the weight matrix [N][kernel_h][kernel_w][Cin] (formats/network.hpp).  So acc[p][n] is a
// dot product of two contiguous rows, and the GEMM's X[M][P] is this buffer read transposed.
// Padding positions read as the value 0.
#pragma once
#include <cstdint>
#include <vector>

#include "formats/network.hpp"

namespace aimcemu {

// The geometry of one window operation (conv, pool) on an HWC input.
struct WindowGeometry {
    Shape3 in;
    Window window;   // per-axis kernel, stride and padding

    int out_h() const { return window.out_h(in.h); }
    int out_w() const { return window.out_w(in.w); }
    std::int64_t m() const { return window.taps() * in.c; }                  // GEMM depth
    std::int64_t p() const { return std::int64_t(out_h()) * out_w(); }       // output pixels
    // Throws FormatError naming `field` unless the geometry is valid (each pad < its axis' kernel,
    // the window fits the padded input).
    void validate(const std::string& field) const;
};

// Writes the P x M operand into `out` (row stride `row_stride` >= M bytes).  Every byte is XORed
// with `xor_mask`: 0 gives the int8 operand, 0x80 gives the operand offset by +128 as uint8 (what
// VNNI's u8 x s8 instruction wants), with padding then reading 0x80 (= 0 + 128).  Bytes
// [M, row_stride) of every row are set to xor_mask.  `threads` > 1 splits the output rows over
// the worker pool (large operands only); the bytes written never depend on it.
void im2col_into(const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask, std::int64_t row_stride,
                 std::uint8_t* out, int threads = 1);

// Rows [p_begin, p_end) of the operand of consecutive images: x holds the images one after the
// other (g.in.size() bytes each), row p belongs to image p / g.p() and is written at
// out + (p - p_begin) * row_stride, with the bytes im2col_into writes for it.  For a GEMM that
// writes each chunk of rows just before it multiplies them (gemm_fast_streamed's `write`, which
// hands over a scratch block for the chunk; gemm_fast's `prepare` with out = operand + p_begin rows).
void im2col_pixels_into(const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask, std::int64_t row_stride,
                        std::uint8_t* out, std::int64_t p_begin, std::int64_t p_end);

// The bytes of one image's input padded by g's window padding on every side (what a kernel that
// reads its windows in place takes: gemm_fast_conv).
std::int64_t padded_input_bytes(const WindowGeometry& g);
// `images` consecutive HWC images (g.in.size() bytes each) into out, each padded on every side by
// the window's padding, every byte XORed with xor_mask and the padding xor_mask itself (a 0 that
// reads 0x80 after the VNNI kernel's offset, as IM2COL writes it); padded_input_bytes(g) each.
void pad_input_into(const std::int8_t* x, const WindowGeometry& g, std::int64_t images, std::uint8_t xor_mask,
                    std::uint8_t* out);

// Convenience: the plain int8 P x M operand.
std::vector<std::int8_t> im2col(const std::int8_t* x, const WindowGeometry& g);

// The forms of IM2COL's copies (and of the residual add, postproc.hpp): the widest the CPU has
// runs, chosen at the first call and kept (the CPU does not change).  Every form writes the same
// bytes; the vector ones only move them in fewer instructions.
enum class SimdKernel { Portable, Avx2, Avx512 };
const char* to_string(SimdKernel kernel);   // "portable", "avx2", "avx512"
bool simd_kernel_available(SimdKernel kernel);
// The kernel IM2COL (im2col_into, im2col_pixels_into, pad_input_into) runs.  Tests check it
// against CPUID read on their own, so that a vector path cannot silently drop out.
SimdKernel im2col_kernel();

namespace detail {
// Whether this CPU has AVX-512F/BW/VL (the masked byte moves of im2col_interior_avx512).
bool cpu_has_avx512bw();
// The widest SimdKernel this CPU has (avx512 > avx2 > portable), read from CPUID on every call.
SimdKernel best_simd_kernel();
// im2col_pixels_into and pad_input_into with a kernel named by the caller rather than
// im2col_kernel(), so that tests compare every kernel the CPU has with the portable one.
// Throws std::invalid_argument unless simd_kernel_available(kernel) (require_simd_kernel).
void require_simd_kernel(SimdKernel kernel);
void im2col_pixels_into_with(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask,
                             std::int64_t row_stride, std::uint8_t* out, std::int64_t p_begin, std::int64_t p_end);
void pad_input_into_with(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g, std::int64_t images,
                         std::uint8_t xor_mask, std::uint8_t* out);
// Operand rows of `pixels` consecutive output pixels whose whole window lies inside the input:
// row px is `runs` runs of `run_bytes` bytes, run r read from src + px * src_pixel_step +
// r * src_row_step, each byte XORed with xor_mask, then xor_mask up to row_stride.
// im2col_avx512.cpp; call only when cpu_has_avx512bw().
void im2col_interior_avx512(const std::int8_t* src, std::int64_t src_pixel_step, std::int64_t src_row_step,
                            int runs, int run_bytes, std::int64_t pixels, std::uint8_t xor_mask, std::uint8_t* dst,
                            std::int64_t row_stride);
// dst[i] = src[i] ^ xor_mask for n bytes, 64 at a time (pad_input_into's rows; a padded copy
// with the portable 8-byte words was 2 % of a ResNet-18 pass).  Call only when cpu_has_avx512bw().
void xor_copy_avx512(const std::int8_t* src, std::uint8_t xor_mask, std::int64_t n, std::uint8_t* dst);
// The same two with AVX2 (im2col_avx2.cpp; call only when cpu_has_avx2()).  Without byte masks
// the interior kernel moves short runs as whole 8-, 16- or 32-byte pieces that may read past a
// run: src_end is the end of the input it may read (never read at or past it), and the pieces
// never write past row px's row_stride bytes.
void im2col_interior_avx2(const std::int8_t* src, const std::int8_t* src_end, std::int64_t src_pixel_step,
                          std::int64_t src_row_step, int runs, int run_bytes, std::int64_t pixels,
                          std::uint8_t xor_mask, std::uint8_t* dst, std::int64_t row_stride);
void xor_copy_avx2(const std::int8_t* src, std::uint8_t xor_mask, std::int64_t n, std::uint8_t* dst);
}  // namespace detail

}  // namespace aimcemu
