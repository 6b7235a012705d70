// Drives a Verilated NIU (rtl/niu.sv, any lane count): clock, reset, an AXI4-Lite master for the
// control registers (with its own random handshake delays), and the AXI4 memory.
#pragma once

#include <verilated.h>

#include <pcg_random.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "axi_memory.hpp"
#include "niu_constants.hpp"

namespace aimcemu::cosim {

namespace gen = aimcemu::niu::gen;

struct NiuStatus {
    bool busy = false;
    bool done = false;
    unsigned error = 0;  // NIU_ERR_*
};

// Register access outcome: data and the AXI4-Lite response (0 OKAY, 2 SLVERR).
struct RegAccess {
    std::uint32_t data = 0;
    unsigned resp = 0;
};

// The flip-flops' values before the first reset.  Random (Verilator's --x-initial unique, seeded
// by x_seed) shows a register the RTL forgot to reset at once; Zero is what an FPGA's
// configuration gives every flip-flop (INIT = 0), where a register missing from the reset passes
// power-up and misbehaves only after a later reset in the middle of a run.
enum class InitialValues { Random, Zero };

template <class Top>
class NiuHarness {
public:
    // x_seed seeds Verilator's random initial values (--x-initial unique) so that no test relies
    // on a register the RTL forgot to reset.  lite_delay: probability that the AXI4-Lite master
    // delays VALID (before offering it) or holds back READY in a cycle (0 = an ideal control bus).
    NiuHarness(std::size_t memory_bytes, std::uint64_t bus_seed, BackPressure bp, std::uint64_t x_seed,
               double lite_delay = 0.0, InitialValues initial = InitialValues::Random)
        : context_(std::make_unique<VerilatedContext>()), memory_(memory_bytes, bus_seed, bp),
          rng_(bus_seed, 0x11fe), lite_delay_(lite_delay) {
        context_->randReset(initial == InitialValues::Zero ? 0 : 2);
        context_->randSeed(static_cast<int>(x_seed & 0x7fffffff));
        top_ = std::make_unique<Top>(context_.get());
        idle_lite();
        // Reset with the bus idle: outputs are random until the first clock edge in reset, so the
        // memory model (and its protocol checks) only starts once reset is released.
        top_->rst_ni = 0;
        for (int i = 0; i < 4; ++i) clock();
        top_->rst_ni = 1;
        clock();
    }
    ~NiuHarness() { top_->final(); }

    AxiMemory& memory() { return memory_; }
    std::uint64_t cycles() const { return cycles_; }

    // One clock cycle with the AXI memory attached.
    void tick() {
        memory_.drive(*top_);
        top_->clk_i = 0;
        top_->eval();
        memory_.sample(*top_);
        top_->clk_i = 1;
        top_->eval();
        ++cycles_;
    }

    // Asserts rst_ni for `cycles` clocks in the middle of whatever runs, as a system reset does:
    // the AXI memory's side of the bus is reset with it (AxiMemory::reset; its contents stay) and
    // the AXI4-Lite master goes idle.  Returns the cycles in reset in which the NIU drove a VALID
    // of its own high: ARVALID, AWVALID, WVALID (AXI A3.1.2 wants them low throughout reset) or
    // the AXI4-Lite slave's BVALID, RVALID.
    unsigned reset(int cycles) {
        idle_lite();
        memory_.reset();
        top_->rst_ni = 0;
        unsigned valid_in_reset = 0;
        for (int i = 0; i < cycles; ++i) {
            settle();
            valid_in_reset += top_->axi_ar_valid_o || top_->axi_aw_valid_o || top_->axi_w_valid_o ||
                              top_->s_axil_b_valid_o || top_->s_axil_r_valid_o;
            top_->clk_i = 1;
            top_->eval();
            ++cycles_;
        }
        top_->rst_ni = 1;
        return valid_in_reset;
    }

    // One clock cycle with the slave outputs idle and unobserved (reset).
    void clock() {
        memory_.drive(*top_);
        top_->clk_i = 0;
        top_->eval();
        top_->clk_i = 1;
        top_->eval();
    }

    // AXI4-Lite write: AW and W offered (each after its own random delay), then B accepted.  Once
    // offered, VALID stays high until READY (AXI A3.2.1: a master may not withdraw it); only
    // READY of B and R may come and go.
    unsigned write_reg(std::uint32_t addr, std::uint32_t value, std::uint32_t strb = 0xF) {
        bool aw_done = false, w_done = false;
        bool aw_offered = false, w_offered = false;
        std::uint64_t guard = 0;
        while (!aw_done || !w_done) {
            aw_offered = !aw_done && (aw_offered || !hold());
            w_offered = !w_done && (w_offered || !hold());
            top_->s_axil_aw_valid_i = aw_offered;
            top_->s_axil_aw_addr_i = addr;
            top_->s_axil_aw_prot_i = 0;
            top_->s_axil_w_valid_i = w_offered;
            top_->s_axil_w_data_i = value;
            top_->s_axil_w_strb_i = strb;
            top_->s_axil_b_ready_i = 0;
            settle();
            const bool aw_fire = top_->s_axil_aw_valid_i && top_->s_axil_aw_ready_o;
            const bool w_fire = top_->s_axil_w_valid_i && top_->s_axil_w_ready_o;
            tick();
            aw_done |= aw_fire;
            w_done |= w_fire;
            check_guard(++guard, "AXI4-Lite write address/data");
        }
        idle_lite();
        return wait_b(guard);
    }

    // AXI4-Lite read: AR offered, then R accepted.
    RegAccess read_reg(std::uint32_t addr) {
        std::uint64_t guard = 0;
        bool ar_offered = false;
        for (bool done = false; !done;) {
            ar_offered = ar_offered || !hold();
            top_->s_axil_ar_valid_i = ar_offered;
            top_->s_axil_ar_addr_i = addr;
            top_->s_axil_ar_prot_i = 0;
            settle();
            done = top_->s_axil_ar_valid_i && top_->s_axil_ar_ready_o;
            tick();
            check_guard(++guard, "AXI4-Lite read address");
        }
        idle_lite();
        for (;;) {
            top_->s_axil_r_ready_i = !hold();
            settle();
            if (top_->s_axil_r_valid_o && top_->s_axil_r_ready_i) {
                const RegAccess r{top_->s_axil_r_data_o, unsigned(top_->s_axil_r_resp_o)};
                tick();
                idle_lite();
                return r;
            }
            tick();
            check_guard(++guard, "AXI4-Lite read data");
        }
    }

    NiuStatus status() {
        const std::uint32_t s = read_reg(gen::NIU_REG_STATUS).data;
        return {((s >> gen::NIU_STATUS_BUSY_BIT) & 1u) != 0, ((s >> gen::NIU_STATUS_DONE_BIT) & 1u) != 0,
                (s >> gen::NIU_STATUS_ERROR_LSB) & ((1u << gen::NIU_STATUS_ERROR_BITS) - 1)};
    }

    // Starts the program at prog_addr and clocks until STATUS.done; throws after max_cycles.
    NiuStatus run_program(std::uint64_t prog_addr, unsigned max_burst_len, std::uint64_t max_cycles) {
        start_program(prog_addr, max_burst_len);
        return wait_done(max_cycles);
    }

    // Sets the program address and burst limit, then writes CTRL.start; returns at once.
    void start_program(std::uint64_t prog_addr, unsigned max_burst_len) {
        write_reg(gen::NIU_REG_PROG_ADDR_LO, static_cast<std::uint32_t>(prog_addr));
        write_reg(gen::NIU_REG_PROG_ADDR_HI, static_cast<std::uint32_t>(prog_addr >> 32));
        write_reg(gen::NIU_REG_MAX_BURST, max_burst_len);
        write_reg(gen::NIU_REG_CTRL, 1);
    }

    // Clocks until STATUS.done, then clears done; throws after max_cycles.
    NiuStatus wait_done(std::uint64_t max_cycles) {
        const std::uint64_t deadline = cycles_ + max_cycles;
        // Poll STATUS every 64 cycles (a register read costs cycles of its own).
        for (;;) {
            const NiuStatus s = status();
            if (s.done) break;
            if (cycles_ > deadline) throw std::runtime_error("NIU did not finish in " + std::to_string(max_cycles) + " cycles");
            for (int i = 0; i < 64; ++i) tick();
        }
        const NiuStatus s = status();
        write_reg(gen::NIU_REG_STATUS, 1u << gen::NIU_STATUS_DONE_BIT);  // clear done
        return s;
    }

    // Little-endian byte image helpers.
    void store_words(std::uint64_t addr, std::span<const std::uint32_t> words) {
        for (std::size_t i = 0; i < words.size(); ++i)
            for (int b = 0; b < 4; ++b) {
                std::uint8_t* at = memory_.byte_at(addr + 4 * i + b);
                if (at == nullptr) throw std::out_of_range("store_words: address outside the memory model");
                *at = static_cast<std::uint8_t>(words[i] >> (8 * b));
            }
    }
    void store_bytes(std::uint64_t addr, std::span<const std::int8_t> bytes) {
        auto& m = memory_.bytes();
        for (std::size_t i = 0; i < bytes.size(); ++i) m.at(addr + i) = static_cast<std::uint8_t>(bytes[i]);
    }

private:
    bool hold() { return lite_delay_ > 0.0 && double(rng_()) < lite_delay_ * 4294967296.0; }

    // Evaluates the combinational outputs for the inputs just set (clock low).
    void settle() {
        memory_.drive(*top_);
        top_->clk_i = 0;
        top_->eval();
    }

    void idle_lite() {
        top_->s_axil_aw_valid_i = 0;
        top_->s_axil_w_valid_i = 0;
        top_->s_axil_b_ready_i = 0;
        top_->s_axil_ar_valid_i = 0;
        top_->s_axil_r_ready_i = 0;
        top_->s_axil_aw_addr_i = 0;
        top_->s_axil_aw_prot_i = 0;
        top_->s_axil_w_data_i = 0;
        top_->s_axil_w_strb_i = 0;
        top_->s_axil_ar_addr_i = 0;
        top_->s_axil_ar_prot_i = 0;
    }

    unsigned wait_b(std::uint64_t guard) {
        for (;;) {
            top_->s_axil_b_ready_i = !hold();
            settle();
            if (top_->s_axil_b_valid_o && top_->s_axil_b_ready_i) {
                const unsigned resp = top_->s_axil_b_resp_o;
                tick();
                idle_lite();
                return resp;
            }
            tick();
            check_guard(++guard, "AXI4-Lite write response");
        }
    }

    static void check_guard(std::uint64_t n, const char* what) {
        if (n > 10000) throw std::runtime_error(std::string(what) + ": no handshake in 10000 cycles");
    }

    std::unique_ptr<VerilatedContext> context_;
    std::unique_ptr<Top> top_;
    AxiMemory memory_;
    pcg32 rng_;
    double lite_delay_;
    std::uint64_t cycles_ = 0;
};

}  // namespace aimcemu::cosim
