// PE-level SA -> aggregator -> WRB model (see sa_cycle.hpp, sa_pipeline.hpp, docs/arithmetic.md).
//
// Simulation convention: the state is the content of every register during cycle `now`.  Each
// cycle the model (1) merges rows whose finished dot product sits in the last column's P register
// into chunks, (2) lets the WRB read side emit the next chunk in wave order, (3) steps the
// aggregator chain (top slot -> WRB write, shift up, FIFO heads into empty slots), (4) lets the
// sequencer start or continue a wave, and (5) clocks the array: every register takes its value
// for `now + 1` from the values of `now`.
//
// Wires that only delay a signal (the buffer read, the per-column input and weight skews, each
// row's URAM enable chain, the bias's path to the C port) are read from short per-cycle histories
// at the delay the registers would impose -- the same values a chain of registers would hold.
// The registers that hold data being transformed (A cascade, B, M, P, the accumulators, the
// chunk FIFOs, the aggregator slots, the WRB lines) are explicit.
#include "pu_model/sa_cycle.hpp"

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/sa_pipeline.hpp"

namespace aimcemu {

namespace {
constexpr const char* kSource = "<sa_cycle>";
}  // namespace

void SaConfig::validate() const {
    // Upper bounds keep the model's own tables (the URAM image holds rows x groups x (cols + 1)
    // words a section) to what a caller's GEMM needs: rows = 2^30 was a bad_alloc.
    const auto require_in = [](int value, int max, const char* field) {
        if (value < 1 || value > max)
            throw FormatError(kSource, field, "must be in 1.." + std::to_string(max) + " (got " + std::to_string(value) + ")");
    };
    require_in(rows, kSaMaxRows, "rows");
    require_in(cols, kSaMaxCols, "cols");
    if (rg < 1 || rows % rg != 0) throw FormatError(kSource, "rg", "must be >= 1 and divide rows");
    require_in(fifo_depth, kSaMaxDepth, "fifo_depth");
    require_in(wrb_waves, kSaMaxDepth, "wrb_waves");
    if (cycle_limit < 0) throw FormatError(kSource, "cycle_limit", "must be >= 0 (0: derived from the shape)");
    const int blocks = rows / rg;
    switch (fault.kind) {
        case SaFault::None: break;
        case SaFault::InputSkew:
            if (fault.column < 0 || fault.column >= cols) throw FormatError(kSource, "fault.column", "must be a column");
            break;
        case SaFault::SwapChunkTags:
            if (fault.block < 0 || fault.block + 1 >= blocks)
                throw FormatError(kSource, "fault.block", "needs row-blocks block and block + 1");
            break;
        case SaFault::DropChunk:
            if (fault.block < 0 || fault.block >= blocks) throw FormatError(kSource, "fault.block", "must be a row-block");
            break;
    }
    if (fault.wave < 0) throw FormatError(kSource, "fault.wave", "must be >= 0");
}

namespace {

using namespace sa_pipeline;

// The control token that travels with every group of activations: the DSPs' pipelined opmode
// (first group: add the bias / restart the accumulator; last group: the row is finished) and the
// wave tag.  0 is an idle (bubble) cycle.
namespace token {
constexpr std::int64_t kValid = 1, kFirst = 2, kLast = 4;
constexpr std::int64_t make(std::int64_t wave, bool first, bool last) {
    return (wave << 3) | kValid | (first ? kFirst : 0) | (last ? kLast : 0);
}
constexpr bool valid(std::int64_t t) { return (t & kValid) != 0; }
constexpr bool first(std::int64_t t) { return (t & kFirst) != 0; }
constexpr bool last(std::int64_t t) { return (t & kLast) != 0; }
constexpr std::int64_t wave(std::int64_t t) { return t >> 3; }
}  // namespace token

// The GEMM as the array sees it.
struct Problem {
    const std::int8_t* w;
    const std::int8_t* xt;
    std::int64_t ldx;
    const std::int8_t* bias;
    int bias_shift;
    std::int64_t n, m, p;
    std::int64_t groups;    // G = ceil(M / C_SA): cycles per wave
    std::int64_t sections;  // ceil(N / R_SA): waves per pixel
};

// What the sequencer drives in one cycle: which group of which pixel the buffer reads, which
// URAM entry the rows will read for it, and its token.
struct GroupRead {
    std::int64_t token = 0;
    std::int64_t pixel = 0;
    std::int64_t group = 0;
    std::int64_t uram_entry = 0;
};

// The sequencer's outputs of the last `size` cycles (a power of two).
class SequencerHistory {
public:
    explicit SequencerHistory(std::int64_t depth) {
        while (size_ < depth) size_ *= 2;
        reads_.resize(std::size_t(size_));
    }
    void record(std::int64_t cycle, const GroupRead& g) { reads_[std::size_t(cycle & (size_ - 1))] = g; }
    const GroupRead& at(std::int64_t cycle) const {
        static const GroupRead idle{};
        return cycle < 0 ? idle : reads_[std::size_t(cycle & (size_ - 1))];
    }

private:
    std::int64_t size_ = 1;
    std::vector<GroupRead> reads_;
};

// The R_SA x C_SA PEs with their URAMs.  Row i, column j is one DSP48E2.  Registers are stored
// column by column (index j * R_SA + i), so that each pipeline step is a loop over the rows.
class PeArray {
public:
    PeArray(const SaConfig& cfg, const Problem& pb)
        : r_(cfg.rows), c_(cfg.cols), pb_(pb), fault_(cfg.fault),
          history_(std::max<std::int64_t>(c_, kDspInputRegs + kDspMultiplyReg) + 2),
          a_(cells(), 0), b_(cells(), 0), m_(cells(), 0), p_(cells(), 0), p_token_(cells(), 0),
          a_token_(std::size_t(r_), 0), m_token_(std::size_t(r_), 0), bias_c_(std::size_t(r_), 0),
          uram_q_(std::size_t(history_) * std::size_t(c_ + 1) * std::size_t(r_), 0) {
        load_urams();
    }

    // The clock edge at the end of cycle `now`.  Stages are updated downstream first so that each
    // reads its upstream neighbour's value of `now`.
    void clock(std::int64_t now, const SequencerHistory& seq) {
        step_partial_sums();
        step_bias(now);
        step_products();
        step_activations(now, seq);
        step_weights(now);
        read_urams(now, seq);
    }

    // During the current cycle: row `row`'s finished dot product, if its last column holds one.
    bool row_finished(int row) const {
        const std::int64_t t = p_token_[at(row, c_ - 1)];
        return token::valid(t) && token::last(t);
    }
    std::int64_t row_token(int row) const { return p_token_[at(row, c_ - 1)]; }
    std::int64_t row_value(int row) const { return p_[at(row, c_ - 1)]; }

private:
    std::size_t cells() const { return std::size_t(r_) * std::size_t(c_); }
    std::size_t at(int row, int col) const { return std::size_t(col) * std::size_t(r_) + std::size_t(row); }
    // Entry `entry` of row `row`'s URAM: C_SA weights and the spare byte (the bias on a tile's first entry).
    std::int8_t* uram_word(int row, std::int64_t entry) {
        // Stored entry-major (all rows of an entry together): the rows read neighbouring entries.
        return &uram_[(std::size_t(entry) * std::size_t(r_) + std::size_t(row)) * std::size_t(c_ + 1)];
    }
    // Byte `lane` (0..C_SA; C_SA is the spare byte) of the URAM output registers of all rows at `cycle`.
    std::int8_t* uram_q(std::int64_t cycle, int lane) {
        return &uram_q_[(std::size_t(cycle % history_) * std::size_t(c_ + 1) + std::size_t(lane)) * std::size_t(r_)];
    }

    // Section s of the weights occupies entries [s*G, s*G + G) of every URAM; row i of section s is
    // output channel s*R_SA + i (zeros past N).  The bias byte sits in the spare byte of the first entry.
    void load_urams() {
        uram_.assign(std::size_t(r_) * std::size_t(pb_.sections * pb_.groups) * std::size_t(c_ + 1), 0);
        for (std::int64_t s = 0; s < pb_.sections; ++s)
            for (int row = 0; row < r_; ++row) {
                const std::int64_t channel = s * r_ + row;
                if (channel >= pb_.n) continue;
                for (std::int64_t g = 0; g < pb_.groups; ++g) {
                    std::int8_t* word = uram_word(row, s * pb_.groups + g);
                    for (int j = 0; j < c_; ++j) {
                        const std::int64_t k = g * c_ + j;
                        word[j] = k < pb_.m ? pb_.w[channel * pb_.m + k] : 0;
                    }
                    word[c_] = g == 0 ? pb_.bias[channel] : 0;
                }
            }
    }

    // P(i,0) = M(i,0) + C port (the bias on a wave's first group); P(i,j) = M(i,j) + P(i,j-1);
    // the last column also adds its own P unless the group is a wave's first (accumulation).
    // Tokens move along with the partial sums.
    void step_partial_sums() {
        const std::size_t r = std::size_t(r_);
        std::int64_t* p = p_.data();
        std::int64_t* tok = p_token_.data();
        const std::int32_t* m = m_.data();
        const std::size_t last = std::size_t(c_ - 1) * r;
        for (std::size_t i = 0; i < r; ++i) {  // the last column: accumulate across the wave's groups
            const std::int64_t in_token = c_ == 1 ? m_token_[i] : tok[last - r + i];
            const std::int64_t in_sum = c_ == 1 ? bias_term(i) : p[last - r + i];
            const bool accumulate = token::valid(in_token) && !token::first(in_token);
            p[last + i] = m[last + i] + in_sum + (accumulate ? p[last + i] : 0);
            tok[last + i] = in_token;
        }
        for (int j = c_ - 2; j >= 1; --j) {
            const std::size_t col = std::size_t(j) * r;
            for (std::size_t i = 0; i < r; ++i) p[col + i] = m[col + i] + p[col - r + i];
            std::copy_n(tok + col - r, r, tok + col);
        }
        if (c_ > 1) {
            for (std::size_t i = 0; i < r; ++i) p[i] = m[i] + bias_term(i);
            std::copy(m_token_.begin(), m_token_.end(), tok);
        }
    }

    // What column 0's C port adds: the bias on a wave's first group.
    std::int64_t bias_term(std::size_t row) const {
        return token::first(m_token_[row]) ? std::int64_t(bias_c_[row]) * (std::int64_t(1) << pb_.bias_shift) : 0;
    }

    // The C-port register of column 0 holds the bias read with the group, delayed by the A/B and M stages.
    void step_bias(std::int64_t now) {
        const std::int64_t source = now + 1 - (kDspInputRegs + kDspMultiplyReg);
        if (source < 0) return;
        std::copy_n(uram_q(source, c_), r_, bias_c_.begin());
    }

    void step_products() {
        for (std::size_t k = 0; k < m_.size(); ++k) m_[k] = std::int32_t(a_[k]) * std::int32_t(b_[k]);
        m_token_ = a_token_;
    }

    // A(i,j) <- A(i-1,j) (the input cascade); A(0,j) <- the buffer word read j skew registers ago.
    void step_activations(std::int64_t now, const SequencerHistory& seq) {
        for (int j = 0; j < c_; ++j) {
            std::int8_t* col = &a_[at(0, j)];
            std::copy_backward(col, col + r_ - 1, col + r_);
            const int skew = (fault_.kind == SaFault::InputSkew && j == fault_.column) ? j - 1 : j;
            const GroupRead& g = seq.at(now - skew - kBufferReadLatency);
            col[0] = token::valid(g.token) ? activation(g, j) : 0;
        }
        std::copy_backward(a_token_.begin(), a_token_.end() - 1, a_token_.end());
        a_token_[0] = seq.at(now - kBufferReadLatency).token;
    }

    std::int8_t activation(const GroupRead& g, int j) const {
        const std::int64_t k = g.group * c_ + j;
        return k < pb_.m ? pb_.xt[g.pixel * pb_.ldx + k] : 0;
    }

    // B(i,j) <- row i's URAM output j weight-skew registers ago.
    void step_weights(std::int64_t now) {
        for (int j = 0; j < c_; ++j) {
            std::int8_t* col = &b_[at(0, j)];
            if (now - j < 0) std::fill_n(col, r_, std::int8_t(0));
            else std::copy_n(uram_q(now - j, j), r_, col);
        }
    }

    // Row i's URAM is enabled i cycles (its systolic delay) after row 0's, which follows the buffer
    // read by kUramEnableLead; its output register holds the word kUramReadLatency later.
    void read_urams(std::int64_t now, const SequencerHistory& seq) {
        for (int i = 0; i < r_; ++i) {
            const GroupRead& g = seq.at(now + 1 - kUramReadLatency - kUramEnableLead - i);
            read_word_[std::size_t(i)] = token::valid(g.token) ? uram_word(i, g.uram_entry) : zero_word_.data();
        }
        for (int lane = 0; lane <= c_; ++lane) {
            std::int8_t* out = uram_q(now + 1, lane);
            for (int i = 0; i < r_; ++i) out[i] = read_word_[std::size_t(i)][lane];
        }
    }

    int r_, c_;
    Problem pb_;
    SaFaultSpec fault_;
    std::int64_t history_;
    std::vector<std::int8_t> uram_;
    std::vector<std::int8_t> a_, b_;
    std::vector<std::int32_t> m_;
    std::vector<std::int64_t> p_, p_token_;
    std::vector<std::int64_t> a_token_, m_token_;
    std::vector<std::int8_t> bias_c_;
    std::vector<std::int8_t> uram_q_;  // [cycle % history][lane][row]
    std::vector<const std::int8_t*> read_word_ = std::vector<const std::int8_t*>(std::size_t(r_));
    std::vector<std::int8_t> zero_word_ = std::vector<std::int8_t>(std::size_t(c_ + 1), 0);
};

struct Chunk {
    std::int64_t wave = 0;
    int block = 0;                     // the tag: (wave, block)
    std::int64_t ready = 0;            // cycle from which it is at the head of its FIFO
    std::vector<std::int32_t> values;  // R_g results, lane r = row block*R_g + r (unscaled accumulators)
};

// The WRB: lines of R_g results.  The write side takes the next line from a free list (so chunks
// are stored in arrival order) and records it under the chunk's tag; the read side looks up the
// tag it expects next, emits that line and returns it to the free list.
class WaveReorderBuffer {
public:
    WaveReorderBuffer(int waves, int blocks, int rg)
        : waves_(waves), blocks_(blocks), rg_(rg), lines_(std::size_t(waves * blocks * rg), 0),
          line_of_tag_(std::size_t(waves * blocks), -1) {
        for (int line = 0; line < waves * blocks; ++line) free_.push_back(line);
    }

    void write(const Chunk& chunk, const std::string& where) {
        if (free_.empty()) throw FormatError(kSource, where, "WRB overflow: no free line for the chunk");
        int& slot = line_of_tag_[tag(chunk.wave, chunk.block)];
        if (slot >= 0) throw FormatError(kSource, where, "WRB: a chunk with this tag is already waiting to be read");
        slot = free_.front();
        free_.pop_front();
        std::copy(chunk.values.begin(), chunk.values.end(), lines_.begin() + std::ptrdiff_t(slot) * rg_);
    }

    // The line tagged (wave, block), if it has arrived: copied to `out` and freed.
    bool read(std::int64_t wave, int block, std::int32_t* out) {
        int& slot = line_of_tag_[tag(wave, block)];
        if (slot < 0) return false;
        std::copy_n(lines_.begin() + std::ptrdiff_t(slot) * rg_, rg_, out);
        free_.push_back(slot);
        slot = -1;
        return true;
    }

    bool holds(std::int64_t wave, int block) const { return line_of_tag_[tag(wave, block)] >= 0; }

    std::int64_t occupied() const { return std::int64_t(waves_) * blocks_ - std::int64_t(free_.size()); }

private:
    // The hardware tag keeps log2(waves) bits of the wave number.
    std::size_t tag(std::int64_t wave, int block) const { return std::size_t((wave % waves_) * blocks_ + block); }

    int waves_, blocks_, rg_;
    std::vector<std::int32_t> lines_;
    std::deque<int> free_;
    std::vector<int> line_of_tag_;
};

class SystolicArrayModel {
public:
    SystolicArrayModel(const Problem& pb, const SaConfig& cfg)
        : pb_(pb), cfg_(cfg), blocks_(cfg.rows / cfg.rg), waves_(pb.p * pb.sections),
          seq_(std::int64_t(cfg.rows) + cfg.cols + kPeDepth + kUramEnableLead + kUramReadLatency + 4), array_(cfg, pb),
          wrb_(cfg.wrb_waves, blocks_, cfg.rg), fifos_(std::size_t(blocks_)),
          credits_(std::size_t(blocks_), cfg.fifo_depth), chain_(std::size_t(blocks_)),
          lanes_(std::size_t(cfg.rows) * std::size_t(cfg.rg)), read_values_(std::size_t(cfg.rg)) {
        for (std::int64_t s = 0; s < pb_.sections; ++s) total_chunks_ += blocks_in_section(s);
        total_chunks_ *= pb_.p;
        limit_ = cfg.cycle_limit > 0 ? cfg.cycle_limit : default_cycle_limit();
    }

    SaCycleStats run(std::int32_t* acc) {
        // The output counter writes in read order; tile-major reads section by section, so its
        // stream lands in a staging copy that is laid out as P x N afterwards.
        if (cfg_.tile_major) staging_.assign(std::size_t(pb_.n * pb_.p), 0);
        acc_ = cfg_.tile_major ? staging_.data() : acc;
        stats_.waves = waves_;
        stats_.cycles_per_wave = pb_.groups;
        stats_.compute_cycles = waves_ * pb_.groups;
        stats_.chunks = total_chunks_;
        stats_.cycle_limit = limit_;
        for (std::int64_t now = 0; chunks_read_ < total_chunks_; ++now) {
            if (now >= limit_)
                throw FormatError(kSource, "cycle_limit", "exceeded " + std::to_string(limit_) + " cycles while the WRB read side waits for " +
                                                              chunk_name(read_wave_, read_block_));
            merge_finished_rows(now);
            const bool read = read_side(now);
            aggregator(now);
            const bool blocked = sequencer(now);
            array_.clock(now, seq_);
            if (!read) check_not_starved(now, blocked);
        }
        if (cfg_.tile_major) scatter_sections(acc);
        return stats_;
    }

private:
    void scatter_sections(std::int32_t* acc) const {
        std::size_t k = 0;
        for (std::int64_t section = 0; section < pb_.sections; ++section)
            for (std::int64_t pixel = 0; pixel < pb_.p; ++pixel)
                for (std::int64_t row = 0; row < valid_rows(section); ++row)
                    acc[std::size_t(pixel * pb_.n + section * cfg_.rows + row)] = staging_[k++];
    }

    std::int64_t valid_rows(std::int64_t section) const { return std::min<std::int64_t>(cfg_.rows, pb_.n - section * cfg_.rows); }
    int blocks_in_section(std::int64_t section) const { return int((valid_rows(section) + cfg_.rg - 1) / cfg_.rg); }
    std::int64_t order(std::int64_t wave, int block) const { return wave * blocks_ + block; }

    // Wave q's section (row-block of the weights) and pixel: pixel-major (all sections of a column,
    // then the next column) or tile-major (all columns of a section, then the next section).
    std::int64_t section_of(std::int64_t wave) const { return cfg_.tile_major ? wave / pb_.p : wave % pb_.sections; }
    std::int64_t pixel_of(std::int64_t wave) const { return cfg_.tile_major ? wave % pb_.p : wave / pb_.sections; }

    std::string chunk_name(std::int64_t wave, int block) const {
        return "wave " + std::to_string(wave) + " (pixel " + std::to_string(pixel_of(wave)) + ", section " +
               std::to_string(section_of(wave)) + ") row-block " + std::to_string(block);
    }

    // An upper bound for every config validate() accepts.  A streaming datapath needs about
    // max(G, chunks per wave / 0.75) cycles a wave, but a shallow one (fifo_depth = 1, or
    // wrb_waves = 1) overlaps nothing: a wave then waits for the one before it to travel the whole
    // way -- G groups in, the input skew (C) and the array (R) and the PE pipeline, one slot a
    // row-block up the aggregator chain, into the WRB and out.  So each wave is bounded by that
    // whole trip, with margin (2x the chain and 16 cycles of WRB and merge latency), and a fill.
    std::int64_t default_cycle_limit() const {
        const std::int64_t trip = pb_.groups + cfg_.cols + cfg_.rows + kPeDepth + 2 * std::int64_t(blocks_) + 16;
        return waves_ * trip + trip + 4 * std::int64_t(blocks_) + 64;
    }

    // The sequencer starts wave q (pixel_of, section_of) when the previous wave's G groups
    // have been read, the WRB has space reserved for it and every FIFO it feeds has a credit; it
    // then reads one group per cycle.  Returns true if a wave was due but could not start.
    bool sequencer(std::int64_t now) {
        GroupRead g;
        bool blocked = false;
        if (now >= wave_start_ + pb_.groups && next_wave_ < waves_) {
            if (can_start_wave()) start_wave(now);
            else blocked = true;
        }
        if (current_wave_ >= 0 && now < wave_start_ + pb_.groups) {
            const std::int64_t group = now - wave_start_;
            const std::int64_t section = section_of(current_wave_);
            g.token = token::make(current_wave_, group == 0, group == pb_.groups - 1);
            g.pixel = pixel_of(current_wave_);
            g.group = group;
            g.uram_entry = section * pb_.groups + group;
            last_group_cycle_ = now;
        }
        seq_.record(now, g);
        return blocked;
    }

    bool can_start_wave() {
        if (next_wave_ >= read_wave_ + cfg_.wrb_waves) {  // no WRB space to reserve for the wave
            ++stats_.sa_stall_cycles;
            ++stats_.wrb_full_cycles;
            return false;
        }
        const int blocks = blocks_in_section(section_of(next_wave_));
        for (int b = 0; b < blocks; ++b)
            if (credits_[std::size_t(b)] == 0) {
                ++stats_.sa_stall_cycles;
                return false;
            }
        return true;
    }

    void start_wave(std::int64_t now) {
        const int blocks = blocks_in_section(section_of(next_wave_));
        for (int b = 0; b < blocks; ++b) --credits_[std::size_t(b)];
        if (cfg_.tile_major && next_wave_ % pb_.p == 0) stats_.section_start_cycles.push_back(now);
        current_wave_ = next_wave_++;
        wave_start_ = now;
    }

    // Finished rows wait in per-lane delay registers until the top row of their row-block finishes;
    // then scale/merge forms the chunk, which joins its row-block's FIFO.
    void merge_finished_rows(std::int64_t now) {
        for (int row = 0; row < cfg_.rows; ++row) {
            if (!array_.row_finished(row)) continue;
            Lane& lane = lanes_[std::size_t(row) * std::size_t(cfg_.rg) + std::size_t(now % cfg_.rg)];
            lane = Lane{now, array_.row_token(row), array_.row_value(row)};
            if (row % cfg_.rg == cfg_.rg - 1) form_chunk(now, row / cfg_.rg, token::wave(lane.token));
        }
    }

    void form_chunk(std::int64_t now, int block, std::int64_t wave) {
        if (block >= blocks_in_section(section_of(wave))) return;  // rows past N: no chunk
        Chunk chunk{wave, tag_block(wave, block), now + kScaleMergeStages, std::vector<std::int32_t>(std::size_t(cfg_.rg))};
        for (int r = 0; r < cfg_.rg; ++r) {
            const std::int64_t cycle = now - (cfg_.rg - 1 - r);
            const Lane& lane = lanes_[std::size_t(block * cfg_.rg + r) * std::size_t(cfg_.rg) + std::size_t(cycle % cfg_.rg)];
            if (lane.cycle != cycle || token::wave(lane.token) != wave)
                throw FormatError(kSource, chunk_name(wave, block), "lane " + std::to_string(r) + " finished out of step with its row-block");
            chunk.values[std::size_t(r)] = std::int32_t(lane.value);
        }
        auto& fifo = fifos_[std::size_t(block)];
        if (std::int64_t(fifo.size()) >= cfg_.fifo_depth)
            throw FormatError(kSource, chunk_name(wave, block), "FIFO overflow (credits did not hold)");
        fifo.push_back(std::move(chunk));
    }

    int tag_block(std::int64_t wave, int block) const {
        const SaFaultSpec& f = cfg_.fault;
        if (f.kind != SaFault::SwapChunkTags || wave != f.wave) return block;
        if (block == f.block) return block + 1;
        if (block == f.block + 1) return block - 1;
        return block;
    }

    // Head of the chain into the WRB (always possible: the wave's WRB space was reserved when it
    // was started), shift up, FIFO heads into empty slots.
    void aggregator(std::int64_t now) {
        auto& top = chain_[std::size_t(blocks_ - 1)];
        if (top) {
            write_wrb(*top);
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

    void write_wrb(const Chunk& chunk) {
        const SaFaultSpec& f = cfg_.fault;
        if (f.kind == SaFault::DropChunk && chunk.wave == f.wave && chunk.block == f.block) return;
        const std::int64_t position = order(chunk.wave, chunk.block);
        if (position < newest_written_) ++stats_.out_of_order_writes;
        newest_written_ = std::max(newest_written_, position);
        wrb_.write(chunk, chunk_name(chunk.wave, chunk.block));
        stats_.max_wrb_chunks = std::max(stats_.max_wrb_chunks, wrb_.occupied());
    }

    // One chunk per cycle leaves the WRB, strictly in (wave, row-block) order, and is written to
    // the output at the next position (only the lanes that are real rows).
    bool read_side(std::int64_t now) {
        if (!wrb_.read(read_wave_, read_block_, read_values_.data())) return false;
        const std::int64_t section = section_of(read_wave_);
        const std::int64_t lanes = std::min<std::int64_t>(cfg_.rg, valid_rows(section) - std::int64_t(read_block_) * cfg_.rg);
        std::copy_n(read_values_.begin(), lanes, acc_ + output_position_);
        output_position_ += lanes;
        if (chunks_read_ == 0) stats_.first_output_cycle = now;
        ++chunks_read_;
        stats_.cycles = now + 1;
        if (++read_block_ == blocks_in_section(section)) {
            read_block_ = 0;
            ++read_wave_;
        }
        return true;
    }

    // The read side waits; if nothing is left anywhere that could still deliver its chunk (not in
    // the WRB, no group in the array, FIFOs and chain empty, no wave able to start), it is lost.
    void check_not_starved(std::int64_t now, bool blocked) const {
        const bool sequencing = current_wave_ >= 0 && now < wave_start_ + pb_.groups;
        const bool array_busy = now <= last_group_cycle_ + group_exit_cycle(cfg_.rows, cfg_.cols) + kScaleMergeStages;
        if (sequencing || array_busy || (next_wave_ < waves_ && !blocked)) return;
        if (wrb_.holds(read_wave_, read_block_)) return;  // written this cycle, readable next
        for (std::size_t b = 0; b < fifos_.size(); ++b)
            if (!fifos_[b].empty() || chain_[b]) return;
        throw FormatError(kSource, chunk_name(read_wave_, read_block_),
                          "never reached the WRB: the array, FIFOs and aggregator are empty and the read side "
                          "still waits for it at cycle " + std::to_string(now) + " (a chunk was lost)");
    }

    struct Lane {
        std::int64_t cycle = -1;
        std::int64_t token = 0;
        std::int64_t value = 0;
    };

    Problem pb_;
    SaConfig cfg_;
    int blocks_;
    std::int64_t waves_;
    SequencerHistory seq_;
    PeArray array_;
    WaveReorderBuffer wrb_;
    std::vector<std::deque<Chunk>> fifos_;
    std::vector<int> credits_;
    std::vector<std::optional<Chunk>> chain_;
    std::vector<Lane> lanes_;
    std::vector<std::int32_t> read_values_;
    std::int64_t next_wave_ = 0, current_wave_ = -1, wave_start_ = -(std::int64_t(1) << 40);
    std::int64_t last_group_cycle_ = -(std::int64_t(1) << 40);
    std::int64_t read_wave_ = 0;
    int read_block_ = 0;
    std::int64_t newest_written_ = -1;
    std::int64_t total_chunks_ = 0, chunks_read_ = 0, output_position_ = 0, limit_ = 0;
    std::int32_t* acc_ = nullptr;
    std::vector<std::int32_t> staging_;
    SaCycleStats stats_;
};

}  // namespace

SaCycleStats sa_cycle_gemm(const std::int8_t* w, const std::int8_t* xt, std::int64_t ldx, const std::int8_t* bias,
                           int bias_shift, std::int64_t n, std::int64_t m, std::int64_t p, const SaConfig& config,
                           std::int32_t* acc) {
    config.validate();
    check_gemm_fits_int32(m, bias_shift, "gemm");
    if (n <= 0 || p <= 0) throw FormatError(kSource, "gemm", "N and P must be positive");
    const std::int64_t groups = (m + config.cols - 1) / config.cols;
    const std::int64_t sections = (n + config.rows - 1) / config.rows;
    const Problem pb{w, xt, ldx, bias, bias_shift, n, m, p, groups, sections};
    return SystolicArrayModel(pb, config).run(acc);
}

}  // namespace aimcemu
