// The bit-exact NIU model: clean INT8 weights + an NIU program -> noisy weight codes, exactly as
// the RTL produces them (docs/niu_datapath.md).
//
// Two paths compute the same bits:
//   apply_layer()       the fast path: threads over weight ranges, each range advancing the
//                       pcg32 streams to its first weight, so results never depend on threads;
//   NiuBeatModel        the hardware's structure: one 32-lane beat at a time, RNG units with
//                       interleaved sub-streams seeded from the program's state tables (what the
//                       co-simulation steps against the RTL).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "niu/niu_rng.hpp"
#include "niu/program.hpp"

namespace aimcemu {
class Hbm;
}

namespace aimcemu::niu {

inline constexpr int kLanes = gen::NIU_LANES;

// The six standard normals (Q3.12) of one weight: z1/z2/z3 of the g+ and g- devices.
struct WeightDraws {
    std::int32_t prog_plus, prog_minus, nu_plus, nu_minus, read_plus, read_minus;
};

// One device through stages P, N, D, R; returns the read conductance (Q1.16).
std::int64_t device_conductance(const NiuLayerProgram& layer, int code_index, std::int32_t z_prog, std::int32_t z_nu,
                                std::int32_t z_read);
// One weight: both devices, back-conversion, sign, saturation to the layer's code width.
std::int8_t noisy_code(const NiuLayerProgram& layer, std::int8_t clean, const WeightDraws& z);

// Noisy codes of one layer; clean.size() and out.size() must equal layer.count.
// threads: 0 = hardware concurrency.  The result does not depend on it.
void apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, std::span<std::int8_t> out,
                 int threads = 0);
std::vector<std::int8_t> apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads = 0);

// Runs a whole program against HBM: each layer reads COUNT clean bytes at SRC_ADDR and writes
// COUNT noisy bytes at DST_ADDR (bytes after the layer in its last beat are left untouched, as
// the RTL's WSTRB does).  Throws FormatError for a layer outside the memory.
void apply_program(const NiuProgram& program, Hbm& hbm, int threads = 0);

// Beat-level model of one layer (section 4.2): feed beats in order; tail lanes output 0.
class NiuBeatModel {
public:
    explicit NiuBeatModel(const NiuLayerProgram& layer);
    // Processes the next beat (32 clean codes) and returns its 32 output codes.
    std::array<std::int8_t, kLanes> next_beat(const std::array<std::int8_t, kLanes>& clean);
    std::uint64_t beats_done() const { return beat_; }

private:
    const NiuLayerProgram& layer_;
    SubStreamBank chip_, read_;
    std::uint64_t beat_ = 0;
};

}  // namespace aimcemu::niu
