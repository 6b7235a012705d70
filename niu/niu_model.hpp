// The bit-exact NIU model: clean INT8 weights + an NIU program -> noisy weight codes, exactly as
// the RTL produces them (docs/niu_datapath.md).
//
// Three paths compute the same bits:
//   noisy_code()        one weight, the specification written out (the reference);
//   apply_layer()       the fast path: beats of 32 weights, one stream per beat lane, vectorised
//                       (AVX2 when the CPU has it, else scalar) and split over threads by jumping
//                       the streams ahead, so results never depend on threads or the CPU;
//   NiuBeatModel        the hardware's structure for a given lane count: L lanes, each stepping
//                       the generators of 32/L streams in turn (what the co-simulation mirrors).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "niu/niu_rng.hpp"
#include "niu/program.hpp"

namespace aimcemu {
class Hbm;
}

namespace aimcemu::niu {

inline constexpr int kBeatLanes = gen::NIU_BEAT_LANES;

// The six standard normals (Q3.12) of one weight: z1/z2/z3 of the g+ and g- devices.
struct WeightDraws {
    std::int32_t prog_plus, prog_minus, nu_plus, nu_minus, read_plus, read_minus;
};

inline WeightDraws draws_of(const WeightUniforms& u) {
    return {gaussian_chip(u.prog_plus), gaussian_chip(u.prog_minus), gaussian_chip(u.nu_plus),
            gaussian_chip(u.nu_minus),  gaussian_read(u.read_plus),  gaussian_read(u.read_minus)};
}

// One device (docs section 3): programmed, drifted and read conductance (Q1.14).
std::int32_t device_conductance(const NiuLayerProgram& layer, const CodeEntry& device, std::int32_t z_prog,
                                std::int32_t z_nu, std::int32_t z_read);
// One weight: both devices, back-conversion, sign, saturation to the layer's code width.
std::int8_t noisy_code(const NiuLayerProgram& layer, std::int8_t clean, const WeightDraws& z);

// Noisy codes of one layer; clean.size() and out.size() must equal layer.count.
// threads: 0 = the worker pool's size.  The result depends on neither threads nor the CPU.
void apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, std::span<std::int8_t> out,
                 int threads = 0);
std::vector<std::int8_t> apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads = 0);

// Kernels of the fast path; "avx2" only where the CPU has AVX2.
std::vector<std::string> available_kernels();
// apply_layer on one thread with a named kernel (tests and benchmarks compare them).
void apply_layer_kernel(const std::string& kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean,
                        std::span<std::int8_t> out);

// Runs a whole program against HBM: each layer reads COUNT clean bytes at SRC_ADDR and writes
// COUNT noisy bytes at DST_ADDR (bytes after the layer in its last beat are left untouched, as
// the RTL's WSTRB does).  Throws FormatError for a layer outside the memory.
void apply_program(const NiuProgram& program, Hbm& hbm, int threads = 0);

// Lane counts the RTL can be built for (divisors of 32); FormatError names `field` otherwise.
void check_lanes(int lanes, const std::string& source = "<memory>", const std::string& field = "lanes");

// The RTL's structure for L lanes: lane j owns the streams j, j + L, ..., each generator a ring of
// 32/L states; a group of L weights (one cycle of the RTL) uses the head of every ring, which then
// steps and moves to the tail.  Tail weights (i >= count) still step the generators and output 0.
class NiuBeatModel {
public:
    NiuBeatModel(const NiuLayerProgram& layer, int lanes);
    // Processes the next group of `lanes` clean codes and returns its noisy codes.
    std::vector<std::int8_t> next_group(std::span<const std::int8_t> clean);
    int lanes() const { return lanes_; }
    std::uint64_t groups_done() const { return group_; }

private:
    const NiuLayerProgram& layer_;
    int lanes_, slots_;
    std::vector<std::vector<RngState>> rings_;  // [lane * kGens + gen][slot], head at front
    std::uint64_t group_ = 0;
};

namespace detail {
// AVX2 kernel of apply_layer for beats [first_beat, last_beat) with the streams' states at
// first_beat; only called when the CPU has AVX2.  Declared here for niu_model.cpp.
void apply_beats_avx2(const NiuLayerProgram& layer, const std::int8_t* clean, std::int8_t* out, std::uint64_t first_beat,
                      std::uint64_t last_beat, RngState* states);
bool cpu_has_avx2();
}  // namespace detail

}  // namespace aimcemu::niu
