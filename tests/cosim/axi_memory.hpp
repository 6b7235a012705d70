// A cycle-level AXI4 slave memory for co-simulating the NIU RTL, with random back-pressure.
//
// The model is deliberately unkind: every ready and valid it drives toggles at random, several
// read bursts may be outstanding, W beats may arrive before or after their AW, and B responses come
// late.  It also checks the master's side of the protocol (payload stable while VALID waits for
// READY, INCR bursts of full beats that never cross 4 KiB, WLAST where AWLEN says, addresses in
// range) and records every violation in errors(), so a test can assert the list is empty.
//
// Use per clock cycle:  drive(top); clk=0, eval; sample(top); clk=1, eval.
// drive() applies the slave outputs chosen at the previous edge; sample() observes the handshakes
// of this edge and chooses the next outputs.  Port names follow rtl/niu.sv (axi_*).
#pragma once

#include <pcg_random.hpp>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iterator>
#include <string>
#include <vector>

namespace aimcemu::cosim {

// Probabilities (0..1) that the slave is willing in a given cycle; 1.0 everywhere is a perfect bus.
struct BackPressure {
    double ar_ready = 1.0;
    double r_valid = 1.0;
    double aw_ready = 1.0;
    double w_ready = 1.0;
    double b_valid = 1.0;
};

class AxiMemory {
public:
    static constexpr int kBeatBytes = 32;
    static constexpr uint64_t kPageBytes = 4096;

    AxiMemory(std::size_t bytes, uint64_t seed, BackPressure bp)
        : mem_(bytes, 0), rng_(seed, 0x5eed), bp_(bp) {}

    std::vector<uint8_t>& bytes() { return mem_; }
    // A second region of `bytes` at [begin, begin + bytes), beside the one from address 0: for
    // programs at the top of the address space.
    void add_window(uint64_t begin, std::size_t bytes) {
        window_begin_ = begin;
        window_.assign(bytes, 0);
    }
    // The byte at `addr` in either region; nullptr outside both.
    uint8_t* byte_at(uint64_t addr) {
        if (addr < mem_.size()) return &mem_[addr];
        if (addr >= window_begin_ && addr - window_begin_ < window_.size()) return &window_[addr - window_begin_];
        return nullptr;
    }
    const uint8_t* byte_at(uint64_t addr) const { return const_cast<AxiMemory*>(this)->byte_at(addr); }
    // Reads and writes touching [begin, end) answer SLVERR (RRESP/BRESP = 2), to test that the
    // master reports bus errors.
    void set_error_region(uint64_t begin, uint64_t end) {
        error_begin_ = begin;
        error_end_ = end;
    }
    // Latency in cycles beyond the zero-latency memory, which may answer in the cycle after a
    // handshake: a read burst's first R beat comes no earlier than read_cycles + 1 cycles after
    // its AR handshake, a write burst's B no earlier than write_response_cycles + 1 after its last
    // W beat (0 and 0, the default: as soon as the back-pressure allows).  Bursts stay pipelined:
    // any number may be outstanding, each waits only for its own latency.
    void set_latency(unsigned read_cycles, unsigned write_response_cycles) {
        read_latency_ = read_cycles;
        write_latency_ = write_response_cycles;
    }
    // Cycles sampled so far, and the cycles of the first AR and the last B handshake.
    uint64_t now() const { return now_; }
    uint64_t first_ar_cycle() const { return first_ar_cycle_; }
    uint64_t last_b_cycle() const { return last_b_cycle_; }
    const std::vector<std::string>& errors() const { return errors_; }
    uint64_t read_bursts() const { return read_bursts_; }
    uint64_t write_bursts() const { return write_bursts_; }
    std::size_t max_reads_outstanding() const { return max_reads_outstanding_; }
    // Whether a read burst is part-way through its R beats (at least one given, not the last).
    bool read_burst_open() const { return !reads_.empty() && reads_.front().done > 0; }
    // Whether a write burst is part-way through its W beats (at least one taken, WLAST not yet).
    bool write_burst_open() const { return w_open_; }
    // Whether the master offered a W beat in the last cycle that was not taken (WVALID, no WREADY).
    bool write_beat_waiting() const { return w_held_; }

    // A reset of the bus, both sides at once (AXI A3.1.2: the interface is reset as a whole): the
    // bursts in flight, W beats not yet written and responses owed are dropped, and the slave
    // drives every VALID and READY low.  The contents, the burst counters and the violations seen
    // so far stay.
    void reset() {
        reads_.clear();
        writes_.clear();
        w_beats_.clear();
        b_resps_.clear();
        b_pending_ = 0;
        ar_held_ = {};
        aw_held_ = {};
        w_held_ = false;
        w_open_ = false;
        ar_ready_ = aw_ready_ = w_ready_ = false;
        r_valid_ = r_last_ = b_valid_ = false;
        r_resp_ = b_resp_ = 0;
    }

    template <class Top>
    void drive(Top& top) const;
    template <class Top>
    void sample(const Top& top);

private:
    struct Burst {
        uint64_t addr = 0;
        unsigned beats = 0;
        unsigned done = 0;
        bool error = false;
        uint64_t ready_at = 0;  // a read burst's first R beat may come from this cycle on
    };
    struct Response {
        unsigned resp = 0;
        uint64_t ready_at = 0;  // BVALID may rise from this cycle on
    };
    struct WBeat {
        uint8_t data[kBeatBytes] = {};
        uint32_t strb = 0;
        bool last = false;
    };
    // A master payload seen with VALID high and READY low must be repeated next cycle.
    struct Held {
        bool pending = false;
        uint64_t addr = 0;
        unsigned len = 0;
    };

    template <class Top>
    static WBeat w_payload(const Top& top) {
        WBeat beat;
        for (int i = 0; i < kBeatBytes / 4; ++i)
            for (int b = 0; b < 4; ++b) beat.data[4 * i + b] = static_cast<uint8_t>(top.axi_w_data_o[i] >> (8 * b));
        beat.strb = top.axi_w_strb_o;
        beat.last = top.axi_w_last_o;
        return beat;
    }
    static bool same_payload(const WBeat& a, const WBeat& b) {
        return a.strb == b.strb && a.last == b.last && std::equal(std::begin(a.data), std::end(a.data), std::begin(b.data));
    }
    bool chance(double p) { return p >= 1.0 || (static_cast<double>(rng_()) < p * 4294967296.0); }
    void fail(const std::string& what) {
        if (errors_.size() < 20) errors_.push_back(what);
    }
    void check_request(const char* channel, uint64_t addr, unsigned len, unsigned size, unsigned burst);
    void read_beat(uint64_t addr, uint32_t* words) const;
    void retire_writes();

    std::vector<uint8_t> mem_;
    std::vector<uint8_t> window_;  // add_window's region, at window_begin_
    uint64_t window_begin_ = 0;
    pcg32 rng_;
    BackPressure bp_;
    std::vector<std::string> errors_;

    // Slave outputs for the current cycle.
    bool ar_ready_ = false, aw_ready_ = false, w_ready_ = false;
    bool r_valid_ = false, r_last_ = false, b_valid_ = false;
    uint32_t r_data_[kBeatBytes / 4] = {};
    unsigned r_resp_ = 0, b_resp_ = 0;
    uint64_t error_begin_ = 0, error_end_ = 0;
    std::deque<Response> b_resps_;  // responses of completed write bursts, oldest first
    unsigned read_latency_ = 0, write_latency_ = 0;
    uint64_t now_ = 0;  // cycles sampled
    uint64_t first_ar_cycle_ = 0, last_b_cycle_ = 0;
    bool in_error_region(uint64_t addr, unsigned beats) const {
        return addr < error_end_ && addr + uint64_t{beats} * kBeatBytes > error_begin_;
    }

    std::deque<Burst> reads_;    // accepted AR bursts, oldest first
    std::deque<Burst> writes_;   // accepted AW bursts waiting for W data
    std::deque<WBeat> w_beats_;  // W beats not yet matched to an AW
    unsigned b_pending_ = 0;     // completed write bursts owed a B response
    Held ar_held_, aw_held_;
    bool w_held_ = false;
    bool w_open_ = false;  // W beats of a burst taken, its WLAST not yet
    WBeat w_held_beat_;  // the W payload offered while w_held_
    uint64_t read_bursts_ = 0, write_bursts_ = 0;
    std::size_t max_reads_outstanding_ = 0;
};

template <class Top>
void AxiMemory::drive(Top& top) const {
    top.axi_ar_ready_i = ar_ready_;
    top.axi_aw_ready_i = aw_ready_;
    top.axi_w_ready_i = w_ready_;
    top.axi_r_valid_i = r_valid_;
    top.axi_r_last_i = r_last_;
    top.axi_r_resp_i = r_resp_;
    for (int i = 0; i < kBeatBytes / 4; ++i) top.axi_r_data_i[i] = r_data_[i];
    top.axi_b_valid_i = b_valid_;
    top.axi_b_resp_i = b_resp_;
}

template <class Top>
void AxiMemory::sample(const Top& top) {
    // --- Protocol: a payload offered without READY must stay until accepted.
    if (ar_held_.pending && (!top.axi_ar_valid_o || top.axi_ar_addr_o != ar_held_.addr || top.axi_ar_len_o != ar_held_.len))
        fail("AR payload changed or dropped before ARREADY: valid=" + std::to_string(top.axi_ar_valid_o) + " addr=" +
             std::to_string(top.axi_ar_addr_o) + " (was " + std::to_string(ar_held_.addr) + ") len=" +
             std::to_string(top.axi_ar_len_o) + " (was " + std::to_string(ar_held_.len) + ")");
    if (aw_held_.pending && (!top.axi_aw_valid_o || top.axi_aw_addr_o != aw_held_.addr || top.axi_aw_len_o != aw_held_.len))
        fail("AW payload changed or dropped before AWREADY");
    if (w_held_ && !top.axi_w_valid_o) fail("WVALID dropped before WREADY");
    const WBeat w_offered = w_payload(top);
    if (w_held_ && top.axi_w_valid_o && !same_payload(w_offered, w_held_beat_))
        fail("W payload changed before WREADY: WLAST " + std::to_string(w_held_beat_.last) + " -> " +
             std::to_string(w_offered.last) + ", WSTRB " + std::to_string(w_held_beat_.strb) + " -> " +
             std::to_string(w_offered.strb));

    const bool ar_fire = top.axi_ar_valid_o && ar_ready_;
    const bool r_fire = r_valid_ && top.axi_r_ready_o;
    const bool aw_fire = top.axi_aw_valid_o && aw_ready_;
    const bool w_fire = top.axi_w_valid_o && w_ready_;
    const bool b_fire = b_valid_ && top.axi_b_ready_o;

    ar_held_ = {top.axi_ar_valid_o && !ar_ready_, top.axi_ar_addr_o, top.axi_ar_len_o};
    aw_held_ = {top.axi_aw_valid_o && !aw_ready_, top.axi_aw_addr_o, top.axi_aw_len_o};
    w_held_ = top.axi_w_valid_o && !w_ready_;
    w_held_beat_ = w_offered;

    if (ar_fire) {
        check_request("AR", top.axi_ar_addr_o, top.axi_ar_len_o, top.axi_ar_size_o, top.axi_ar_burst_o);
        if (read_bursts_ == 0) first_ar_cycle_ = now_;
        reads_.push_back({top.axi_ar_addr_o, top.axi_ar_len_o + 1u, 0, false, now_ + 1 + read_latency_});
        ++read_bursts_;
        if (reads_.size() > max_reads_outstanding_) max_reads_outstanding_ = reads_.size();
    }
    if (r_fire) {
        Burst& head = reads_.front();
        if (++head.done == head.beats) reads_.pop_front();
    }
    if (aw_fire) {
        check_request("AW", top.axi_aw_addr_o, top.axi_aw_len_o, top.axi_aw_size_o, top.axi_aw_burst_o);
        writes_.push_back({top.axi_aw_addr_o, top.axi_aw_len_o + 1u, 0});
        ++write_bursts_;
    }
    if (w_fire) {
        w_beats_.push_back(w_offered);
        w_open_ = !w_offered.last;
    }
    if (b_fire) {
        --b_pending_;
        b_resps_.pop_front();
        last_b_cycle_ = now_;
    }
    retire_writes();

    // --- Choose the slave outputs for the next cycle.
    ar_ready_ = chance(bp_.ar_ready);
    aw_ready_ = chance(bp_.aw_ready);
    w_ready_ = chance(bp_.w_ready);
    if (!r_valid_ || r_fire) {  // RVALID, once high, holds until RREADY
        r_valid_ = !reads_.empty() && reads_.front().ready_at <= now_ + 1 && chance(bp_.r_valid);
        if (r_valid_) {
            const Burst& head = reads_.front();
            read_beat(head.addr + uint64_t{head.done} * kBeatBytes, r_data_);
            r_last_ = head.done + 1 == head.beats;
            r_resp_ = in_error_region(head.addr, head.beats) ? 2u : 0u;
        }
    }
    if (!b_valid_ || b_fire) {
        b_valid_ = b_pending_ > 0 && b_resps_.front().ready_at <= now_ + 1 && chance(bp_.b_valid);
        if (b_valid_) b_resp_ = b_resps_.front().resp;
    }
    ++now_;
}

}  // namespace aimcemu::cosim
