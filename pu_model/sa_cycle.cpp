// Cycle-level SA -> aggregator -> WRB model (see sa_cycle.hpp and docs/arithmetic.md).
//
// Timing of one wave (input round) that starts at cycle T, with G = ceil(M / C_SA):
//   * depth group t (C_SA activations) enters column 0 at T + t; activations move up one row and
//     partial sums one column per cycle, so PE (row i, column j) sees group t at T + t + i + j;
//   * the bias enters the first column's C port with group 0, the last column accumulates G
//     partial sums, so row i's result is registered at T + G + C_SA - 1 + i;
//   * row-block b (rows b*R_g .. b*R_g + R_g - 1) is complete when its top row is, and after one
//     scale/merge stage its chunk enters FIFO b at T + G + C_SA + (b + 1) * R_g - 1;
//   * the aggregator is a shift-up register chain, one slot per row-block; every cycle the top
//     slot is written to the WRB (if the WRB has room for its wave), the chain moves up one slot,
//     and FIFO b may insert its head into slot b when that slot is empty;
//   * the WRB holds wrb_waves waves; it accepts chunks in any order (each is tagged with its wave
//     and row-block), and its read side emits one chunk (R_g bytes) per cycle strictly in
//     (wave, row-block) order;
//   * the SA starts a wave every G cycles, but only when the WRB has space reserved for that wave
//     (so the aggregator never blocks and cannot deadlock) and every FIFO the wave feeds has a
//     credit (a credit returns when a chunk leaves its FIFO): a slow read side throttles the array.
#include "pu_model/sa_cycle.hpp"

#include <algorithm>
#include <deque>
#include <optional>
#include <vector>

#include "common/errors.hpp"
#include "pu_model/gemm.hpp"

namespace aimcemu {

void SaConfig::validate() const {
    if (rows < 1) throw FormatError("<memory>", "rows", "must be >= 1");
    if (cols < 1) throw FormatError("<memory>", "cols", "must be >= 1");
    if (rg < 1 || rows % rg != 0) throw FormatError("<memory>", "rg", "must be >= 1 and divide rows");
    if (fifo_depth < 1) throw FormatError("<memory>", "fifo_depth", "must be >= 1");
    if (wrb_waves < 1) throw FormatError("<memory>", "wrb_waves", "must be >= 1");
}

namespace {

struct Chunk {
    std::int64_t wave = 0;
    int block = 0;
    std::int64_t ready = 0;          // cycle from which it sits at the head of its FIFO
    std::vector<std::int32_t> values;  // the R_g results (unscaled accumulators)
};

class SystolicArrayModel {
public:
    SystolicArrayModel(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                       int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, const SaConfig& cfg)
        : w_(w), xt_(xt), ldx_(ldx), bias_(bias), bias_shift_(bias_shift), n_(n), m_(m), p_(p), cfg_(cfg),
          blocks_(cfg.rows / cfg.rg), sections_((n + cfg.rows - 1) / cfg.rows), groups_((m + cfg.cols - 1) / cfg.cols),
          waves_(p * sections_), fifos_(std::size_t(blocks_)), credits_(std::size_t(blocks_), cfg.fifo_depth),
          chain_(std::size_t(blocks_)) {}

    SaCycleStats run(std::int32_t* acc) {
        acc_ = acc;
        stats_.waves = waves_;
        stats_.cycles_per_wave = groups_;
        stats_.compute_cycles = waves_ * groups_;
        for (std::int64_t s = 0; s < sections_; ++s) total_chunks_ += blocks_in_section(s);
        total_chunks_ *= p_;
        stats_.chunks = total_chunks_;
        for (std::int64_t now = 0; chunks_read_ < total_chunks_; ++now) {
            read_side(now);
            aggregator(now);
            issue(now);
        }
        return stats_;
    }

private:
    std::int64_t valid_rows(std::int64_t section) const { return std::min<std::int64_t>(cfg_.rows, n_ - section * cfg_.rows); }
    int blocks_in_section(std::int64_t section) const { return int((valid_rows(section) + cfg_.rg - 1) / cfg_.rg); }
    std::int64_t wrb_slot(std::int64_t wave, int block) const { return wave * blocks_ + block; }

    // One PE row's result exactly as the array forms it: the bias enters column 0 with group 0,
    // each cycle a column adds its product to the partial sum from its left neighbour, and the
    // last column accumulates (48-bit DSP accumulator; int64 here).
    std::int64_t pe_row_result(std::int64_t out_channel, std::int64_t pixel) const {
        std::int64_t accumulated = 0;
        for (std::int64_t t = 0; t < groups_; ++t) {
            std::int64_t partial = t == 0 ? std::int64_t(bias_[out_channel]) * (std::int64_t(1) << bias_shift_) : 0;
            for (int j = 0; j < cfg_.cols; ++j) {
                const std::int64_t k = t * cfg_.cols + j;
                if (k < m_) partial += std::int64_t(w_[out_channel * m_ + k]) * xt_[pixel * ldx_ + k];
            }
            accumulated += partial;
        }
        return accumulated;
    }

    // The SA starts wave q = pixel * sections + section when it is free and every FIFO it will
    // feed has a credit.
    void issue(std::int64_t now) {
        if (next_wave_ >= waves_ || now < next_issue_) return;
        const std::int64_t pixel = next_wave_ / sections_, section = next_wave_ % sections_;
        const int blocks = blocks_in_section(section);
        if (next_wave_ >= read_wave_ + cfg_.wrb_waves) {   // no WRB space to reserve for the wave
            ++stats_.sa_stall_cycles;
            ++stats_.wrb_full_cycles;
            return;
        }
        for (int b = 0; b < blocks; ++b) {
            if (credits_[std::size_t(b)] == 0) {
                ++stats_.sa_stall_cycles;
                return;
            }
        }
        const std::int64_t rows = valid_rows(section);
        for (int b = 0; b < blocks; ++b) {
            Chunk chunk{next_wave_, b, now + groups_ + cfg_.cols + std::int64_t(b + 1) * cfg_.rg - 1, {}};
            for (int r = 0; r < cfg_.rg && b * cfg_.rg + r < rows; ++r)
                chunk.values.push_back(std::int32_t(pe_row_result(section * cfg_.rows + b * cfg_.rg + r, pixel)));
            --credits_[std::size_t(b)];
            fifos_[std::size_t(b)].push_back(std::move(chunk));
        }
        ++next_wave_;
        next_issue_ = now + groups_;
    }

    // Head of the chain into the WRB (always possible: the wave's WRB space was reserved when
    // it was issued), shift up, FIFO heads into empty slots.
    void aggregator(std::int64_t now) {
        auto& top = chain_[std::size_t(blocks_ - 1)];
        if (top) {
            write_wrb(std::move(*top));
            top.reset();
        }
        for (int pos = blocks_ - 1; pos > 0; --pos) chain_[std::size_t(pos)] = std::move(chain_[std::size_t(pos - 1)]);
        chain_[0].reset();
        for (int b = 0; b < blocks_; ++b) {
            auto& fifo = fifos_[std::size_t(b)];
            if (!chain_[std::size_t(b)] && !fifo.empty() && fifo.front().ready <= now) {
                chain_[std::size_t(b)] = std::move(fifo.front());
                fifo.pop_front();
                ++credits_[std::size_t(b)];
            }
        }
    }

    void write_wrb(Chunk chunk) {
        const std::int64_t slot = wrb_slot(chunk.wave, chunk.block);
        if (slot < newest_written_) ++stats_.out_of_order_writes;
        newest_written_ = std::max(newest_written_, slot);
        wrb_.push_back(std::move(chunk));
        stats_.max_wrb_chunks = std::max<std::int64_t>(stats_.max_wrb_chunks, std::int64_t(wrb_.size()));
    }

    // One in-order chunk per cycle leaves the WRB into the output (acc, P x N).
    void read_side(std::int64_t now) {
        auto it = std::find_if(wrb_.begin(), wrb_.end(),
                               [&](const Chunk& c) { return c.wave == read_wave_ && c.block == read_block_; });
        if (it == wrb_.end()) return;
        const std::int64_t pixel = it->wave / sections_, section = it->wave % sections_;
        const std::int64_t first = section * cfg_.rows + std::int64_t(read_block_) * cfg_.rg;
        std::copy(it->values.begin(), it->values.end(), acc_ + pixel * n_ + first);
        wrb_.erase(it);
        if (chunks_read_ == 0) stats_.first_output_cycle = now;
        ++chunks_read_;
        stats_.cycles = now + 1;
        if (++read_block_ == blocks_in_section(section)) {
            read_block_ = 0;
            ++read_wave_;
        }
    }

    const std::int8_t *w_, *xt_;
    std::int64_t ldx_;
    const std::int8_t* bias_;
    int bias_shift_;
    std::int64_t n_, m_, p_;
    SaConfig cfg_;
    int blocks_;
    std::int64_t sections_, groups_, waves_;

    std::vector<std::deque<Chunk>> fifos_;
    std::vector<int> credits_;
    std::vector<std::optional<Chunk>> chain_;
    std::vector<Chunk> wrb_;
    std::int64_t next_wave_ = 0, next_issue_ = 0;
    std::int64_t read_wave_ = 0;
    int read_block_ = 0;
    std::int64_t newest_written_ = -1;
    std::int64_t total_chunks_ = 0, chunks_read_ = 0;
    std::int32_t* acc_ = nullptr;
    SaCycleStats stats_;
};

}  // namespace

SaCycleStats sa_cycle_gemm(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                           int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, const SaConfig& config,
                           std::int32_t* acc) {
    config.validate();
    check_gemm_fits_int32(m, bias_shift, "gemm");
    if (n <= 0 || p <= 0) throw FormatError("<memory>", "gemm", "N and P must be positive");
    return SystolicArrayModel(w, xt, ldx, bias, bias_shift, n, m, p, config).run(acc);
}

}  // namespace aimcemu
