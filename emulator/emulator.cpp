// The emulation loop of one hybrid system (see emulator.hpp).
#include "emulator/emulator.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "niu/niu_model.hpp"
#include "common/errors.hpp"

namespace aimcemu::niu {

namespace {

const char* const kSource = "<emulator>";

Network resolved(Network net) {
    net.resolve(kSource);
    return net;
}

std::vector<int> checked_aimc_layers(const Network& net, std::vector<int> aimc_layers) {
    for (std::size_t i = 0; i < aimc_layers.size(); ++i)
        if (std::find(aimc_layers.begin(), aimc_layers.begin() + std::ptrdiff_t(i), aimc_layers[i]) !=
            aimc_layers.begin() + std::ptrdiff_t(i))
            throw FormatError(kSource, "aimc_layers", "layer index " + std::to_string(aimc_layers[i]) + " given twice");
    HbmLayout::for_network(net, aimc_layers);  // range and "has weights" checks, with their messages
    return aimc_layers;
}


// The PU's weight source during one round: AIMC layers from the leased buffer, digital GEMM
// layers from their own (never rewritten) region.
class HbmWeightView : public WeightView {
public:
    explicit HbmWeightView(std::vector<const std::int8_t*> table) : table_(std::move(table)) {}
    const std::int8_t* weights(int layer_index) const override { return table_[std::size_t(layer_index)]; }

private:
    std::vector<const std::int8_t*> table_;
};

}  // namespace

Emulator::Emulator(Network net, std::vector<int> aimc_layers)
    : net_(resolved(std::move(net))),
      aimc_layers_(checked_aimc_layers(net_, std::move(aimc_layers))),
      hbm_(HbmLayout::for_network(net_, aimc_layers_)),
      fence_(hbm_.layout(), aimc_layers_),
      weight_count_(net_.layers.size(), 0) {
    // Each GEMM layer's weights move into its HBM region, the one place they are kept from now on.
    // An AIMC layer's clean abs-max is taken on the way, chunk by chunk while each chunk is in
    // cache (the clamp to 1..127 of the maximum equals the clamp of the chunks' clamped maxima).
    clean_absmax_.assign(aimc_layers_.size(), 1);
    for (int l = 0; l < int(net_.layers.size()); ++l) {
        Layer& layer = net_.layers[std::size_t(l)];
        if (!layer.is_gemm()) continue;
        const auto aimc = std::find(aimc_layers_.begin(), aimc_layers_.end(), l);
        const HbmRegion& region = hbm_.layout().at(aimc != aimc_layers_.end() ? HbmRegionKind::CleanWeights
                                                                              : HbmRegionKind::Weights, l);
        hbm_.prefault(region);
        const std::span<std::int8_t> to = hbm_.region(region);
        constexpr std::size_t kChunk = std::size_t(64) << 10;   // well inside L2
        for (std::size_t at = 0; at < layer.weights.size(); at += kChunk) {
            const std::size_t count = std::min(kChunk, layer.weights.size() - at);
            std::copy_n(layer.weights.begin() + std::ptrdiff_t(at), count, to.begin() + std::ptrdiff_t(at));
            if (aimc != aimc_layers_.end()) {
                int& absmax = clean_absmax_[std::size_t(aimc - aimc_layers_.begin())];
                absmax = std::max(absmax, niu::clean_absmax(to.subspan(at, count), AbsMaxMode::Layer));
            }
        }
        weight_count_[std::size_t(l)] = layer.weights.size();
        std::vector<std::int8_t>().swap(layer.weights);
    }
}

std::span<const std::int8_t> Emulator::clean_weights(std::size_t k) const {
    if (k >= aimc_layers_.size())
        throw FormatError(kSource, "aimc layer", "index " + std::to_string(k) + " out of range (" +
                                                     std::to_string(aimc_layers_.size()) + " AIMC layers)");
    const int l = aimc_layers_[k];
    return hbm_.region(hbm_.layout().at(HbmRegionKind::CleanWeights, l)).first(weight_count_[std::size_t(l)]);
}

bool Emulator::is_aimc(int index) const {
    return std::find(aimc_layers_.begin(), aimc_layers_.end(), index) != aimc_layers_.end();
}

const HbmRegion& Emulator::gemm_weight_region(int index) const {
    if (index < 0 || index >= int(net_.layers.size()) || !net_.layers[std::size_t(index)].is_gemm())
        throw FormatError(kSource, "layer", "layer index " + std::to_string(index) + " has no weights");
    return hbm_.layout().at(HbmRegionKind::Weights, index, 0);
}

std::uint64_t Emulator::write_round(const NiuProgram& program, int threads) {
    if (program.layers.size() != aimc_layers_.size())
        throw FormatError(kSource, "program", "has " + std::to_string(program.layers.size()) + " layers, the system " +
                                                  std::to_string(aimc_layers_.size()) + " AIMC layers");
    for (std::size_t k = 0; k < aimc_layers_.size(); ++k) {
        const Layer& layer = net_.layers[std::size_t(aimc_layers_[k])];
        const std::size_t count = weight_count_[std::size_t(aimc_layers_[k])];
        const std::string field = "program.layers[" + std::to_string(k) + "]";
        if (program.layers[k].count != count)
            throw FormatError(kSource, field + ".count",
                              std::to_string(program.layers[k].count) + " weights, layer '" + layer.name + "' has " +
                                  std::to_string(count));
        // A program compiled for another clean abs-max would map this layer's codes to other
        // conductances: wrong noise, silently.  127 is absmax "fixed", right for any weights.
        const int absmax = code_table_absmax(program.layers[k]);
        if (absmax != clean_absmax_[k] && absmax != 127)
            throw FormatError(kSource, field + ".absmax",
                              "compiled for a clean abs-max of " + std::to_string(absmax) + ", layer '" + layer.name +
                                  "' has " + std::to_string(clean_absmax_[k]) + " (or 127 for absmax \"fixed\")");
    }
    // The NIU reads each layer's clean region and writes the back buffer of this round (the
    // host's SRC_ADDR/DST_ADDR; the program's own addresses are not used).  The chip half of a
    // layer (programmed devices) depends on the seed, chip and layer but not on the round or t:
    // it is computed in the first round of a chip and kept, and every round runs only the round
    // half -- the same bytes as the full model (niu_model.hpp apply_kept).  The round half of all
    // layers is one job (apply_kept_network): the threads wake once per round and each streams
    // one contiguous range of the layers' chip states.
    auto ticket = fence_.begin_write();
    try {
        std::lock_guard lock(chip_states_mutex_);
        chip_states_.resize(aimc_layers_.size());
        std::vector<KeptLayer> round;
        for (std::size_t k = 0; k < aimc_layers_.size(); ++k) {
            const int l = aimc_layers_[k];
            const NiuLayerProgram& layer = program.layers[k];
            if (!is_chip_state_of(chip_states_[k], layer))
                recompute_chip_state(layer, clean_weights(k), chip_states_[k], threads);
            round.push_back({&layer, &chip_states_[k], hbm_.region(ticket.weights(l)).first(layer.count)});
        }
        apply_kept_network(round, threads);
    } catch (...) {
        fence_.abandon(ticket);  // never publish a half-written round
        throw;
    }
    fence_.publish(ticket);
    return ticket.round;
}

RoundOutputs Emulator::run_published(const std::vector<Tensor8>& images, const RunOptions& options,
                                     std::uint64_t expected_round) {
    auto lease = fence_.acquire();
    if (expected_round != 0 && lease.round() != expected_round)
        throw FormatError(kSource, "round", "the PU leased round " + std::to_string(lease.round()) + ", expected " +
                                                std::to_string(expected_round));
    // With the fast backend, digital layers come packed from digital_packed(): their HBM region
    // holds the network's own weights, unchanged since construction, so the view leaves them out.
    const bool fast = options.backend == GemmBackend::Fast;
    RunOptions pu_options = options;
    if (fast) pu_options.packed = &digital_packed(options.kernel, options.threads);
    if (!pu_options.buffers) pu_options.buffers = &pass_buffers_;
    std::vector<const std::int8_t*> table(net_.layers.size(), nullptr);
    for (int l = 0; l < int(net_.layers.size()); ++l) {
        if (!net_.layers[std::size_t(l)].is_gemm() || (fast && !is_aimc(l))) continue;
        const HbmRegion& region = is_aimc(l) ? lease.weights(l) : gemm_weight_region(l);
        table[std::size_t(l)] = std::as_const(hbm_).region(region).data();
    }
    const HbmWeightView view(std::move(table));
    pu_options.weights = &view;
    return {lease.round(), run_network_batch(net_, images, pu_options)};
}

const PackedNetwork& Emulator::digital_packed(FastKernel kernel, int threads) {
    std::lock_guard lock(packed_mutex_);
    const FastKernel resolved_kernel = resolve_fast_kernel(kernel);
    auto& packed = digital_packed_[resolved_kernel];
    if (!packed) {
        std::vector<const std::int8_t*> table(net_.layers.size(), nullptr);
        for (int l = 0; l < int(net_.layers.size()); ++l)
            if (net_.layers[std::size_t(l)].is_gemm() && !is_aimc(l))
                table[std::size_t(l)] = std::as_const(hbm_).region(gemm_weight_region(l)).data();
        const HbmWeightView digital(std::move(table));
        packed = std::make_unique<PackedNetwork>(net_, resolved_kernel, threads, aimc_layers_, &digital);
    }
    return *packed;
}

RoundOutputs Emulator::run_round(const NiuProgram& program, const std::vector<Tensor8>& images,
                                 const RunOptions& options) {
    std::lock_guard lock(round_mutex_);
    const std::uint64_t round = write_round(program, options.threads);
    return run_published(images, options, round);
}

std::vector<std::int8_t> Emulator::weights(int index) {
    const HbmRegion* region = &gemm_weight_region(index);
    if (!is_aimc(index)) {
        const auto bytes = std::as_const(hbm_).region(*region);
        return {bytes.begin(), bytes.end()};
    }
    if (fence_.published_round() == 0)
        throw FormatError(kSource, "weights", "layer '" + net_.layers[std::size_t(index)].name +
                                                  "': no round has been written yet");
    auto lease = fence_.acquire();
    const auto bytes = std::as_const(hbm_).region(lease.weights(index));
    return {bytes.begin(), bytes.end()};
}

}  // namespace aimcemu::niu
