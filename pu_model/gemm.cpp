// Reference, fast and threaded GEMM paths (see gemm.hpp for the operand layouts).
#include "pu_model/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <memory>
#include <cstring>
#include <mutex>
#include <thread>


#include "common/errors.hpp"
#include "common/huge_pages.hpp"
#include "common/worker_pool.hpp"
#include "formats/network.hpp"
#include "pu_model/postproc.hpp"

#ifdef AIMCEMU_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

namespace aimcemu {

namespace {
// |acc| <= this for any int8 operands: every product is at most 128 * 128 in magnitude.
std::int64_t max_abs_acc(std::int64_t m, int bias_shift) { return m * 128 * 128 + (std::int64_t(128) << bias_shift); }
}  // namespace

void check_gemm_fits_int32(std::int64_t m, int bias_shift, const std::string& field) {
    if (m <= 0) throw FormatError("<memory>", field, "GEMM depth M must be positive");
    if (!kBiasShiftRange.contains(bias_shift))
        throw FormatError("<memory>", field, "bias_shift must be in " + std::to_string(kBiasShiftRange.min) + ".." +
                                                 std::to_string(kBiasShiftRange.max) + " (got " +
                                                 std::to_string(bias_shift) + ")");
    if ((std::int64_t(128) << bias_shift) >= (std::int64_t(1) << 31))
        throw FormatError("<memory>", field, "bias_shift=" + std::to_string(bias_shift) +
                                                 " can overflow the int32 accumulator by itself (128 << bias_shift)");
    const std::int64_t worst = max_abs_acc(m, bias_shift);
    if (worst >= (std::int64_t(1) << 31))
        throw FormatError("<memory>", field, "M=" + std::to_string(m) + " with bias_shift=" + std::to_string(bias_shift) +
                                                 " can overflow the int32 accumulator");
}

void gemm_reference(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                    int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, std::int32_t* acc) {
    check_gemm_fits_int32(m, bias_shift, "gemm");
    for (std::int64_t row = 0; row < n; ++row) {
        for (std::int64_t col = 0; col < p; ++col) {
            std::int64_t sum = std::int64_t(bias[row]) * (std::int64_t(1) << bias_shift);
            for (std::int64_t k = 0; k < m; ++k) sum += std::int64_t(w[row * m + k]) * xt[col * ldx + k];
            acc[col * n + row] = std::int32_t(sum);
        }
    }
}

const char* to_string(FastKernel kernel) {
    switch (kernel) {
        case FastKernel::Auto: return "auto";
        case FastKernel::Amx: return "amx";
        case FastKernel::Vnni512: return "vnni512";
        case FastKernel::Avx2: return "avx2";
        case FastKernel::Dnnl: return "dnnl";
        case FastKernel::Portable: return "portable";
    }
    return "?";
}

FastKernel fast_kernel_from_string(const std::string& name, const std::string& field) {
    if (name == to_string(FastKernel::Auto)) return FastKernel::Auto;
    std::string known = "auto";
    for (FastKernel k : kAllFastKernels) {
        if (name == to_string(k)) return k;
        known += std::string(", ") + to_string(k);
    }
    throw FormatError("<memory>", field, "unknown GEMM kernel '" + name + "' (expected " + known + ")");
}

namespace {
std::atomic<std::int64_t> g_kernel_calls[std::size(kAllFastKernels) + 1];
}  // namespace

std::int64_t fast_kernel_calls(FastKernel kernel) { return g_kernel_calls[std::size_t(kernel)].load(); }

namespace detail {

bool cpu_has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

std::int64_t avx2_packed_size(std::int64_t n, std::int64_t m) {
    return (n + kAvx2Panel - 1) / kAvx2Panel * kAvx2Panel * ((m + 3) / 4 * 4);
}

// Panel of 16 channels starting at n0, at offset n0 * depth; inside it, group g of 4 depth
// positions holds 2 vectors x 8 lanes x 4 bytes (channel n0 + 8v + lane).  Zero padding.
void avx2_pack_weights(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed) {
    const std::int64_t depth = (m + 3) / 4 * 4;
    std::memset(packed, 0, std::size_t(avx2_packed_size(n, m)));
    for (std::int64_t row = 0; row < n; ++row) {
        const std::int64_t n0 = row / kAvx2Panel * kAvx2Panel;
        std::int8_t* lane = packed + n0 * depth + (row - n0) * 4;
        const std::int8_t* src = w + row * m;
        for (std::int64_t k = 0; k < m; k += 4)
            std::memcpy(lane + (k / 4) * 64, src + k, std::size_t(std::min<std::int64_t>(4, m - k)));
    }
}

bool cpu_has_vnni512() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}

std::int64_t vnni_packed_size(std::int64_t n, std::int64_t m) { return (n + 15) / 16 * 16 * ((m + 3) / 4 * 4); }

// Panel layout (see gemm_vnni.cpp): panel of up to 64 channels starting at n0, at offset
// n0 * depth; inside it, group g of 4 depth positions holds `vectors` x 16 lanes x 4 bytes.
void vnni_pack_weights(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed) {
    const std::int64_t depth = (m + 3) / 4 * 4;
    std::memset(packed, 0, std::size_t(vnni_packed_size(n, m)));
    for (std::int64_t row = 0; row < n; ++row) {
        const std::int64_t n0 = row / kVnniPanel * kVnniPanel;
        const std::int64_t vectors = (std::min<std::int64_t>(n - n0, kVnniPanel) + 15) / 16;
        std::int8_t* lane = packed + n0 * depth + ((row - n0) / 16) * 64 + (row % 16) * 4;
        const std::int8_t* src = w + row * m;
        for (std::int64_t k = 0; k < m; k += 4)
            std::memcpy(lane + (k / 4) * vectors * 64, src + k, std::size_t(std::min<std::int64_t>(4, m - k)));
    }
}

std::int64_t amx_depth(std::int64_t m) { return (m + 63) / 64 * 64; }
std::int64_t amx_packed_size(std::int64_t n, std::int64_t m) { return (n + 31) / 32 * 32 * amx_depth(m); }

// Blocks of 32 channels at offset n0 * depth; inside, group g holds 2 vectors x 16 lanes x 4 bytes
// (so one B tile is 16 groups of one vector, row stride 128 bytes).
void amx_pack_weights(const std::int8_t* w, std::int64_t n, std::int64_t m, std::int8_t* packed) {
    const std::int64_t depth = amx_depth(m);
    std::memset(packed, 0, std::size_t(amx_packed_size(n, m)));
    for (std::int64_t row = 0; row < n; ++row) {
        std::int8_t* lane = packed + row / 32 * 32 * depth + (row % 32 / 16) * 64 + (row % 16) * 4;
        const std::int8_t* src = w + row * m;
        for (std::int64_t k = 0; k < m; k += 4)
            std::memcpy(lane + (k / 4) * 128, src + k, std::size_t(std::min<std::int64_t>(4, m - k)));
    }
}

}  // namespace detail

bool fast_kernel_available(FastKernel kernel) {
    switch (kernel) {
        case FastKernel::Auto:
        case FastKernel::Portable: return true;
        case FastKernel::Vnni512: return detail::cpu_has_vnni512();
        case FastKernel::Avx2: return detail::cpu_has_avx2();
        case FastKernel::Amx: return detail::cpu_has_amx();
        case FastKernel::Dnnl:
#ifdef AIMCEMU_HAVE_DNNL
            // Without VNNI, oneDNN's s8 GEMM sums pairs of u8*s8 products in saturating 16-bit
            // lanes (vpmaddubsw): on an AVX2-only CPU extreme operands come out wrong (seen on
            // an AMD EPYC with AVX2).  With AVX-512 VNNI it uses vpdpbusd, which is exact.
            return detail::cpu_has_vnni512();
#else
            return false;
#endif
    }
    return false;
}

FastKernel resolve_fast_kernel(FastKernel kernel) {
    if (kernel != FastKernel::Auto) {
        if (!fast_kernel_available(kernel))
            throw FormatError("<memory>", "kernel", std::string("GEMM kernel '") + to_string(kernel) +
                                                        "' is not available in this build or on this CPU");
        return kernel;
    }
    for (FastKernel k : kAllFastKernels)
        if (fast_kernel_available(k)) return k;
    return FastKernel::Portable;
}

PackedWeights::PackedWeights(const std::int8_t* w, const std::int8_t* bias, int bias_shift, std::int64_t n,
                             std::int64_t m, FastKernel kernel, std::int64_t skip_segment, PassBuffers* buffers)
    : kernel_(resolve_fast_kernel(kernel)), n_(n), m_(m), x_row_stride_(m) {
    check_gemm_fits_int32(m, bias_shift, "gemm");
    max_abs_acc_ = max_abs_acc(m, bias_shift);
    if (n <= 0) throw FormatError("<memory>", "gemm", "N must be positive");
    column_.assign(std::size_t((n + detail::kVnniPanel - 1) / detail::kVnniPanel * detail::kVnniPanel), 0);
    for (std::int64_t row = 0; row < n; ++row) column_[std::size_t(row)] = std::int32_t(bias[row]) << bias_shift;
    if (kernel_ == FastKernel::Vnni512) {
        x_row_stride_ = (m + 3) / 4 * 4;
        data_ = take_buffer(buffers, std::size_t(detail::vnni_packed_size(n, m)));
        const bool skips = skip_segment > 0 && skip_segment % 4 == 0 && m % skip_segment == 0 && m > skip_segment;
        const std::int64_t segments = skips ? m / skip_segment : 0, channels = std::int64_t(column_.size());
        if (skips) {
            skip_segment_ = skip_segment;
            segment_sums_.assign(std::size_t((segments + 1) * channels), 0);
        }
        // With whole dwords per row (always so when segments are skipped: 4 | segment | m), the
        // vectorised packer takes the row sums and the segment sums in its one pass; otherwise
        // the definition packs and the rows are summed here.
        std::vector<std::int64_t> rowsums(static_cast<std::size_t>(n), 0);
        const bool one_pass = m % 4 == 0;
        if (one_pass) {
            std::vector<std::int32_t> sums(static_cast<std::size_t>(n));
            detail::vnni_pack_weights_avx512(w, n, m, data_.data<std::int8_t>(), sums.data(),
                                             {skips ? skip_segment : 0, segment_sums_.data(), channels});
            std::copy(sums.begin(), sums.end(), rowsums.begin());
        } else {
            detail::vnni_pack_weights(w, n, m, data_.data<std::int8_t>());
            for (std::int64_t row = 0; row < n; ++row)
                for (std::int64_t k = 0; k < m; ++k) rowsums[std::size_t(row)] += w[row * m + k];
        }
        // The +128 offset of X adds 128 * rowsum(w) to every lane; take it off again.  The kernel's
        // int32 lanes wrap modulo 2^32 and so does this term, so the final sum is exact whenever
        // the true result fits in int32 (which check_gemm_fits_int32 guarantees).
        for (std::int64_t row = 0; row < n; ++row) {
            const std::int64_t value = std::int64_t(column_[std::size_t(row)]) - 128 * rowsums[std::size_t(row)];
            column_[std::size_t(row)] = std::int32_t(std::uint32_t(std::uint64_t(value)));
        }
    } else if (kernel_ == FastKernel::Avx2) {
        x_row_stride_ = (m + 3) / 4 * 4;
        data_ = take_buffer(buffers, std::size_t(detail::avx2_packed_size(n, m)));
        detail::avx2_pack_weights(w, n, m, data_.data<std::int8_t>());
    } else if (kernel_ == FastKernel::Amx) {
        x_row_stride_ = detail::amx_depth(m);
        data_ = take_buffer(buffers, std::size_t(detail::amx_packed_size(n, m)));
        detail::amx_pack_weights(w, n, m, data_.data<std::int8_t>());
    } else {
        data_ = take_buffer(buffers, std::size_t(n * m));
        std::memcpy(data_.data(), w, std::size_t(n * m));
    }
}

namespace {

// Without VNNI or oneDNN: four output pixels at a time so that each weight row is read once per
// four dot products; the int32 inner loop vectorises.
void portable_rows(const std::int8_t* w, const std::int32_t* column, std::int64_t n, std::int64_t m,
                   const std::int8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
                   std::int32_t* acc) {
    std::int64_t col = p_begin;
    for (; col + 4 <= p_end; col += 4) {
        const std::int8_t* x0 = xt + col * ldx;
        for (std::int64_t row = 0; row < n; ++row) {
            const std::int8_t* wr = w + row * m;
            std::int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (std::int64_t k = 0; k < m; ++k) {
                const std::int32_t wk = wr[k];
                s0 += wk * x0[k];
                s1 += wk * x0[ldx + k];
                s2 += wk * x0[2 * ldx + k];
                s3 += wk * x0[3 * ldx + k];
            }
            acc[col * n + row] = s0 + column[row];
            acc[(col + 1) * n + row] = s1 + column[row];
            acc[(col + 2) * n + row] = s2 + column[row];
            acc[(col + 3) * n + row] = s3 + column[row];
        }
    }
    for (; col < p_end; ++col) {
        for (std::int64_t row = 0; row < n; ++row) {
            std::int32_t s = 0;
            for (std::int64_t k = 0; k < m; ++k) s += std::int32_t(w[row * m + k]) * xt[col * ldx + k];
            acc[col * n + row] = s + column[row];
        }
    }
}

#ifdef AIMCEMU_HAVE_DNNL
// oneDNN's s8 GEMM on rows [p_begin, p_end): C (P x N) = Xt (P x M) * W^T (M x N) + column.
void dnnl_rows(const std::int8_t* w, const std::int32_t* column, std::int64_t n, std::int64_t m,
               const std::int8_t* xt, std::int64_t ldx, std::int64_t p_begin, std::int64_t p_end,
               std::int32_t* acc) {
    const dnnl_status_t status = dnnl_gemm_s8s8s32('N', 'T', 'R', p_end - p_begin, n, m, 1.0f, xt + p_begin * ldx,
                                                   ldx, 0, w, m, 0, 0.0f, acc + p_begin * n, n, column);
    if (status != dnnl_success)
        throw FormatError("<memory>", "gemm", "dnnl_gemm_s8s8s32 failed with status " + std::to_string(int(status)));
}
#endif

}  // namespace

namespace {

// Output pixels per task: about four tasks per worker on small layers (so that a 7x7 layer still
// uses every core), at most 96 rows (a multiple of every kernel's tile height) on large ones.
std::int64_t rows_per_task(FastKernel kernel, std::int64_t p, int workers) {
    const std::int64_t tile = kernel == FastKernel::Amx       ? 32
                              : kernel == FastKernel::Vnni512 ? detail::kVnniRowsPerTile
                                                              : detail::kAvx2RowsPerTile;
    constexpr std::int64_t kMaxRows = 96;
    const std::int64_t wanted = (p + 4 * workers - 1) / (4 * workers);
    return std::min(kMaxRows, std::max(tile, (wanted + tile - 1) / tile * tile));
}

// The VNNI kernel's work items: ranges of row tiles x ranges of 64-channel panels.  One worker
// takes chunks of at most 96 rows (each chunk's operand rows stay in cache across the panels).
// Several split the row tiles into a multiple of the worker
// count of nearly equal chunks (at most 16 tiles, 96 rows, each), so that no worker is left with
// one chunk more than another; when that gives fewer than 8 items per worker (the 7x7 maps,
// P = 49, and the classifier, P = 1, have only 9 and 1 row tiles) the panels are split as well.
struct VnniSplit {
    std::int64_t p, n, tiles, panels, row_chunks, panel_blocks;
    VnniSplit(std::int64_t p_, std::int64_t n_, int workers) : p(p_), n(n_) {
        constexpr std::int64_t kTile = detail::kVnniRowsPerTile, kMaxTiles = 96 / kTile;
        tiles = (p + kTile - 1) / kTile;
        panels = (n + detail::kVnniPanel - 1) / detail::kVnniPanel;
        if (workers == 1) {
            row_chunks = (tiles + kMaxTiles - 1) / kMaxTiles;
            panel_blocks = 1;
            return;
        }
        const std::int64_t rounds = (tiles + kMaxTiles * workers - 1) / (kMaxTiles * workers);
        row_chunks = std::min(tiles, rounds * workers);
        const std::int64_t wanted = 8 * std::int64_t(workers);
        panel_blocks = row_chunks >= wanted ? 1 : std::min(panels, (wanted + row_chunks - 1) / row_chunks);
    }
    std::int64_t items() const { return row_chunks * panel_blocks; }
    // Item i: rows [p_begin, p_end) of row chunk i % row_chunks x channels [n_begin, n_end) of
    // panel block i / row_chunks.  Block-major, so that the first row_chunks items (block 0)
    // cover every chunk once: they prepare the rows that the later blocks then only read.
    std::int64_t chunk_of(std::int64_t i) const { return i % row_chunks; }
    bool first_of_chunk(std::int64_t i) const { return i < row_chunks; }
    void item(std::int64_t i, std::int64_t& p_begin, std::int64_t& p_end, std::int64_t& n_begin,
              std::int64_t& n_end) const {
        const std::int64_t chunk = chunk_of(i), block = i / row_chunks;
        p_begin = std::min(p, chunk * tiles / row_chunks * detail::kVnniRowsPerTile);
        p_end = std::min(p, (chunk + 1) * tiles / row_chunks * detail::kVnniRowsPerTile);
        n_begin = std::min(n, block * panels / panel_blocks * detail::kVnniPanel);
        n_end = std::min(n, (block + 1) * panels / panel_blocks * detail::kVnniPanel);
    }
};

// Per row chunk: whether its operand rows are written (see gemm_fast's VNNI path).
class ChunkReadiness {
public:
    explicit ChunkReadiness(std::int64_t chunks) : state_(chunks > 0 ? new std::atomic<int>[chunks]() : nullptr) {}
    // Runs write() for the chunk and publishes the outcome to the chunk's waiters.
    template <class Write>
    void prepare(std::int64_t chunk, const Write& write) {
        try {
            write();
        } catch (...) {
            state_[chunk].store(kFailed, std::memory_order_release);
            throw;
        }
        state_[chunk].store(kReady, std::memory_order_release);
    }
    // Until the chunk's rows are written (true) or their writer threw (false).  The wait is one
    // chunk's IM2COL at most; yielding keeps a preempted writer from being starved by the spin.
    bool wait(std::int64_t chunk) const {
        int state;
        while ((state = state_[chunk].load(std::memory_order_acquire)) == kPending) std::this_thread::yield();
        return state == kReady;
    }

private:
    static constexpr int kPending = 0, kReady = 1, kFailed = 2;
    std::unique_ptr<std::atomic<int>[]> state_;
};

// Whether the VNNI epilogue may fold the rounding half into the accumulators' start (see
// vnni_gemm_rows): only when no operand can push |acc| + 2^(out_shift-1) past int32.
bool can_fold_rounding(const GemmOutput& out, std::int64_t max_abs) {
    if (!out.y || out.out_shift <= 0 || out.out_shift > 31) return false;
    return max_abs + (std::int64_t(1) << (out.out_shift - 1)) < (std::int64_t(1) << 31);
}

// A fused residual needs the int8 output and an alignment shift of the network format's range.
void check_residual(const GemmOutput& out) {
    if (out.residual && (!out.y || !kAlignShiftRange.contains(out.residual_shift)))
        throw std::invalid_argument("gemm_fast: a fused residual needs the int8 output y and a residual_shift in " +
                                    std::to_string(kAlignShiftRange.min) + ".." + std::to_string(kAlignShiftRange.max));
}

// The fused residual add (GemmOutput::residual) on the `count` outputs from `offset` on, for the
// kernels that do not add it in their epilogue.
void add_residual_rows(const GemmOutput& out, std::int64_t offset, std::int64_t count) {
    if (out.residual)
        residual_add(out.y + offset, out.residual + offset, count, out.residual_shift, out.relu_after_residual);
}

// One chunk of rows [begin, end) on the AVX2, AMX or portable kernel (x: row begin's operand).
// AVX2 requantises in its own epilogue; the others write int32, into the output or into a block
// of the chunk that is requantised while it is still in cache.
void chunk_rows(FastKernel kernel, const std::int8_t* w, const std::int32_t* column, std::int64_t n, std::int64_t m,
                const std::int8_t* x, std::int64_t ldx, std::int64_t begin, std::int64_t end, const GemmOutput& out) {
    const std::int64_t rows = end - begin;
    if (kernel == FastKernel::Avx2) {
        detail::avx2_gemm_rows(w, column, n, m, x, ldx, begin, end, out);
        add_residual_rows(out, begin * n, rows * n);
        return;
    }
    std::vector<std::int32_t> block(out.y ? std::size_t(rows * n) : 0);
    std::int32_t* acc = out.y ? block.data() : out.acc + begin * n;
    switch (kernel) {
        case FastKernel::Amx: {
            std::vector<std::int8_t> scratch(rows % 32 ? std::size_t(32 * ldx) : 0);   // a partial block
            detail::amx_gemm_rows(w, column, n, m, x, ldx, 0, rows, acc, scratch.data());
            break;
        }
        default: portable_rows(w, column, n, m, x, ldx, 0, rows, acc); break;
    }
    if (out.y) requantize(acc, rows * n, out.out_shift, out.relu, out.y + begin * n, 1);
    add_residual_rows(out, begin * n, rows * n);
}

// How the VNNI kernel splits one GEMM: its workers, their items, and the epilogue's settings.
struct VnniPlan {
    int workers;
    VnniSplit split;
    bool fold;
    detail::VnniDepthSkip skip;

    VnniPlan(std::int64_t n, std::int64_t m, std::int64_t p, const GemmOutput& out, int threads,
             std::int64_t max_abs_acc, const detail::VnniDepthSkip& skip_)
        : workers(vnni_workers(n, m, p, threads)), split(p, n, workers), fold(can_fold_rounding(out, max_abs_acc)),
          skip(skip_) {}

    // A helper costs a wake-up (microseconds idle, often a scheduler slice on a busy machine):
    // one per 2^20 multiply-adds at most.  ResNet-18's classifier (0.5 M) stays on the caller;
    // ResNet-50's (2.05 M, P = 1) takes a helper: it streams 2 MB of weights once, and on an idle
    // 2-core Xeon the second core's share of the memory path took it from 61-66 to 81 GOPS
    // (oneDNN: 84-88 on two threads).  At 2^21 it stayed on one core; on a loaded Zen 4 a split
    // classifier had run at half speed (a wake-up cost more than the layer).
    static int vnni_workers(std::int64_t n, std::int64_t m, std::int64_t p, int threads) {
        constexpr std::int64_t kMinMacsPerWorker = std::int64_t(1) << 20;
        return int(std::max<std::int64_t>(1, std::min<std::int64_t>(resolve_threads(threads),
                                                                     n * m * p / kMinMacsPerWorker)));
    }
};

// A worker's scratch block for the operand rows of one chunk (gemm_fast_streamed), on a cache line
// (allocate_maybe_huge) as the packed weights.  The thread's block is grown to the largest chunk
// it has held and kept for the next, so a pass allocates it once per thread.  While one lease
// holds it, another on the same thread (a row writer that itself runs a streamed GEMM: nested
// pool jobs run on the calling worker) gets a block of its own, freed with the lease, so neither
// overwrites nor frees the rows the other is multiplying.
class ChunkScratch {
public:
    explicit ChunkScratch(std::size_t bytes) {
        Block& block = thread_block();
        if (block.busy) {   // re-entered: a block of this lease's own
            own_ = allocate_maybe_huge(bytes);
            own_bytes_ = bytes;
            data_ = own_;
            return;
        }
        if (bytes > block.capacity) {   // the new block first: a failed allocation keeps the old one
            void* grown = allocate_maybe_huge(bytes);
            if (block.data) free_maybe_huge(block.data, block.capacity);
            block.data = grown;
            block.capacity = bytes;
        }
        block.busy = true;
        data_ = block.data;   // not value-initialised: the writer writes every row
    }
    ~ChunkScratch() {
        if (own_) free_maybe_huge(own_, own_bytes_);
        else thread_block().busy = false;
    }
    ChunkScratch(const ChunkScratch&) = delete;
    ChunkScratch& operator=(const ChunkScratch&) = delete;
    std::uint8_t* data() const { return static_cast<std::uint8_t*>(data_); }

private:
    struct Block {
        void* data = nullptr;
        std::size_t capacity = 0;
        bool busy = false;
        ~Block() {
            if (data) free_maybe_huge(data, capacity);
        }
    };
    static Block& thread_block() {
        thread_local Block block;
        return block;
    }
    void* data_ = nullptr;
    void* own_ = nullptr;
    std::size_t own_bytes_ = 0;
};

}  // namespace

void gemm_fast(const PackedWeights& packed, const std::uint8_t* xt, std::int64_t p, std::int32_t* acc, int threads) {
    GemmOutput out;
    out.acc = acc;
    gemm_fast(packed, xt, p, out, threads);
}

void gemm_fast(const PackedWeights& packed, const std::uint8_t* xt, std::int64_t p, const GemmOutput& out,
               int threads) {
    gemm_fast(packed, xt, p, out, threads, RowPreparer{});
}

void gemm_fast(const PackedWeights& packed, const std::uint8_t* xt, std::int64_t p, const GemmOutput& out,
               int threads, const RowPreparer& prepare) {
    const std::int64_t n = packed.n_, m = packed.m_, ldx = packed.x_row_stride_;
    const std::int8_t* w = packed.data_.data<std::int8_t>();
    const std::int32_t* column = packed.column_.data();
    const std::int8_t* xs = reinterpret_cast<const std::int8_t*>(xt);
    check_residual(out);
    ++g_kernel_calls[std::size_t(packed.kernel_)];
#ifdef AIMCEMU_HAVE_DNNL
    if (packed.kernel_ == FastKernel::Dnnl) {   // oneDNN threads internally (OpenMP)
        if (prepare) prepare(0, p);
        if (!out.y) {
            dnnl_rows(w, column, n, m, xs, ldx, 0, p, out.acc);
            return;
        }
        std::vector<std::int32_t> acc(std::size_t(p * n));
        dnnl_rows(w, column, n, m, xs, ldx, 0, p, acc.data());
        requantize(acc.data(), p * n, out.out_shift, out.relu, out.y, threads);
        add_residual_rows(out, 0, p * n);
        return;
    }
#endif
    if (packed.kernel_ == FastKernel::Vnni512) {   // requantises in its own epilogue
        if (p <= 0) return;
        const VnniPlan plan(n, m, p, out, threads, packed.max_abs_acc_,
                            {packed.skip_segment_, packed.segment_sums_.data(), std::int64_t(packed.column_.size())});
        const VnniSplit& split = plan.split;
        // Items of one row chunk over several panel blocks share its rows: block 0's item
        // prepares them (all block-0 items come first, so the workers prepare different chunks
        // side by side) and the chunk's later items wait for that.  Preparing every row before
        // the pool pass instead left IM2COL on one thread while the other waited (56x56x64 3x3
        // stride 2 on 2 threads: 648 GOPS that way, 758 this way).  The wait cannot deadlock:
        // items are handed out in order, so a waited-for item has been taken by a worker that
        // waits on nothing.
        ChunkReadiness ready(prepare && split.panel_blocks > 1 ? split.row_chunks : 0);
        parallel_for(split.items(), plan.workers, [&](std::int64_t i) {
            std::int64_t p_begin, p_end, n_begin, n_end;
            split.item(i, p_begin, p_end, n_begin, n_end);
            if (prepare && split.panel_blocks == 1) {
                prepare(p_begin, p_end);
            } else if (prepare && split.first_of_chunk(i)) {
                ready.prepare(split.chunk_of(i), [&] { prepare(p_begin, p_end); });
            } else if (prepare && !ready.wait(split.chunk_of(i))) {
                return;   // its preparation threw; the pool rethrows that
            }
            detail::vnni_gemm_rows(w, column, n, m, xt + p_begin * ldx, ldx, p_begin, p_end, n_begin, n_end, out,
                                   plan.fold, plan.skip);
        });
        return;
    }
    const int workers = int(std::min<std::int64_t>(resolve_threads(threads), std::max<std::int64_t>(1, p)));
    const std::int64_t chunk = rows_per_task(packed.kernel_, p, workers);
    const std::int64_t chunks = (p + chunk - 1) / chunk;
    parallel_for(chunks, workers, [&](std::int64_t i) {
        const std::int64_t begin = i * chunk, end = std::min(p, begin + chunk);
        if (prepare) prepare(begin, end);
        chunk_rows(packed.kernel_, w, column, n, m, xs + begin * ldx, ldx, begin, end, out);
    });
}

void gemm_fast_streamed(const PackedWeights& packed, std::int64_t p, const GemmOutput& out, int threads,
                        const RowWriter& write, PassBuffers* buffers) {
    const std::int64_t n = packed.n_, m = packed.m_, ldx = packed.x_row_stride_;
    const std::int8_t* w = packed.data_.data<std::int8_t>();
    const std::int32_t* column = packed.column_.data();
    check_residual(out);
    if (p <= 0) return;
    if (packed.kernel_ == FastKernel::Vnni512) {
        const VnniPlan plan(n, m, p, out, threads, packed.max_abs_acc_,
                            {packed.skip_segment_, packed.segment_sums_.data(), std::int64_t(packed.column_.size())});
        if (plan.split.panel_blocks == 1) {   // every item owns its chunk of rows
            ++g_kernel_calls[std::size_t(packed.kernel_)];
            parallel_for(plan.split.items(), plan.workers, [&](std::int64_t i) {
                std::int64_t p_begin, p_end, n_begin, n_end;
                plan.split.item(i, p_begin, p_end, n_begin, n_end);
                const ChunkScratch rows(std::size_t((p_end - p_begin) * ldx));
                write(p_begin, p_end, rows.data());
                detail::vnni_gemm_rows(w, column, n, m, rows.data(), ldx, p_begin, p_end, n_begin, n_end, out,
                                       plan.fold, plan.skip);
            });
            return;
        }
    } else if (packed.kernel_ != FastKernel::Dnnl) {   // the chunks of the other kernels are independent
        ++g_kernel_calls[std::size_t(packed.kernel_)];
        const int workers = int(std::min<std::int64_t>(resolve_threads(threads), p));
        const std::int64_t chunk = rows_per_task(packed.kernel_, p, workers);
        parallel_for((p + chunk - 1) / chunk, workers, [&](std::int64_t i) {
            const std::int64_t begin = i * chunk, end = std::min(p, begin + chunk);
            const ChunkScratch rows(std::size_t((end - begin) * ldx));
            write(begin, end, rows.data());
            chunk_rows(packed.kernel_, w, column, n, m, reinterpret_cast<const std::int8_t*>(rows.data()), ldx, begin,
                       end, out);
        });
        return;
    }
    // The whole operand: its rows are shared between workers, or the kernel takes them at once.
    PassBuffers::Buffer pooled;
    std::vector<std::uint8_t> owned;
    std::uint8_t* operand;
    if (buffers) {
        pooled = buffers->take(std::size_t(p * ldx));
        operand = pooled.data();
    } else {
        owned.resize(std::size_t(p * ldx));
        operand = owned.data();
    }
    gemm_fast(packed, operand, p, out, threads,
              [&](std::int64_t begin, std::int64_t end) { write(begin, end, operand + begin * ldx); });
}

bool conv_reads_in_place(const PackedWeights& packed, const WindowGeometry& g) {
    return packed.kernel() == FastKernel::Vnni512 && g.window.taps() > 1 && g.in.c % 4 == 0 &&
           packed.m() == g.m();
}

void gemm_fast_conv(const PackedWeights& packed, const std::uint8_t* padded, const WindowGeometry& g,
                    std::int64_t images, const GemmOutput& out, int threads) {
    if (!conv_reads_in_place(packed, g))
        throw std::invalid_argument("gemm_fast_conv: needs the VNNI kernel, a window of several taps and channels a "
                                    "multiple of 4 (conv_reads_in_place)");
    check_residual(out);
    const std::int64_t n = packed.n_, m = packed.m_, p = images * g.p();
    ++g_kernel_calls[std::size_t(packed.kernel_)];
    if (p <= 0) return;
    const Window& win = g.window;
    detail::VnniConvOperand conv;
    conv.padded = padded;
    conv.padded_w = g.in.w + win.pad_left + win.pad_right;
    conv.image_bytes = std::int64_t(g.in.h + win.pad_top + win.pad_bottom) * conv.padded_w * g.in.c;
    conv.channels = g.in.c;
    conv.out_h = g.out_h();
    conv.out_w = g.out_w();
    conv.kernel_h = win.kernel_h;
    conv.kernel_w = win.kernel_w;
    conv.stride_h = win.stride_h;
    conv.stride_w = win.stride_w;
    const VnniPlan plan(n, m, p, out, threads, packed.max_abs_acc_,
                        {packed.skip_segment_, packed.segment_sums_.data(), std::int64_t(packed.column_.size())});
    parallel_for(plan.split.items(), plan.workers, [&](std::int64_t i) {
        std::int64_t p_begin, p_end, n_begin, n_end;
        plan.split.item(i, p_begin, p_end, n_begin, n_end);
        detail::vnni_conv_rows(packed.data_.data<std::int8_t>(), packed.column_.data(), n, m, conv, p_begin, p_end,
                               n_begin, n_end, out, plan.fold, plan.skip);
    });
}

void gemm_fast(const std::int8_t* w, const std::int8_t* xt, const std::int8_t* bias, int bias_shift, std::int64_t n,
               std::int64_t m, std::int64_t p, std::int32_t* acc, int threads, FastKernel kernel) {
    const PackedWeights packed(w, bias, bias_shift, n, m, kernel);
    const std::int64_t stride = packed.x_row_stride();
    const std::uint8_t mask = packed.x_xor_mask();
    std::vector<std::uint8_t> x(std::size_t(p * stride), mask);
    for (std::int64_t row = 0; row < p; ++row)
        for (std::int64_t k = 0; k < m; ++k) x[std::size_t(row * stride + k)] = std::uint8_t(xt[row * m + k]) ^ mask;
    gemm_fast(packed, x.data(), p, acc, threads);
}

void check_threads(int threads, const std::string& field) {
    if (threads < 0 || threads > kMaxThreads)
        throw FormatError("<memory>", field, "must be in 0.." + std::to_string(kMaxThreads) + " (0 = all cores), got " +
                                                 std::to_string(threads));
}

int resolve_threads(int threads) {
    if (threads > 0) return std::min(threads, kMaxThreads);
    return std::min(usable_cpus(), kMaxThreads);
}

void parallel_for(std::int64_t count, int threads, const std::function<void(std::int64_t)>& fn) {
    run_on_worker_pool(count, int(std::min<std::int64_t>(resolve_threads(threads), count)), fn);
}

}  // namespace aimcemu
