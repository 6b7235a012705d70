// The PU's GEMM in exact integer arithmetic: acc = W * X + (bias << bias_shift).
//
// W is N x M int8 (one row per output channel, formats/network.hpp's weight layout), X is M x P
// int8.  Every path here takes X *transposed*, as the P x M "patch-major" operand that IM2COL
// produces (im2col.hpp), and writes acc as P x N int32 (acc[p * N + n]), which is the HWC order of
// the layer's output.  Three implementations must agree bit for bit (tests/cpp/test_pu_gemm.cpp):
//
//   gemm_reference  the definition as a plain triple loop, int64 sums, overflow checked;
//   gemm_fast       FastKernel::Amx: AMX-INT8 tiles (tdpbssd is s8 x s8, exact in int32);
//                   FastKernel::Vnni512: AVX-512 VNNI (vpdpbusd is u8 x s8, so X is offset by
//                   +128 and 128 * rowsum(W) is subtracted again: exact in int32);
//                   FastKernel::Avx2: vpmaddubsw + vpmaddwd with the unsigned operand kept in
//                   [0, 128] so that the 16-bit pair sums cannot saturate (exact; gemm_avx2.cpp);
//                   FastKernel::Dnnl: oneDNN's dnnl_gemm_s8s8s32 (only when built with oneDNN,
//                   and only with AVX-512 VNNI, where it is exact);
//                   FastKernel::Portable: blocked int32 loops for CPUs with none of these;
//   sa_cycle_gemm   the cycle-level systolic-array model (sa_cycle.hpp).
//
// Integer sums are exact and associative, so splitting P across threads cannot change a result.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pu_model/im2col.hpp"
#include "pu_model/pass_buffers.hpp"

namespace aimcemu {

// Throws FormatError unless |acc| < 2^31 is guaranteed for depth m and the given bias shift.
void check_gemm_fits_int32(std::int64_t m, int bias_shift, const std::string& field);

// The definition.  xt: P rows of M int8 with row stride ldx; acc: P x N int32.
void gemm_reference(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                    int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, std::int32_t* acc);

enum class FastKernel { Auto, Amx, Vnni512, Avx2, Dnnl, Portable };
// Every concrete kernel, fastest first (the order Auto tries them in).
inline constexpr FastKernel kAllFastKernels[] = {FastKernel::Amx, FastKernel::Vnni512, FastKernel::Avx2,
                                                 FastKernel::Dnnl, FastKernel::Portable};
const char* to_string(FastKernel kernel);
// The kernel named `name` ("auto", "amx", ...); FormatError naming `field` otherwise.
FastKernel fast_kernel_from_string(const std::string& name, const std::string& field = "kernel");
bool fast_kernel_available(FastKernel kernel);
// Auto resolves to the first available kernel of kAllFastKernels.
FastKernel resolve_fast_kernel(FastKernel kernel);
// How many gemm_fast calls each kernel has served in this process (so that a test or a
// benchmark can say which kernels actually ran, and notice one that silently dropped out).
std::int64_t fast_kernel_calls(FastKernel kernel);

// Where a kernel writes its results (row-major P x N): int32 accumulators, or, when y is set,
// int8 outputs requantised in the kernel's epilogue: y = sat8(round_shift(acc, out_shift)), then
// ReLU if relu (the rules of postproc.hpp).
struct GemmOutput {
    std::int32_t* acc = nullptr;
    std::int8_t* y = nullptr;
    int out_shift = 0;
    bool relu = false;
    // Optional, with y only: the residual add fused into the epilogue, y = sat8(y +
    // align(residual, residual_shift)), then ReLU if relu_after_residual (postproc.hpp's
    // residual_add, bit for bit).  residual has y's layout (P x N int8) and must not overlap it;
    // residual_shift lies in kAlignShiftRange.  The VNNI kernel adds it in registers (a separate
    // pass over three tensors was 4 % of a ResNet-50 pass); the others on each chunk's rows.
    const std::int8_t* residual = nullptr;
    int residual_shift = 0;
    bool relu_after_residual = false;
};

// Writes rows [p_begin, p_end) of a GEMM operand just before they are multiplied (gemm_fast).
using RowPreparer = std::function<void(std::int64_t p_begin, std::int64_t p_end)>;
// Writes rows [p_begin, p_end) of a GEMM operand at `rows`: row p_begin first, x_row_stride()
// bytes apart, every byte of each row (gemm_fast_streamed).
using RowWriter = std::function<void(std::int64_t p_begin, std::int64_t p_end, std::uint8_t* rows)>;

// Weights prepared once for a fast kernel (packing is O(N*M), the GEMM O(N*M*P)).
class PackedWeights {
public:
    // skip_segment (VNNI only; ignored unless a positive multiple of 4 that divides M): depth
    // segments of that many bytes, a conv's kernel rows (kernel_w * C), that read as zero in
    // every row of a register tile (the padding above and below the image) are not multiplied;
    // their share of the +128 offset (128 * the weights' sum over them) is added to the
    // accumulators' start instead, which is the same integer.
    // buffers: where the packed bytes come from (a pass packing weights that change every round
    // recycles them there, pass_buffers.hpp); null: an ordinary allocation.
    PackedWeights(const std::int8_t* w, const std::int8_t* bias, int bias_shift, std::int64_t n, std::int64_t m,
                  FastKernel kernel = FastKernel::Auto, std::int64_t skip_segment = 0,
                  PassBuffers* buffers = nullptr);

    FastKernel kernel() const { return kernel_; }
    std::int64_t n() const { return n_; }
    std::int64_t m() const { return m_; }
    // What the X operand handed to gemm_fast must look like: rows of x_row_stride() bytes (M
    // values, then don't-care padding), each byte XORed with x_xor_mask().
    std::int64_t x_row_stride() const { return x_row_stride_; }
    std::uint8_t x_xor_mask() const { return kernel_ == FastKernel::Vnni512 ? 0x80 : 0x00; }
    // Bytes of packed weights (memory accounting).
    std::size_t bytes() const {
        return data_.size() + (column_.size() + segment_sums_.size()) * sizeof(std::int32_t);
    }
    // The segment the VNNI kernel may skip (0: none).
    std::int64_t skip_segment() const { return skip_segment_; }

private:
    friend void gemm_fast(const PackedWeights&, const std::uint8_t*, std::int64_t, const GemmOutput&, int,
                          const RowPreparer&);
    friend void gemm_fast_streamed(const PackedWeights&, std::int64_t, const GemmOutput&, int, const RowWriter&,
                                   PassBuffers*);
    friend void gemm_fast_conv(const PackedWeights&, const std::uint8_t*, const WindowGeometry&, std::int64_t,
                               const GemmOutput&, int);
    FastKernel kernel_;
    std::int64_t n_, m_, x_row_stride_;
    std::int64_t max_abs_acc_;           // bound on |acc| for any operands (check_gemm_fits_int32)
    PassBuffers::Buffer data_;           // kernel-specific weight layout (every byte written)
    std::vector<std::int32_t> column_;   // per output channel: (bias << shift) - offset correction
    std::int64_t skip_segment_ = 0;
    // [j][channel] for segment boundaries j = 0..M/skip_segment, channels padded like column_:
    // 128 * sum of w[channel][0, j * skip_segment), modulo 2^32.
    std::vector<std::int32_t> segment_sums_;
};

// acc (P x N) = W * X + bias for X laid out as packed.x_row_stride()/x_xor_mask() say.
// threads: 0 = all hardware threads; the result is identical for any value.
void gemm_fast(const PackedWeights& packed, const std::uint8_t* xt, std::int64_t p, std::int32_t* acc, int threads);
// The same GEMM, requantised to int8 on the fly (out: y set, acc unused).  The AVX2 and VNNI
// kernels do it in registers; the others requantise each block of rows while it is in cache.  Bytes equal
// requantize(gemm_fast(...)) exactly.
void gemm_fast(const PackedWeights& packed, const std::uint8_t* xt, std::int64_t p, const GemmOutput& out,
               int threads);
// The same, with the operand's rows written on the fly: prepare(p_begin, p_end) is called exactly
// once for every row, before any of those rows is read, inside the pass over the worker pool
// that multiplies them, by the item that multiplies them (on layers split over channel panels:
// by the chunk's first panel block; its other blocks wait for it).  So an IM2COL of a chunk of
// rows runs on every worker and is still in cache when the kernel reads it.  prepare may only
// write rows [p_begin, p_end) of xt.
void gemm_fast(const PackedWeights& packed, const std::uint8_t* xt, std::int64_t p, const GemmOutput& out,
               int threads, const RowPreparer& prepare);

// The same GEMM with an operand that exists only chunk by chunk: write(p_begin, p_end, rows) is
// called exactly once for every row, inside the pass over the worker pool, by the item that then
// multiplies those rows, into `rows`, a scratch block of that worker (at most 96 rows, reused by
// its next chunk; valid only until the call returns; a writer that runs a streamed GEMM itself
// gets another block for it).  An IM2COL written this way stays in the
// worker's cache: writing a whole P x M operand first sent 9 bytes per input byte of a 3 x 3 conv
// to memory and back (8.6 % of a ResNet-50 pass on a 2-core Xeon).  Where the work split shares a
// chunk's rows between workers (a layer split over channel panels, or the oneDNN kernel, which
// takes the whole operand), the rows go into one operand of P rows instead: taken from `buffers`
// when given, else allocated.  Bytes equal gemm_fast on the whole operand exactly.
void gemm_fast_streamed(const PackedWeights& packed, std::int64_t p, const GemmOutput& out, int threads,
                        const RowWriter& write, PassBuffers* buffers = nullptr);

// Whether gemm_fast_conv can run this convolution: the VNNI kernel, a window larger than 1 x 1
// (a 1 x 1 one copies no more with IM2COL) and channels a multiple of 4 (each kernel row whole
// groups of 4 bytes; not the 3-channel input layer).
bool conv_reads_in_place(const PackedWeights& packed, const WindowGeometry& g);
// A convolution of `images` consecutive HWC images whose windows the kernel reads in place from
// `padded` (pad_input_into(x, g, images, 0x80, padded)): no IM2COL operand at all, the padded
// copy being the only one (about 1.1 x the input against 9 x for a 3 x 3 IM2COL).  Only where
// conv_reads_in_place; bytes equal gemm_fast on the IM2COL operand exactly.
void gemm_fast_conv(const PackedWeights& packed, const std::uint8_t* padded, const WindowGeometry& g,
                    std::int64_t images, const GemmOutput& out, int threads);

// Convenience for plain int8 X (P x M, stride M): packs, converts X, runs.
void gemm_fast(const std::int8_t* w, const std::int8_t* xt, const std::int8_t* bias, int bias_shift, std::int64_t n,
               std::int64_t m, std::int64_t p, std::int32_t* acc, int threads = 1,
               FastKernel kernel = FastKernel::Auto);

// The most threads any call takes, as aimcemu.run's --threads (python/aimcemu/validate.py): more
// would only start idle OS threads, and keeps (count + threads - 1) far from INT_MAX.
inline constexpr int kMaxThreads = 4096;
// FormatError("<memory>", field) unless 0 <= threads <= kMaxThreads (0 = all cores).  Every entry
// point that takes a thread count from a caller checks it once, before any work.
void check_threads(int threads, const std::string& field = "threads");
// Threads actually used for a request (0 = the CPUs this thread may run on, usable_cpus(); at
// least 1, at most kMaxThreads).
int resolve_threads(int threads);
// Runs fn(i) for i in [0, count) on up to `threads` threads (items taken from a shared counter).
// Results are deterministic as long as fn(i) writes only item i's outputs.  Rethrows the first
// exception after all threads stop.
void parallel_for(std::int64_t count, int threads, const std::function<void(std::int64_t)>& fn);

namespace detail {
// The AVX-512 VNNI kernel (gemm_vnni.cpp, compiled for that ISA; call only when the CPU has it).
// Weights are packed in panels of up to 64 output channels (vnni_pack_weights); xt is offset u8.
inline constexpr int kVnniPanel = 64;
inline constexpr int kVnniRowsPerTile = 6;
bool cpu_has_vnni512();
// AMX: CPUID says AMX-TILE and AMX-INT8 and Linux granted this process the tile-data state
// (defined in gemm_amx.cpp; on the tests' tile model, AVX-512BW: amx_tile_model.hpp).
bool cpu_has_amx();
// The definition of the packed layout (scalar; any m): zero fill, then each row's dwords scattered.
void vnni_pack_weights(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed);
// Where vnni_pack_weights_avx512 writes 128 * the prefix sums of each row at segment boundaries
// (segment 0: none): sums[j * channels + row] for j = 1 .. m / segment (PackedWeights' segment sums).
struct VnniSegmentSums {
    std::int64_t segment = 0;   // a multiple of 4 that divides m, or 0
    std::int32_t* sums = nullptr;
    std::int64_t channels = 0;
};
// The same bytes as vnni_pack_weights for m % 4 == 0, in one pass that also takes each row's sum
// (rowsum[row], n entries) and the segment sums (gemm_vnni.cpp; call only when the CPU has
// AVX-512 VNNI).  Packing every AIMC layer is part of each noisy pass, so it runs vectorised.
void vnni_pack_weights_avx512(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed,
                              std::int32_t* rowsum, const VnniSegmentSums& segments = {});
std::int64_t vnni_packed_size(std::int64_t n, std::int64_t m);
// Output rows [p_begin, p_end) x channels [n_begin, n_end) (n_begin a multiple of kVnniPanel,
// n_end one too or n); xt points at row p_begin of the operand.  fold_rounding: the accumulators start at the rounding half 2^(out_shift-1)
// so that requantisation rounds with one shift; set it only when |acc| + 2^(out_shift-1) < 2^31
// for every operand (otherwise the start could wrap).
// skip: optional (segment 0 = off), see PackedWeights' skip_segment.
struct VnniDepthSkip {
    std::int64_t segment = 0;                 // bytes, a multiple of 4 that divides M
    const std::int32_t* sums = nullptr;       // PackedWeights::segment_sums_
    std::int64_t channels = 0;                // its row length (column's padded length)
};
void vnni_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const std::uint8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                    std::int64_t n_begin, std::int64_t n_end, const GemmOutput& out, bool fold_rounding,
                    const VnniDepthSkip& skip = {});
// A convolution's operand read in place by the VNNI kernel (vnni_conv_rows): consecutive images'
// inputs, each padded by the window's padding and XORed with 0x80 (pad_input_into), so that output
// pixel (oy, ox)'s window is kernel_h runs of kernel_w * channels bytes, a padded row apart.
struct VnniConvOperand {
    const std::uint8_t* padded = nullptr;
    std::int64_t image_bytes = 0;   // one padded image
    int padded_w = 0, channels = 0, out_h = 0, out_w = 0;
    int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1;
};
// vnni_gemm_rows for output rows of a convolution read in place (m = kernel_h * kernel_w *
// channels, channels a multiple of 4); the skip applies when its segment is one kernel row.
void vnni_conv_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const VnniConvOperand& conv, std::int64_t p_begin, std::int64_t p_end, std::int64_t n_begin,
                    std::int64_t n_end, const GemmOutput& out, bool fold_rounding, const VnniDepthSkip& skip = {});
// The AVX2 kernel (gemm_avx2.cpp): panels of 16 channels, [panel][k/4][16 lanes x 4 bytes];
// xt is plain int8 with rows padded to a multiple of 4 bytes and points at row p_begin.
inline constexpr int kAvx2Panel = 16;
inline constexpr int kAvx2RowsPerTile = 6;
bool cpu_has_avx2();
std::int64_t avx2_packed_size(std::int64_t n, std::int64_t m);
void avx2_pack_weights(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed);
void avx2_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                    const std::int8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                    const GemmOutput& out);
// The AMX kernel (gemm_amx.cpp): weights in blocks of 32 channels, depth padded to 64; xt is
// plain int8 with ldx = depth; scratch holds 32 * ldx bytes for the last partial block of rows.
std::int64_t amx_depth(std::int64_t m);
std::int64_t amx_packed_size(std::int64_t n, std::int64_t m);
void amx_pack_weights(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed);
void amx_gemm_rows(const std::int8_t* packed, const std::int32_t* column, std::int64_t n, std::int64_t m,
                   const std::int8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                   std::int32_t* acc, std::int8_t* scratch);
}  // namespace detail

}  // namespace aimcemu
