// AXI4 slave memory model: request checks and the write data path (see axi_memory.hpp).
#include "axi_memory.hpp"

#include <sstream>

namespace aimcemu::cosim {

void AxiMemory::check_request(const char* channel, uint64_t addr, unsigned len, unsigned size, unsigned burst) {
    const uint64_t bytes = (uint64_t{len} + 1) * kBeatBytes;
    std::ostringstream where;
    where << channel << " addr=0x" << std::hex << addr << std::dec << " len=" << len << ": ";
    if (size != 5) fail(where.str() + "AxSIZE is not a full 32-byte beat");
    if (burst != 1) fail(where.str() + "burst type is not INCR");
    if (addr % kBeatBytes != 0) fail(where.str() + "address not beat aligned");
    if ((addr % kPageBytes) + bytes > kPageBytes) fail(where.str() + "burst crosses a 4 KiB boundary");
    const bool in_window = addr >= window_begin_ && addr - window_begin_ + bytes <= window_.size();
    if (addr + bytes > mem_.size() && !in_window) fail(where.str() + "burst runs past the end of memory");
}

void AxiMemory::read_beat(uint64_t addr, uint32_t* words) const {
    for (int i = 0; i < kBeatBytes / 4; ++i) {
        uint32_t word = 0;
        for (int b = 0; b < 4; ++b) {
            const uint64_t a = addr + 4 * i + b;
            const uint8_t* at = byte_at(a);
            const uint32_t byte = at ? *at : 0xEE;  // out of range was reported at AR
            word |= byte << (8 * b);
        }
        words[i] = word;
    }
}

// Matches W beats to their AW bursts in order and writes the strobed bytes.
void AxiMemory::retire_writes() {
    while (!writes_.empty() && !w_beats_.empty()) {
        Burst& burst = writes_.front();
        const WBeat& beat = w_beats_.front();
        const uint64_t base = burst.addr + uint64_t{burst.done} * kBeatBytes;
        for (int b = 0; b < kBeatBytes; ++b)
            if (uint8_t* at = byte_at(base + b); (beat.strb >> b) & 1u && at) *at = beat.data[b];
        const bool last_expected = burst.done + 1 == burst.beats;
        if (beat.last != last_expected) {
            std::ostringstream what;
            what << "WLAST=" << beat.last << " on beat " << burst.done << " of a " << burst.beats << "-beat burst";
            fail(what.str());
        }
        w_beats_.pop_front();
        if (++burst.done == burst.beats) {
            b_resps_.push_back({in_error_region(burst.addr, burst.beats) ? 2u : 0u, now_ + 1 + write_latency_});
            writes_.pop_front();
            ++b_pending_;
        }
    }
}

}  // namespace aimcemu::cosim
