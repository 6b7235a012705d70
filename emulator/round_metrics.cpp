// Per-layer metrics of a noisy round, taken during the PU's pass (see round_metrics.hpp).
#include "emulator/round_metrics.hpp"

#include <stdexcept>
#include <string>

namespace aimcemu {

RoundMetrics::RoundMetrics(const ResultsWriter& writer, const Network& net) : layers_(net.layers.size()) {
    for (int l = 0; l < int(net.layers.size()); ++l) {
        if (writer.round_data_needed(l)) continue;
        LayerSums& s = layers_[std::size_t(l)];
        s.measured = true;
        s.reference = writer.reference(l);
        s.reference_owner = writer.reference_owner(l);
        s.image_size = net.layers[std::size_t(l)].out_shape.size();
    }
}

void RoundMetrics::layer_output(int layer, std::int64_t first, int count, std::span<const std::int8_t> values) const {
    const LayerSums& s = layers_.at(std::size_t(layer));
    if (!s.measured) return;
    // The PU reports whole images of this layer; anything else is a bug in the caller.
    const std::size_t begin = std::size_t(first * s.image_size);
    if (first < 0 || values.size() != std::size_t(count) * std::size_t(s.image_size) ||
        begin + values.size() > s.reference.size())
        throw std::logic_error("RoundMetrics: layer " + std::to_string(layer) + ", images " + std::to_string(first) +
                               "+" + std::to_string(count) + " do not fit the reference");
    ActivationErrorSums piece;
    piece.accumulate(values, s.reference.subspan(begin, values.size()));
    const std::lock_guard guard(s.lock);
    s.totals += piece;
}

std::vector<bool> RoundMetrics::keep() const {
    std::vector<bool> keep(layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) keep[l] = !layers_[l].measured;
    return keep;
}

ActivationErrorSums RoundMetrics::sums(int layer) const {
    const LayerSums& s = layers_.at(std::size_t(layer));
    const std::lock_guard guard(s.lock);
    return s.totals;
}

}  // namespace aimcemu
