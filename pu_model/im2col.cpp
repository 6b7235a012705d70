// IM2COL address generation (see im2col.hpp for the operand's orientation).
#include "pu_model/im2col.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/errors.hpp"
#include "pu_model/gemm.hpp"

namespace aimcemu {

void WindowGeometry::validate(const std::string& field) const {
    if (in.h <= 0 || in.w <= 0 || in.c <= 0)
        throw FormatError("<memory>", field, "input shape must be positive");
    const Window& w = window;
    if (w.kernel_h < 1 || w.kernel_w < 1) throw FormatError("<memory>", field, "kernel_h and kernel_w must be >= 1");
    if (w.stride_h < 1 || w.stride_w < 1) throw FormatError("<memory>", field, "stride_h and stride_w must be >= 1");
    if (w.pad_top < 0 || w.pad_top >= w.kernel_h || w.pad_bottom < 0 || w.pad_bottom >= w.kernel_h)
        throw FormatError("<memory>", field, "pad_top and pad_bottom must be in 0..kernel_h-1");
    if (w.pad_left < 0 || w.pad_left >= w.kernel_w || w.pad_right < 0 || w.pad_right >= w.kernel_w)
        throw FormatError("<memory>", field, "pad_left and pad_right must be in 0..kernel_w-1");
    if (in.h + w.pad_top + w.pad_bottom < w.kernel_h || in.w + w.pad_left + w.pad_right < w.kernel_w)
        throw FormatError("<memory>", field, "window larger than the padded input");
}

namespace {

// Copies n <= 32 bytes with two overlapping fixed-size moves: the runs of a 3-channel input layer
// are this short (7 x 3 bytes), and a library memcpy call per run cost more than the GEMM.
void copy_short(const std::int8_t* src, std::int64_t n, std::uint8_t* dst) {
    auto move = [&](auto word) {
        const std::size_t size = sizeof word;
        std::memcpy(&word, src, size);
        std::memcpy(dst, &word, size);
        std::memcpy(&word, src + n - std::int64_t(size), size);
        std::memcpy(dst + n - std::int64_t(size), &word, size);
    };
    struct Bytes16 { std::uint64_t lo, hi; };
    if (n >= 16) move(Bytes16{});
    else if (n >= 8) move(std::uint64_t{});
    else if (n >= 4) move(std::uint32_t{});
    else
        for (std::int64_t i = 0; i < n; ++i) dst[i] = std::uint8_t(src[i]);
}

// Copies n bytes XORed with the mask (the VNNI kernel's +128 offset, on every IM2COL it runs).
// Like copy_short, the last word overlaps the one before it rather than finishing byte by byte:
// XOR with a uniform mask writes the same byte twice, and the 21-byte runs of the 3-channel input
// layer took a third of that layer's time in a byte tail.
void copy_xor(const std::int8_t* src, std::uint8_t mask, std::int64_t n, std::uint8_t* dst) {
    if (mask == 0) {
        if (n <= 32)
            copy_short(src, n, dst);
        else
            std::memcpy(dst, src, std::size_t(n));
        return;
    }
    const std::uint64_t mask8 = 0x0101010101010101ull * mask;
    auto xor_word = [&](std::int64_t at, auto word) {
        std::memcpy(&word, src + at, sizeof word);
        word ^= decltype(word)(mask8);
        std::memcpy(dst + at, &word, sizeof word);
    };
    auto xor16 = [&](std::int64_t at) {
        xor_word(at, std::uint64_t{});
        xor_word(at + 8, std::uint64_t{});
    };
    if (n >= 16) {
        for (std::int64_t i = 0; i + 16 <= n; i += 16) xor16(i);
        if (n % 16) xor16(n - 16);
    } else if (n >= 8) {
        xor_word(0, std::uint64_t{});
        xor_word(n - 8, std::uint64_t{});
    } else if (n >= 4) {
        xor_word(0, std::uint32_t{});
        xor_word(n - 4, std::uint32_t{});
    } else {
        for (std::int64_t i = 0; i < n; ++i) dst[i] = std::uint8_t(src[i]) ^ mask;
    }
}

}  // namespace

namespace {

// Rows of `pixels` output pixels whose window lies wholly inside the input, with the vector
// kernel `kernel` (not Portable); the arguments as detail::im2col_interior_avx2 takes them.
void im2col_interior(SimdKernel kernel, const std::int8_t* src, const std::int8_t* src_end,
                     std::int64_t src_pixel_step, std::int64_t src_row_step, int runs, int run_bytes,
                     std::int64_t pixels, std::uint8_t xor_mask, std::uint8_t* dst, std::int64_t row_stride) {
    if (kernel == SimdKernel::Avx512)
        detail::im2col_interior_avx512(src, src_pixel_step, src_row_step, runs, run_bytes, pixels, xor_mask, dst,
                                       row_stride);
    else
        detail::im2col_interior_avx2(src, src_end, src_pixel_step, src_row_step, runs, run_bytes, pixels, xor_mask,
                                     dst, row_stride);
}

// Operand rows of output pixels [p_begin, p_end) of one image (see im2col_into) with `kernel`'s
// moves; out points at pixel p_begin's row (the rows may be a worker's scratch block rather than
// the whole operand).
void im2col_pixels(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask,
                   std::int64_t row_stride, std::uint8_t* out, std::int64_t p_begin, std::int64_t p_end) {
    const Window& w = g.window;
    const int ow = g.out_w(), kh = w.kernel_h, kw = w.kernel_w, c = g.in.c;
    const std::int64_t m = g.m();
    const std::int64_t kx_run = std::int64_t(kw) * c;   // one kernel row of a patch, contiguous in HWC
    // With a vector kernel, the pixels whose window lies wholly inside the input (ox in
    // [ox_inside_begin, ox_inside_end)) copy their kernel rows without the per-run edge checks:
    // AVX-512BW moves the 21 bytes of a 3-channel 7x7 window in one masked move and the 192 of a
    // 64-channel 3x3 one in three; AVX2 moves 21 bytes as one 32-byte piece where there is room.
    const bool vector = kernel != SimdKernel::Portable;
    const int ox_inside_begin = (w.pad_left + w.stride_w - 1) / w.stride_w;
    const int last_inside = g.in.w - kw + w.pad_left;   // ox * stride_w may reach this (if >= 0)
    const int ox_inside_end = last_inside < 0 ? ox_inside_begin
                                              : std::max(ox_inside_begin, last_inside / w.stride_w + 1);
    for (int oy = int(p_begin / ow); std::int64_t(oy) * ow < p_end; ++oy) {
        const int y0 = oy * w.stride_h - w.pad_top;
        const bool rows_inside = y0 >= 0 && y0 + kh <= g.in.h;
        const int ox_from = int(std::max<std::int64_t>(0, p_begin - std::int64_t(oy) * ow));
        const int ox_to = int(std::min<std::int64_t>(ow, p_end - std::int64_t(oy) * ow));
        for (int ox = ox_from; ox < ox_to; ++ox) {
            if (vector && rows_inside && ox >= ox_inside_begin && ox < ox_inside_end) {
                const int pixels = std::min(ox_to, ox_inside_end) - ox;
                const std::int64_t in_row = std::int64_t(g.in.w) * c;
                im2col_interior(kernel, x + y0 * in_row + std::int64_t(ox * w.stride_w - w.pad_left) * c,
                                x + g.in.size(), std::int64_t(w.stride_w) * c, in_row, kh, int(kx_run), pixels,
                                xor_mask, out + (std::int64_t(oy) * ow + ox - p_begin) * row_stride, row_stride);
                ox += pixels - 1;
                continue;
            }
            std::uint8_t* row = out + (std::int64_t(oy) * ow + ox - p_begin) * row_stride;
            const int x0 = ox * w.stride_w - w.pad_left;
            // Columns of the kernel that fall inside the image: kx in [kx_lo, kx_hi).
            const int kx_lo = x0 < 0 ? -x0 : 0;
            const int kx_hi = x0 + kw > g.in.w ? g.in.w - x0 : kw;
            for (int ky = 0; ky < kh; ++ky) {
                std::uint8_t* dst = row + ky * kx_run;
                const int iy = oy * w.stride_h - w.pad_top + ky;
                if (iy < 0 || iy >= g.in.h || kx_lo >= kx_hi) {
                    std::memset(dst, xor_mask, std::size_t(kx_run));
                    continue;
                }
                // (the memset calls are skipped when empty: on a 3-channel input layer a call per
                // empty edge cost as much as the copies)
                if (kx_lo > 0) std::memset(dst, xor_mask, std::size_t(kx_lo) * c);
                const std::int8_t* src = x + (std::int64_t(iy) * g.in.w + x0 + kx_lo) * c;
                copy_xor(src, xor_mask, std::int64_t(kx_hi - kx_lo) * c, dst + std::int64_t(kx_lo) * c);
                if (kx_hi < kw) std::memset(dst + std::int64_t(kx_hi) * c, xor_mask, std::size_t(kw - kx_hi) * c);
            }
            for (std::int64_t pad = m; pad < row_stride; ++pad) row[pad] = xor_mask;
        }
    }
}

}  // namespace

namespace detail {
bool cpu_has_avx512bw() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

SimdKernel best_simd_kernel() {
    if (cpu_has_avx512bw()) return SimdKernel::Avx512;
    if (cpu_has_avx2()) return SimdKernel::Avx2;
    return SimdKernel::Portable;
}
}  // namespace detail

const char* to_string(SimdKernel kernel) {
    switch (kernel) {
        case SimdKernel::Portable: return "portable";
        case SimdKernel::Avx2: return "avx2";
        case SimdKernel::Avx512: return "avx512";
    }
    return "unknown";
}

bool simd_kernel_available(SimdKernel kernel) {
    switch (kernel) {
        case SimdKernel::Portable: return true;
        case SimdKernel::Avx2: return detail::cpu_has_avx2();
        case SimdKernel::Avx512: return detail::cpu_has_avx512bw();
    }
    return false;
}

SimdKernel im2col_kernel() {
    static const SimdKernel kernel = detail::best_simd_kernel();   // the CPU does not change
    return kernel;
}

void detail::require_simd_kernel(SimdKernel kernel) {
    if (!simd_kernel_available(kernel))
        throw std::invalid_argument(std::string("SIMD kernel '") + to_string(kernel) + "' is not available on this CPU");
}

void im2col_into(const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask, std::int64_t row_stride,
                 std::uint8_t* out, int threads) {
    // Below about 256 KiB of operand a second thread costs more than it saves.
    constexpr std::int64_t kMinBytesPerThread = std::int64_t(1) << 18;
    const SimdKernel kernel = im2col_kernel();
    const int oh = g.out_h();
    const std::int64_t bytes = g.p() * row_stride;
    const int workers = int(std::min<std::int64_t>({std::int64_t(resolve_threads(threads)), std::int64_t(oh),
                                                     std::max<std::int64_t>(1, bytes / kMinBytesPerThread)}));
    if (workers <= 1) {
        im2col_pixels(kernel, x, g, xor_mask, row_stride, out, 0, g.p());
        return;
    }
    const int rows_per_part = (oh + workers - 1) / workers;
    const std::int64_t ow = g.out_w();
    parallel_for(workers, workers, [&](std::int64_t part) {
        const int begin = int(part) * rows_per_part, end = std::min(oh, begin + rows_per_part);
        im2col_pixels(kernel, x, g, xor_mask, row_stride, out + begin * ow * row_stride, begin * ow, end * ow);
    });
}

namespace {
void pixels_of_images(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask,
                      std::int64_t row_stride, std::uint8_t* out, std::int64_t p_begin, std::int64_t p_end) {
    const std::int64_t image_pixels = g.p(), image_bytes = g.in.size();
    for (std::int64_t image = p_begin / image_pixels; image * image_pixels < p_end; ++image) {
        const std::int64_t first = image * image_pixels;
        const std::int64_t from = std::max(p_begin, first);
        im2col_pixels(kernel, x + image * image_bytes, g, xor_mask, row_stride, out + (from - p_begin) * row_stride,
                      from - first, std::min(p_end, first + image_pixels) - first);
    }
}
}  // namespace

void im2col_pixels_into(const std::int8_t* x, const WindowGeometry& g, std::uint8_t xor_mask, std::int64_t row_stride,
                        std::uint8_t* out, std::int64_t p_begin, std::int64_t p_end) {
    pixels_of_images(im2col_kernel(), x, g, xor_mask, row_stride, out, p_begin, p_end);
}

void detail::im2col_pixels_into_with(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g,
                                     std::uint8_t xor_mask, std::int64_t row_stride, std::uint8_t* out,
                                     std::int64_t p_begin, std::int64_t p_end) {
    require_simd_kernel(kernel);
    pixels_of_images(kernel, x, g, xor_mask, row_stride, out, p_begin, p_end);
}

std::int64_t padded_input_bytes(const WindowGeometry& g) {
    const Window& w = g.window;
    return std::int64_t(g.in.h + w.pad_top + w.pad_bottom) * (g.in.w + w.pad_left + w.pad_right) * g.in.c;
}

namespace {
// One input row's bytes XORed with the mask, with `kernel`'s moves.
void xor_copy_row(SimdKernel kernel, const std::int8_t* src, std::uint8_t xor_mask, std::int64_t n, std::uint8_t* dst) {
    switch (kernel) {
        case SimdKernel::Avx512: return detail::xor_copy_avx512(src, xor_mask, n, dst);
        case SimdKernel::Avx2: return detail::xor_copy_avx2(src, xor_mask, n, dst);
        case SimdKernel::Portable: return copy_xor(src, xor_mask, n, dst);
    }
}

void pad_images(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g, std::int64_t images,
                std::uint8_t xor_mask, std::uint8_t* out) {
    const Window& w = g.window;
    const std::int64_t c = g.in.c, row_bytes = std::int64_t(g.in.w) * c;
    const std::int64_t left = w.pad_left * c, right = w.pad_right * c, padded_row = left + row_bytes + right;
    for (std::int64_t image = 0; image < images; ++image) {
        const std::int8_t* in = x + image * g.in.size();
        std::memset(out, xor_mask, std::size_t(w.pad_top * padded_row));
        out += w.pad_top * padded_row;
        for (int y = 0; y < g.in.h; ++y, out += padded_row) {
            if (left) std::memset(out, xor_mask, std::size_t(left));
            xor_copy_row(kernel, in + y * row_bytes, xor_mask, row_bytes, out + left);
            if (right) std::memset(out + left + row_bytes, xor_mask, std::size_t(right));
        }
        std::memset(out, xor_mask, std::size_t(w.pad_bottom * padded_row));
        out += w.pad_bottom * padded_row;
    }
}
}  // namespace

void pad_input_into(const std::int8_t* x, const WindowGeometry& g, std::int64_t images, std::uint8_t xor_mask,
                    std::uint8_t* out) {
    pad_images(im2col_kernel(), x, g, images, xor_mask, out);
}

void detail::pad_input_into_with(SimdKernel kernel, const std::int8_t* x, const WindowGeometry& g,
                                 std::int64_t images, std::uint8_t xor_mask, std::uint8_t* out) {
    require_simd_kernel(kernel);
    pad_images(kernel, x, g, images, xor_mask, out);
}

std::vector<std::int8_t> im2col(const std::int8_t* x, const WindowGeometry& g) {
    std::vector<std::int8_t> out(std::size_t(g.p() * g.m()));
    im2col_into(x, g, 0, g.m(), reinterpret_cast<std::uint8_t*>(out.data()));
    return out;
}

}  // namespace aimcemu
