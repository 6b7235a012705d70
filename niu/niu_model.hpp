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
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/default_init_allocator.hpp"
#include "common/huge_pages.hpp"
#include "niu/niu_rng.hpp"
#include "niu/program.hpp"

namespace aimcemu {
class Hbm;
}

namespace aimcemu::niu {

inline constexpr int kBeatLanes = gen::NIU_BEAT_LANES;

// The vector kernels keep two 16-bit table fields in one 32-bit lane, low | high << kTableFieldBits,
// as the program words hold them (GT | SP, MU | SN, RT | RD; the 2^-f ROM's E | D likewise).
inline constexpr int kTableFieldBits = gen::NIU_TABLE_FIELD_BITS;
inline constexpr std::uint32_t kTableFieldMask = (1u << kTableFieldBits) - 1;
static_assert(2 * kTableFieldBits == 32, "two table fields fill a 32-bit vector lane");

// The six standard normals (Q3.12) of one weight: z1/z2/z3 of the g+ and g- devices.
struct WeightDraws {
    std::int32_t prog_plus, prog_minus, nu_plus, nu_minus, read_plus, read_minus;
};

inline WeightDraws draws_of(const WeightUniforms& u) {
    return {gaussian_chip(u.prog_plus), gaussian_chip(u.prog_minus), gaussian_chip(u.nu_plus),
            gaussian_chip(u.nu_minus),  gaussian_read(u.read_plus),  gaussian_read(u.read_minus)};
}

// The chip half of one device: programmed conductance gp (Q1.14, 0..G_MAX) and drift exponent
// |nu| (0..NU_MAX), fixed per chip (both come from the chip generators, keyed without the round).
struct ProgrammedDevice {
    std::int32_t gp, nu;
};
ProgrammedDevice program_device(const CodeEntry& device, std::int32_t z_prog, std::int32_t z_nu);
// The round half of one device: drift to t, read noise, clamp (Q1.14).
std::int32_t read_device(const NiuLayerProgram& layer, ProgrammedDevice programmed, std::int32_t z_read);
// One device (docs section 3): programmed, drifted and read conductance (Q1.14).
std::int32_t device_conductance(const NiuLayerProgram& layer, const CodeEntry& device, std::int32_t z_prog,
                                std::int32_t z_nu, std::int32_t z_read);
// Back-conversion of a pair's conductances, sign, saturation to the layer's code width.
std::int8_t code_of_pair(const NiuLayerProgram& layer, bool negative, std::int64_t g_plus, std::int64_t g_minus);
// One weight: both devices, back-conversion, sign, saturation to the layer's code width.
std::int8_t noisy_code(const NiuLayerProgram& layer, std::int8_t clean, const WeightDraws& z);

// Noisy codes of one layer; clean.size() and out.size() must equal layer.count.
// threads: 0 = the worker pool's size.  The result depends on neither threads nor the CPU.
void apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, std::span<std::int8_t> out,
                 int threads = 0);
std::vector<std::int8_t> apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads = 0);

// The chip half of a layer kept between rounds (docs/niu_datapath.md, "kept chip state").
// Programming noise and nu are drawn from the chip generators, whose keys hold no round, so a
// chip's programmed devices are the same in every round and at every t; computing them once and
// running only the round half (one generator instead of four, two normals instead of six) gives
// the same bits as the full model.  Layout: per 16 consecutive weights, four runs of sixteen
// uint16 -- gp of g+, nu of g+, gp of g-, nu of g- -- and bit NIU_G_BITS (15) of gp+ is the clean code's
// sign (gp <= G_MAX < 2^NIU_G_BITS).  The words cover whole beats (32 weights); those past the layer are 0.
// A round streams the words once, start to end: from 2 MiB on they sit on huge pages where the
// kernel gives them (common/huge_pages.hpp), one TLB entry per 256 K weights instead of 512.
// The allocator of a chip state's words: 2 MiB pages (HugePageAllocator), and resize() leaves new
// words unwritten, because the chip kernels write every word (run_chip_kernel): a value fill
// first would write the whole state twice.
template <class T>
using ChipWordAllocator = DefaultInitAllocator<T, HugePageAllocator>;

struct NiuChipState {
    static constexpr int kBlockWeights = 16;  // one AVX-512 vector of a field, two AVX2 vectors
    static constexpr int kBlockWords = 4 * kBlockWeights;
    // gp+ carries the clean code's sign in the bit above its NIU_G_BITS.
    static constexpr std::uint16_t kSignBit = std::uint16_t(1u << gen::NIU_G_BITS);
    static constexpr std::uint16_t kMagnitudeMask = std::uint16_t(kSignBit - 1);
    static_assert(gen::NIU_G_BITS < 16, "gp and the sign share one uint16 word");
    std::uint32_t count = 0;
    // What the chip half depends on besides the clean codes, copied from the layer program it
    // was computed from: the code table and the chip generators' start states.  Programs of one
    // (seed, chip, layer, noise model) at any round and t have the same.
    std::array<CodeEntry, kCodeTable> code{};
    std::array<RngState, kChipGens * kStreams> chip_streams{};
    std::vector<std::uint16_t, ChipWordAllocator<std::uint16_t>> words;
};
// Whether `chip` holds the chip half of `layer` (same count, code table and chip streams).
bool is_chip_state_of(const NiuChipState& chip, const NiuLayerProgram& layer);
// The chip half of `layer` for `clean` (clean.size() must equal layer.count).
NiuChipState chip_state(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads = 0);
// chip_state(layer, clean, threads) written into `chip`, whatever it held: its words' memory is
// reused (a chip's next state costs no allocation nor page faults), every word is written.
void recompute_chip_state(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, NiuChipState& chip,
                          int threads = 0);
// The round half: out = apply_layer(layer, clean, out) for the clean codes `chip` was computed
// from, bit for bit.  FormatError if `chip` belongs to another layer, chip or clean count.
void apply_kept(const NiuLayerProgram& layer, const NiuChipState& chip, std::span<std::int8_t> out, int threads = 0);
// One layer of a network-wide kept round: its program, its kept chip half and its output
// (out.size() must equal layer->count).
struct KeptLayer {
    const NiuLayerProgram* layer;
    const NiuChipState* chip;
    std::span<std::int8_t> out;
};
// The round half of several layers as one job: apply_kept of every layer, bit for bit, but the
// beats of all layers are split into one contiguous range per thread (a range may span layers),
// so the threads wake once per round, not once per layer, each streams its own part of the chip
// states, and small layers no longer run on one thread.  kernel "" = the best the CPU has, else
// a name of available_kernels().  FormatError (naming the layer) as apply_kept.
void apply_kept_network(std::span<const KeptLayer> layers, int threads = 0, const std::string& kernel = "");
// chip_state / apply_kept on one thread with a named kernel.
NiuChipState chip_state_kernel(const std::string& kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean);
void apply_kept_kernel(const std::string& kernel, const NiuLayerProgram& layer, const NiuChipState& chip,
                       std::span<std::int8_t> out);
void recompute_chip_state_kernel(const std::string& kernel, const NiuLayerProgram& layer,
                                 std::span<const std::int8_t> clean, NiuChipState& chip);

// Kernels of the fast path: "scalar"; "avx2" where the CPU has AVX2; "avx512" where it has
// AVX-512BW, which runs the round half of a kept chip state with 16-weight vectors and
// table permutes (niu_model_avx512.cpp) and the full model and the chip half as "avx2" does.
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
// The two halves, AVX2: chip half of beats [first, last) with the chip generators' states at
// `first` (states points at generator 0; only the chip generators are read and advanced), words
// of those beats written; round half with the read generator's 32 states (`read_states`).
void chip_beats_avx2(const NiuLayerProgram& layer, const std::int8_t* clean, std::uint16_t* words, std::uint64_t first_beat,
                     std::uint64_t last_beat, RngState* states);
void kept_beats_avx2(const NiuLayerProgram& layer, const std::uint16_t* words, std::int8_t* out, std::uint64_t first_beat,
                     std::uint64_t last_beat, RngState* read_states);
// The round half in AVX-512BW (niu_model_avx512.cpp); only called when the CPU has it.
void kept_beats_avx512(const NiuLayerProgram& layer, const std::uint16_t* words, std::int8_t* out, std::uint64_t first_beat,
                       std::uint64_t last_beat, RngState* read_states);
bool cpu_has_avx2();
bool cpu_has_avx512bw();
}  // namespace detail

}  // namespace aimcemu::niu
