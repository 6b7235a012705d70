// Bit-exact NIU datapath (docs/niu_datapath.md section 3) and its two drivers.
#include "niu/niu_model.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <thread>

#include "common/errors.hpp"
#include "pu_model/hbm.hpp"

namespace aimcemu::niu {
namespace {

using namespace gen;

// (t/t0)^-nu from the drift table, linear between 256 knots.
std::int64_t drift_factor_q16(const NiuLayerProgram& l, std::int64_t nu) {
    const std::int64_t k = nu >> NIU_DF_FRAC_BITS;
    const std::int64_t f = nu & ((1 << NIU_DF_FRAC_BITS) - 1);
    return l.df[k] + rshr((std::int64_t(l.df[k + 1]) - l.df[k]) * f, NIU_DF_FRAC_BITS);
}

// Relative read sigma at the programmed conductance, log-segment index (section 3).
std::int64_t read_sigma_q16(const NiuLayerProgram& l, std::int64_t gp) {
    const auto g = std::uint32_t(gp == 0 ? 1 : gp);  // 17 bits
    const int octave = std::countl_zero(g) - (32 - NIU_G_BITS);  // 0..16
    const std::uint32_t n = g << octave;                           // leading one at bit 16
    const int seg_shift = NIU_RT_FRAC_BITS;
    const int j = (NIU_RT_OCTAVES - 1 - octave) * (1 << NIU_RT_SEG_BITS) +
                  int((n >> seg_shift) & ((1u << NIU_RT_SEG_BITS) - 1));
    const std::int64_t f = n & ((1u << seg_shift) - 1);
    return l.rt[j] + rshr((std::int64_t(l.rt[j + 1]) - l.rt[j]) * f, seg_shift);
}

std::int8_t saturate_code(std::int64_t v, int out_bits) {
    const std::int64_t hi = (std::int64_t(1) << (out_bits - 1)) - 1;
    return std::int8_t(clamp64(v, -hi, hi));
}

void check_layer_io(const NiuLayerProgram& layer, std::size_t clean, std::size_t out) {
    if (clean != layer.count || out != layer.count)
        throw FormatError("<memory>", "weights",
                          "NIU layer program has " + std::to_string(layer.count) + " weights, got " + std::to_string(clean) +
                              " clean and " + std::to_string(out) + " output");
}

// Weights [begin, end) of one layer with streams advanced to `begin` (the fast path).
void apply_range(const NiuLayerProgram& layer, const std::int8_t* clean, std::int8_t* out, std::uint64_t begin,
                 std::uint64_t end) {
    const PcgStream chip{layer.chip_inc, layer.chip_states.at(0)};
    const PcgStream read{layer.read_inc, layer.read_states.at(0)};
    PcgCursor chip_rng(chip, begin * NIU_CHIP_DRAWS);
    PcgCursor read_rng(read, begin * NIU_READ_DRAWS);
    for (std::uint64_t i = begin; i < end; ++i) {
        WeightDraws z;
        z.prog_plus = gaussian_q12(chip_rng.next());
        z.prog_minus = gaussian_q12(chip_rng.next());
        z.nu_plus = gaussian_q12(chip_rng.next());
        z.nu_minus = gaussian_q12(chip_rng.next());
        z.read_plus = gaussian_q12(read_rng.next());
        z.read_minus = gaussian_q12(read_rng.next());
        out[i] = noisy_code(layer, clean[i], z);
    }
}

}  // namespace

std::int64_t device_conductance(const NiuLayerProgram& l, int a, std::int32_t z_prog, std::int32_t z_nu,
                                std::int32_t z_read) {
    const std::int64_t gp = clamp64(l.gt[a] + rshr(std::int64_t(l.sp[a]) * z_prog, NIU_Z_FRAC), 0, NIU_G_MAX);
    std::int64_t nu = l.mu[a] + rshr(std::int64_t(l.sn[a]) * z_nu, NIU_Z_FRAC);
    nu = std::min<std::int64_t>(nu < 0 ? -nu : nu, NIU_NU_MAX);
    const std::int64_t gd = rshr(gp * drift_factor_q16(l, nu), NIU_DF_ONE_BITS);
    const std::int64_t sigma_abs = rshr(gd * read_sigma_q16(l, gp), NIU_RT_ONE_BITS);
    return clamp64(gd + rshr(sigma_abs * z_read, NIU_Z_FRAC), 0, NIU_G_MAX);
}

std::int8_t noisy_code(const NiuLayerProgram& l, std::int8_t clean, const WeightDraws& z) {
    const bool negative = clean < 0;
    const int a = std::min(negative ? -int(clean) : int(clean), kCodeTable - 1);
    const std::int64_t g_plus = device_conductance(l, negative ? 0 : a, z.prog_plus, z.nu_plus, z.read_plus);
    const std::int64_t g_minus = device_conductance(l, negative ? a : 0, z.prog_minus, z.nu_minus, z.read_minus);
    const std::int64_t on_minus_off = negative ? g_minus - g_plus : g_plus - g_minus;
    const std::int64_t m = rshr(on_minus_off * std::int64_t(l.back_k), NIU_K_SHIFT);
    return saturate_code(negative ? -m : m, l.out_bits);
}

void apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, std::span<std::int8_t> out,
                 int threads) {
    check_layer_io(layer, clean.size(), out.size());
    constexpr std::uint64_t chunk = 1u << 15;
    const std::uint64_t n = layer.count;
    const std::uint64_t chunks = (n + chunk - 1) / chunk;
    unsigned workers = threads > 0 ? unsigned(threads) : std::max(1u, std::thread::hardware_concurrency());
    workers = unsigned(std::min<std::uint64_t>(workers, std::max<std::uint64_t>(chunks, 1)));
    std::atomic<std::uint64_t> next{0};
    auto work = [&] {
        for (std::uint64_t c = next++; c < chunks; c = next++)
            apply_range(layer, clean.data(), out.data(), c * chunk, std::min(n, (c + 1) * chunk));
    };
    std::vector<std::thread> pool;
    for (unsigned w = 1; w < workers; ++w) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
}

std::vector<std::int8_t> apply_layer(const NiuLayerProgram& layer, std::span<const std::int8_t> clean, int threads) {
    std::vector<std::int8_t> out(clean.size());
    apply_layer(layer, clean, out, threads);
    return out;
}

void apply_program(const NiuProgram& program, Hbm& hbm, int threads) {
    for (const NiuLayerProgram& layer : program.layers) {
        const auto clean = hbm.bytes(layer.src_addr, layer.count);
        const auto out = hbm.bytes(layer.dst_addr, layer.count);
        if (layer.src_addr < layer.dst_addr + layer.count && layer.dst_addr < layer.src_addr + layer.count)
            throw FormatError("<niu program>", "DST_ADDR", "a layer's clean and noisy regions overlap");
        apply_layer(layer, clean, out, threads);
    }
}

NiuBeatModel::NiuBeatModel(const NiuLayerProgram& layer)
    : layer_(layer),
      chip_(layer.chip_states, NIU_CHIP_SLOTS, NIU_RNG_PIPE, LcgJump{NIU_CHIP_JUMP_MULT, layer.chip_jump_c}),
      read_(layer.read_states, NIU_READ_SLOTS, NIU_RNG_PIPE, LcgJump{NIU_READ_JUMP_MULT, layer.read_jump_c}) {}

std::array<std::int8_t, kLanes> NiuBeatModel::next_beat(const std::array<std::int8_t, kLanes>& clean) {
    std::array<std::uint32_t, NIU_CHIP_SLOTS> chip_out;
    std::array<std::uint32_t, NIU_READ_SLOTS> read_out;
    chip_.next_beat(chip_out.data());  // lock-step: every unit steps once per beat, tail or not
    read_.next_beat(read_out.data());
    std::array<std::int8_t, kLanes> out{};
    for (int lane = 0; lane < kLanes; ++lane) {
        if (beat_ * kLanes + std::uint64_t(lane) >= layer_.count) continue;  // tail lane: 0, masked by WSTRB
        const std::uint32_t* c = chip_out.data() + NIU_CHIP_DRAWS * lane;
        const std::uint32_t* r = read_out.data() + NIU_READ_DRAWS * lane;
        const WeightDraws z{gaussian_q12(c[0]), gaussian_q12(c[1]), gaussian_q12(c[2]),
                            gaussian_q12(c[3]), gaussian_q12(r[0]), gaussian_q12(r[1])};
        out[std::size_t(lane)] = noisy_code(layer_, clean[std::size_t(lane)], z);
    }
    ++beat_;
    return out;
}

}  // namespace aimcemu::niu
