// Drives the Verilated NIU (rtl/niu.sv): clock, reset, the register port, and the AXI memory.
#pragma once

#include <verilated.h>

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "Vniu.h"
#include "axi_memory.hpp"

namespace aimcemu::cosim {

// Register map of rtl/niu_pkg.sv.
enum NiuReg : std::uint8_t {
    kRegCtrl = 0x00,
    kRegStatus = 0x04,
    kRegProgAddr = 0x08,
    kRegProgAddrHi = 0x0C,
    kRegMaxBurst = 0x10,
    kRegLayersDone = 0x14,
    kRegStreamCycles = 0x18,
    kRegStreamBeats = 0x1C,
};

struct NiuStatus {
    bool busy = false;
    bool done = false;
    unsigned error = 0;  // niu_pkg::Err*
};

class NiuHarness {
public:
    // x_seed seeds Verilator's random initial values (--x-initial unique) so that no test relies
    // on a register the RTL forgot to reset.
    NiuHarness(std::size_t memory_bytes, std::uint64_t bus_seed, BackPressure bp, std::uint64_t x_seed)
        : context_(std::make_unique<VerilatedContext>()), memory_(memory_bytes, bus_seed, bp) {
        context_->randReset(2);
        context_->randSeed(static_cast<int>(x_seed & 0x7fffffff));
        top_ = std::make_unique<Vniu>(context_.get());
        top_->reg_valid_i = 0;
        top_->reg_write_i = 0;
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

    // One clock cycle with the slave outputs idle and unobserved (reset).
    void clock() {
        memory_.drive(*top_);
        top_->clk_i = 0;
        top_->eval();
        top_->clk_i = 1;
        top_->eval();
    }

    void write_reg(std::uint8_t addr, std::uint32_t value) {
        top_->reg_valid_i = 1;
        top_->reg_write_i = 1;
        top_->reg_addr_i = addr;
        top_->reg_wdata_i = value;
        tick();
        top_->reg_valid_i = 0;
        top_->reg_write_i = 0;
    }

    std::uint32_t read_reg(std::uint8_t addr) {
        top_->reg_addr_i = addr;
        top_->clk_i = 0;
        top_->eval();
        return top_->reg_rdata_o;
    }

    NiuStatus status() {
        const std::uint32_t s = read_reg(kRegStatus);
        return {(s & 1u) != 0, (s & 2u) != 0, (s >> 8) & 0xFu};
    }

    // Starts the program at prog_addr and clocks until STATUS.done; throws after max_cycles.
    NiuStatus run_program(std::uint64_t prog_addr, unsigned max_burst_len, std::uint64_t max_cycles) {
        write_reg(kRegProgAddr, static_cast<std::uint32_t>(prog_addr));
        write_reg(kRegProgAddrHi, static_cast<std::uint32_t>(prog_addr >> 32));
        write_reg(kRegMaxBurst, max_burst_len);
        write_reg(kRegCtrl, 1);
        const std::uint64_t deadline = cycles_ + max_cycles;
        while (!status().done) {
            if (cycles_ > deadline) throw std::runtime_error("NIU did not finish in " + std::to_string(max_cycles) + " cycles");
            tick();
        }
        NiuStatus s = status();
        write_reg(kRegStatus, 2);  // clear done
        return s;
    }

    // Little-endian byte image helpers.
    void store_words(std::uint64_t addr, std::span<const std::uint32_t> words) {
        auto& m = memory_.bytes();
        for (std::size_t i = 0; i < words.size(); ++i)
            for (int b = 0; b < 4; ++b) m.at(addr + 4 * i + b) = static_cast<std::uint8_t>(words[i] >> (8 * b));
    }
    void store_bytes(std::uint64_t addr, std::span<const std::int8_t> bytes) {
        auto& m = memory_.bytes();
        for (std::size_t i = 0; i < bytes.size(); ++i) m.at(addr + i) = static_cast<std::uint8_t>(bytes[i]);
    }

private:
    std::unique_ptr<VerilatedContext> context_;
    std::unique_ptr<Vniu> top_;
    AxiMemory memory_;
    std::uint64_t cycles_ = 0;
};

}  // namespace aimcemu::cosim
