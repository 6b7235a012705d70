// Bit-exact NIU datapath (docs/niu_datapath.md section 3) and its drivers.
#include "niu/niu_model.hpp"

#include <algorithm>
#include <bit>
#include <thread>

#include "common/errors.hpp"
#include "common/worker_pool.hpp"
#include "pu_model/hbm.hpp"

namespace aimcemu::niu {
namespace {

using namespace gen;

// 2^-(x / 2^11) in Q1.15 before the integer shift: E[k] - rshr(D[k] * f, 6).
std::int64_t exp2_fraction(std::int64_t x) {
    const std::int64_t k = (x >> NIU_EXP_FRAC_BITS) & ((1 << NIU_EXP_SEG_BITS) - 1);
    const std::int64_t f = x & ((1 << NIU_EXP_FRAC_BITS) - 1);
    return NIU_EXP_VALUE[std::size_t(k)] - rshr(NIU_EXP_SLOPE[std::size_t(k)] * f, NIU_EXP_FRAC_BITS);
}

// Relative read sigma (Q2.14) at the programmed conductance, log-segment index.
std::int64_t read_sigma(const NiuLayerProgram& l, std::int64_t gp) {
    const auto g = std::uint32_t(gp < 1 ? 1 : gp);
    const int octave = 31 - std::countl_zero(g);                      // 0..14
    const std::uint32_t n = g << (NIU_G_BITS - 1 - octave);            // leading one at bit 14
    const int seg_shift = NIU_G_BITS - 1 - NIU_RT_SEG_BITS;            // 11
    const int j = (octave << NIU_RT_SEG_BITS) + int((n >> seg_shift) & ((1u << NIU_RT_SEG_BITS) - 1));
    const std::int64_t fr = (n >> (seg_shift - NIU_RT_FRAC_BITS)) & ((1u << NIU_RT_FRAC_BITS) - 1);
    return l.rt[std::size_t(j)] + rshr(std::int64_t(l.rd[std::size_t(j)]) * fr, NIU_RT_FRAC_BITS);
}

std::int8_t saturate_code(std::int64_t v, int out_bits) {
    const std::int64_t hi = (std::int64_t(1) << (out_bits - 1)) - 1;
    return std::int8_t(clamp64(v, -hi, hi));
}

void check_layer_io(const NiuLayerProgram& layer, std::size_t clean, std::size_t out, const std::string& field = "weights") {
    if (clean != layer.count || out != layer.count)
        throw FormatError("<memory>", field,
                          "NIU layer program has " + std::to_string(layer.count) + " weights, got " + std::to_string(clean) +
                              " clean and " + std::to_string(out) + " output");
}

// Scalar kernel: beats [first, last) with the states at beat `first` (advanced in place).
void apply_beats_scalar(const NiuLayerProgram& layer, const std::int8_t* clean, std::int8_t* out, std::uint64_t first,
                        std::uint64_t last, RngState* states) {
    const std::uint64_t count = layer.count;
    for (std::uint64_t b = first; b < last; ++b) {
        for (int k = 0; k < kStreams; ++k) {
            std::uint32_t o[kGens];
            for (int g = 0; g < kGens; ++g) o[g] = xoshiro_next(states[g * kStreams + k]);
            const std::uint64_t i = b * kBeatLanes + std::uint64_t(k);
            if (i < count) out[i] = noisy_code(layer, clean[i], draws_of(split_uniforms(o[0], o[1], o[2], o[3])));
        }
    }
}

using BeatKernel = void (*)(const NiuLayerProgram&, const std::int8_t*, std::int8_t*, std::uint64_t, std::uint64_t,
                            RngState*);

BeatKernel kernel_by_name(const std::string& name) {
    if (name == "scalar") return apply_beats_scalar;
    if (name == "avx2") {
        if (!detail::cpu_has_avx2()) throw FormatError("<memory>", "kernel", "this CPU has no AVX2");
        return detail::apply_beats_avx2;
    }
    if (name == "avx512") {  // the full model has no AVX-512 form (see available_kernels)
        if (!detail::cpu_has_avx512bw()) throw FormatError("<memory>", "kernel", "this CPU has no AVX-512BW");
        return detail::apply_beats_avx2;
    }
    throw FormatError("<memory>", "kernel", "unknown NIU kernel '" + name + "' (scalar, avx2, avx512)");
}

BeatKernel best_kernel() { return detail::cpu_has_avx2() ? detail::apply_beats_avx2 : apply_beats_scalar; }

// The states of generators [first_gen, last_gen) at beat `beat` of the layer, at their usual
// index g * kStreams + k (the other generators' entries are left default).
std::array<RngState, kGens * kStreams> states_at(const NiuLayerProgram& layer, std::uint64_t beat, int first_gen = 0,
                                                 int last_gen = kGens) {
    std::array<RngState, kGens * kStreams> s{};
    for (std::size_t k = std::size_t(first_gen) * kStreams; k < std::size_t(last_gen) * kStreams; ++k)
        s[k] = xoshiro_jump(layer.rng[k], beat);
    return s;
}

std::uint64_t beats_of(std::uint64_t count) { return (count + kBeatLanes - 1) / kBeatLanes; }

// Splits beats [0, beats) into one contiguous part per worker and runs part(first, last) on the
// pool.  Each part jumps the streams it uses (about 0.4 us per stream), so a part must be long
// enough to pay for that and for waking a worker: min_beats, below which one thread runs it.
// Contiguous parts keep each thread on its own cache lines of the input and output.
template <class Part>
void for_beat_parts(std::uint64_t beats, int threads, std::uint64_t min_beats, const Part& part) {
    int workers = threads > 0 ? threads : usable_cpus();
    workers = int(std::min<std::uint64_t>(std::uint64_t(workers), std::max<std::uint64_t>(1, beats / min_beats)));
    const std::uint64_t parts = std::uint64_t(workers);
    run_on_worker_pool(std::int64_t(parts), workers, [&](std::int64_t p) {
        part(beats * std::uint64_t(p) / parts, beats * std::uint64_t(p + 1) / parts);
    });
}

void run_kernel(BeatKernel kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean,
                std::span<std::int8_t> out, int threads) {
    check_layer_io(layer, clean.size(), out.size());
    // All 128 streams jump (about 50 us): 4096 beats take about 1 ms on one core.
    for_beat_parts(beats_of(layer.count), threads, 4096, [&](std::uint64_t first, std::uint64_t last) {
        auto states = states_at(layer, first);
        kernel(layer, clean.data(), out.data(), first, last, states.data());
    });
}

// ---- kept chip state ------------------------------------------------------------------------

std::size_t chip_word(std::uint64_t i, int run) {
    return std::size_t(i / NiuChipState::kBlockWeights) * NiuChipState::kBlockWords + std::size_t(run) * NiuChipState::kBlockWeights +
           std::size_t(i % NiuChipState::kBlockWeights);
}

constexpr std::uint16_t kSignBit = NiuChipState::kSignBit;

// Scalar chip half: beats [first, last), chip generators' states at `first` (advanced in place).
void chip_beats_scalar(const NiuLayerProgram& layer, const std::int8_t* clean, std::uint16_t* words, std::uint64_t first,
                       std::uint64_t last, RngState* states) {
    const std::uint64_t count = layer.count;
    for (std::uint64_t b = first; b < last; ++b) {
        for (int k = 0; k < kStreams; ++k) {
            std::uint32_t o[kChipGens];
            for (int g = 0; g < kChipGens; ++g) o[g] = xoshiro_next(states[g * kStreams + k]);
            const std::uint64_t i = b * kBeatLanes + std::uint64_t(k);
            if (i >= count) continue;
            const WeightDraws z = draws_of(split_uniforms(o[0], o[1], o[2], 0));
            const bool negative = clean[i] < 0;
            const CodeEntry& on = layer.code[std::size_t(std::min(negative ? -int(clean[i]) : int(clean[i]), kCodeTable - 1))];
            const CodeEntry& off = layer.code[0];
            const ProgrammedDevice plus = program_device(negative ? off : on, z.prog_plus, z.nu_plus);
            const ProgrammedDevice minus = program_device(negative ? on : off, z.prog_minus, z.nu_minus);
            words[chip_word(i, 0)] = std::uint16_t(plus.gp) | (negative ? kSignBit : 0);
            words[chip_word(i, 1)] = std::uint16_t(plus.nu);
            words[chip_word(i, 2)] = std::uint16_t(minus.gp);
            words[chip_word(i, 3)] = std::uint16_t(minus.nu);
        }
    }
}

// Scalar round half: beats [first, last), the read generator's 32 states at `first`.
void kept_beats_scalar(const NiuLayerProgram& layer, const std::uint16_t* words, std::int8_t* out, std::uint64_t first,
                       std::uint64_t last, RngState* read_states) {
    const std::uint64_t count = layer.count;
    for (std::uint64_t b = first; b < last; ++b) {
        for (int k = 0; k < kStreams; ++k) {
            const std::uint32_t r0 = xoshiro_next(read_states[k]);
            const std::uint64_t i = b * kBeatLanes + std::uint64_t(k);
            if (i >= count) continue;
            const WeightUniforms u = split_uniforms(0, 0, 0, r0);
            const std::uint16_t w0 = words[chip_word(i, 0)];
            const ProgrammedDevice plus{std::int32_t(w0 & ~kSignBit), std::int32_t(words[chip_word(i, 1)])};
            const ProgrammedDevice minus{std::int32_t(words[chip_word(i, 2)]), std::int32_t(words[chip_word(i, 3)])};
            out[i] = code_of_pair(layer, (w0 & kSignBit) != 0, read_device(layer, plus, gaussian_read(u.read_plus)),
                                  read_device(layer, minus, gaussian_read(u.read_minus)));
        }
    }
}

using ChipKernel = void (*)(const NiuLayerProgram&, const std::int8_t*, std::uint16_t*, std::uint64_t, std::uint64_t,
                            RngState*);
using KeptKernel = void (*)(const NiuLayerProgram&, const std::uint16_t*, std::int8_t*, std::uint64_t, std::uint64_t,
                            RngState*);

struct HalfKernels {
    ChipKernel chip;
    KeptKernel kept;
};

HalfKernels half_kernels(const std::string& name) {
    if (name == "scalar") return {chip_beats_scalar, kept_beats_scalar};
    kernel_by_name(name);  // the same names and checks as the full kernels
    if (name == "avx512") return {detail::chip_beats_avx2, detail::kept_beats_avx512};
    return {detail::chip_beats_avx2, detail::kept_beats_avx2};
}

HalfKernels best_half_kernels() {
    static const HalfKernels best = half_kernels(available_kernels().back());  // the CPU does not change
    return best;
}

// Words of a chip state for `count` weights: whole beats, so a kernel may read any beat it steps.
std::size_t chip_state_words(std::uint64_t count) {
    return std::size_t(beats_of(count)) * (kBeatLanes / NiuChipState::kBlockWeights) * NiuChipState::kBlockWords;
}

// Recomputes `chip` in place, reusing its words' memory: the kernels write every word of a weight
// of the layer, so only the last beat (whose words past the layer a kernel may skip) is zeroed
// first.  A fresh state is therefore never filled twice (zeroing 8 bytes per weight was ~30 % of
// a chip's first round), and a state recomputed for the next chip reuses pages already mapped.
void run_chip_kernel(ChipKernel kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean,
                     int threads, NiuChipState& chip) {
    check_layer_io(layer, clean.size(), clean.size());
    chip.count = 0;  // not the state of any layer until every word is written
    chip.words.resize(chip_state_words(layer.count));
    const std::size_t beat_words = std::size_t(kBeatLanes / NiuChipState::kBlockWeights) * NiuChipState::kBlockWords;
    std::fill(chip.words.end() - std::ptrdiff_t(std::min(beat_words, chip.words.size())), chip.words.end(), 0);
    for_beat_parts(beats_of(layer.count), threads, 4096, [&](std::uint64_t first, std::uint64_t last) {
        auto states = states_at(layer, first, 0, kChipGens);
        kernel(layer, clean.data(), chip.words.data(), first, last, states.data());
    });
    chip.code = layer.code;
    std::copy_n(layer.rng.begin(), chip.chip_streams.size(), chip.chip_streams.begin());
    chip.count = layer.count;
}

NiuChipState run_chip_kernel(ChipKernel kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean,
                             int threads) {
    NiuChipState chip;
    run_chip_kernel(kernel, layer, clean, threads, chip);
    return chip;
}

// FormatError unless `chip` is the chip half of `layer` and `out` has its size; `where` prefixes
// the field ("" for one layer, "layers[i]." in a network round).
void check_kept(const NiuLayerProgram& layer, const NiuChipState& chip, std::size_t out, const std::string& where = "") {
    check_layer_io(layer, chip.count, out, where + "weights");
    if (!is_chip_state_of(chip, layer))
        throw FormatError("<memory>", where + "chip_state",
                          "the kept chip state was computed for another layer program (its code table or chip streams "
                          "differ: another seed, chip, layer or noise model)");
}

// The round half of beats [first, last) of one layer: jump the 32 read streams there, run.
void kept_range(KeptKernel kernel, const NiuLayerProgram& layer, const NiuChipState& chip, std::int8_t* out,
                std::uint64_t first, std::uint64_t last) {
    auto states = states_at(layer, first, kChipGens, kGens);
    kernel(layer, chip.words.data(), out, first, last, states.data() + std::size_t(kChipGens) * kStreams);
}

void run_kept_kernel(KeptKernel kernel, const NiuLayerProgram& layer, const NiuChipState& chip, std::span<std::int8_t> out,
                     int threads) {
    check_kept(layer, chip, out.size());
    // Only the 32 read streams jump (about 13 us), and the round half runs four times as fast
    // as the full model: 512 beats (16 K weights) take about 33 us on one core.
    for_beat_parts(beats_of(layer.count), threads, 512, [&](std::uint64_t first, std::uint64_t last) {
        kept_range(kernel, layer, chip, out.data(), first, last);
    });
}

// The layers' beats laid end to end, [start[i], start[i + 1]) layer i's, split into one
// contiguous range per thread like one layer's: a part runs its share of each layer it
// overlaps, so one pool job covers the round.
void run_kept_network(KeptKernel kernel, std::span<const KeptLayer> layers, int threads) {
    std::vector<std::uint64_t> start(layers.size() + 1, 0);
    for (std::size_t i = 0; i < layers.size(); ++i) {
        const KeptLayer& l = layers[i];
        const std::string where = "layers[" + std::to_string(i) + "].";
        if (!l.layer || !l.chip) throw FormatError("<memory>", where + "chip_state", "a layer of the round has no program or chip state");
        check_kept(*l.layer, *l.chip, l.out.size(), where);
        start[i + 1] = start[i] + beats_of(l.layer->count);
    }
    for_beat_parts(start.back(), threads, 512, [&](std::uint64_t first, std::uint64_t last) {
        // The first layer that ends after `first`, then every layer that starts before `last`.
        std::size_t i = std::size_t(std::upper_bound(start.begin(), start.end(), first) - start.begin()) - 1;
        for (; i < layers.size() && start[i] < last; ++i) {
            const std::uint64_t lo = std::max(first, start[i]) - start[i], hi = std::min(last, start[i + 1]) - start[i];
            if (lo < hi) kept_range(kernel, *layers[i].layer, *layers[i].chip, layers[i].out.data(), lo, hi);
        }
    });
}

}  // namespace

ProgrammedDevice program_device(const CodeEntry& d, std::int32_t z1, std::int32_t z2) {
    const std::int64_t gp = clamp64(d.gt + rshr(std::int64_t(d.sp) * z1, NIU_Z_FRAC), 0, NIU_G_MAX);
    const std::int64_t nu = d.mu + rshr(std::int64_t(d.sn) * z2, NIU_Z_FRAC);
    return {std::int32_t(gp), std::int32_t(std::min<std::int64_t>(nu < 0 ? -nu : nu, NIU_NU_MAX))};
}

std::int32_t read_device(const NiuLayerProgram& l, ProgrammedDevice p, std::int32_t z3) {
    const std::int64_t gp = p.gp, nu = p.nu;
    const std::int64_t x = std::min<std::int64_t>(rshr(nu * l.drift_lt, NIU_NU_FRAC), NIU_X_MAX);
    const int xi = int(x >> NIU_X_FRAC);
    // 2^-x = 2^-(x mod 1) * 2^-floor(x); the integer part is a rounded right shift by xi, which
    // the RTL performs as a product with 2^(15 - xi).
    const std::int64_t g1 = rshr(gp * exp2_fraction(x), NIU_EXP_ONE_BITS);
    const std::int64_t gd = rshr(g1 * (std::int64_t(1) << (NIU_EXP_ONE_BITS - xi)), NIU_EXP_ONE_BITS);
    const std::int64_t sa = std::min<std::int64_t>(rshr(gd * read_sigma(l, gp), NIU_RT_ONE_BITS), NIU_G_MAX);
    return std::int32_t(clamp64(gd + rshr(sa * z3, NIU_Z_FRAC), 0, NIU_G_MAX));
}

std::int32_t device_conductance(const NiuLayerProgram& l, const CodeEntry& d, std::int32_t z1, std::int32_t z2,
                                std::int32_t z3) {
    return read_device(l, program_device(d, z1, z2), z3);
}

std::int8_t code_of_pair(const NiuLayerProgram& l, bool negative, std::int64_t g_plus, std::int64_t g_minus) {
    const std::int64_t on_minus_off = negative ? g_minus - g_plus : g_plus - g_minus;
    const std::int64_t m = rshr(on_minus_off * std::int64_t(l.back_k), NIU_K_SHIFT);
    return saturate_code(negative ? -m : m, l.out_bits);
}

std::int8_t noisy_code(const NiuLayerProgram& l, std::int8_t clean, const WeightDraws& z) {
    const bool negative = clean < 0;
    const int a = std::min(negative ? -int(clean) : int(clean), kCodeTable - 1);
    const CodeEntry& on = l.code[std::size_t(a)];
    const CodeEntry& off = l.code[0];
    const std::int64_t g_plus = device_conductance(l, negative ? off : on, z.prog_plus, z.nu_plus, z.read_plus);
    const std::int64_t g_minus = device_conductance(l, negative ? on : off, z.prog_minus, z.nu_minus, z.read_minus);
    return code_of_pair(l, negative, g_plus, g_minus);
}

bool is_chip_state_of(const NiuChipState& chip, const NiuLayerProgram& layer) {
    return chip.count == layer.count && chip.code == layer.code &&
           std::equal(chip.chip_streams.begin(), chip.chip_streams.end(), layer.rng.begin()) &&
           chip.words.size() == chip_state_words(chip.count);
}

NiuChipState chip_state(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads) {
    return run_chip_kernel(best_half_kernels().chip, layer, clean, threads);
}

void recompute_chip_state(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, NiuChipState& chip,
                          int threads) {
    run_chip_kernel(best_half_kernels().chip, layer, clean, threads, chip);
}

void apply_kept(const NiuLayerProgram& layer, const NiuChipState& chip, std::span<std::int8_t> out, int threads) {
    run_kept_kernel(best_half_kernels().kept, layer, chip, out, threads);
}

void apply_kept_network(std::span<const KeptLayer> layers, int threads, const std::string& kernel) {
    run_kept_network(kernel.empty() ? best_half_kernels().kept : half_kernels(kernel).kept, layers, threads);
}

NiuChipState chip_state_kernel(const std::string& kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean) {
    return run_chip_kernel(half_kernels(kernel).chip, layer, clean, 1);
}

void recompute_chip_state_kernel(const std::string& kernel, const NiuLayerProgram& layer,
                                 std::span<const std::int8_t> clean, NiuChipState& chip) {
    run_chip_kernel(half_kernels(kernel).chip, layer, clean, 1, chip);
}

void apply_kept_kernel(const std::string& kernel, const NiuLayerProgram& layer, const NiuChipState& chip,
                       std::span<std::int8_t> out) {
    run_kept_kernel(half_kernels(kernel).kept, layer, chip, out, 1);
}

std::vector<std::string> available_kernels() {
    std::vector<std::string> k{"scalar"};
    if (detail::cpu_has_avx2()) k.push_back("avx2");
    if (detail::cpu_has_avx2() && detail::cpu_has_avx512bw()) k.push_back("avx512");
    return k;
}

void apply_layer_kernel(const std::string& kernel, const NiuLayerProgram& layer, std::span<const std::int8_t> clean,
                        std::span<std::int8_t> out) {
    run_kernel(kernel_by_name(kernel), layer, clean, out, 1);
}

void apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, std::span<std::int8_t> out,
                 int threads) {
    run_kernel(best_kernel(), layer, clean, out, threads);
}

std::vector<std::int8_t> apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads) {
    std::vector<std::int8_t> out(clean.size());
    apply_layer(layer, clean, out, threads);
    return out;
}

void apply_program(const NiuProgram& program, Hbm& hbm, int threads) {
    for (std::size_t i = 0; i < program.layers.size(); ++i) {
        const NiuLayerProgram& layer = program.layers[i];
        const std::string where = "<niu program>", field = "layers[" + std::to_string(i) + "]";
        const std::uint64_t memory = hbm.layout().size();
        const auto fits = [&](std::uint64_t addr) { return addr <= memory && layer.count <= memory - addr; };
        if (!fits(layer.src_addr) || !fits(layer.dst_addr))
            throw FormatError(where, field + ".COUNT",
                              std::to_string(layer.count) + " weights at SRC_ADDR " + std::to_string(layer.src_addr) +
                                  " and DST_ADDR " + std::to_string(layer.dst_addr) + " do not fit the " +
                                  std::to_string(memory) + "-byte memory");
        if (layer.src_addr < layer.dst_addr + layer.count && layer.dst_addr < layer.src_addr + layer.count)
            throw FormatError(where, field + ".DST_ADDR", "a layer's clean and noisy regions overlap");
        const auto clean = hbm.bytes(layer.src_addr, layer.count);
        const auto out = hbm.bytes(layer.dst_addr, layer.count);
        apply_layer(layer, clean, out, threads);
    }
}

void check_lanes(int lanes, const std::string& source, const std::string& field) {
    for (int l : NIU_LANES_SUPPORTED)
        if (l == lanes) return;
    std::string list;
    for (int l : NIU_LANES_SUPPORTED) list += (list.empty() ? "" : ", ") + std::to_string(l);
    const std::string beat = std::to_string(NIU_BEAT_LANES);
    throw FormatError(source, field, "the NIU has 1 to " + beat + " lanes that divide a " + beat + "-weight beat (" + list +
                                         "), got " + std::to_string(lanes));
}

NiuBeatModel::NiuBeatModel(const NiuLayerProgram& layer, int lanes) : layer_(layer), lanes_(lanes) {
    check_lanes(lanes);
    slots_ = kStreams / lanes;
    rings_.resize(std::size_t(lanes) * kGens);
    // Stream k = slot * L + lane: the program lists states by (generator, stream), and a ring
    // receives its streams in slot order, head first (as rtl/niu_loader.sv pushes them).
    for (int g = 0; g < kGens; ++g)
        for (int k = 0; k < kStreams; ++k) rings_[std::size_t((k % lanes) * kGens + g)].push_back(layer.rng[std::size_t(g * kStreams + k)]);
}

std::vector<std::int8_t> NiuBeatModel::next_group(std::span<const std::int8_t> clean) {
    if (clean.size() != std::size_t(lanes_))
        throw FormatError("<memory>", "group", "a group has " + std::to_string(lanes_) + " codes");
    std::vector<std::int8_t> out(std::size_t(lanes_), 0);
    const std::uint64_t beat = group_ / std::uint64_t(slots_);
    const int slot = int(group_ % std::uint64_t(slots_));
    for (int j = 0; j < lanes_; ++j) {
        std::uint32_t o[kGens];
        for (int g = 0; g < kGens; ++g) {
            auto& ring = rings_[std::size_t(j * kGens + g)];
            RngState head = ring.front();  // lock-step: every ring steps, tail lane or not
            ring.erase(ring.begin());
            o[g] = xoshiro_next(head);
            ring.push_back(head);
        }
        const std::uint64_t i = beat * kBeatLanes + std::uint64_t(slot * lanes_ + j);
        if (i < layer_.count) out[std::size_t(j)] = noisy_code(layer_, clean[std::size_t(j)], draws_of(split_uniforms(o[0], o[1], o[2], o[3])));
    }
    ++group_;
    return out;
}

}  // namespace aimcemu::niu
