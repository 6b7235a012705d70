// Per-layer metrics of a noisy round, taken during the PU's pass (see round_metrics.hpp).
#include "emulator/round_metrics.hpp"

#include <stdexcept>
#include <string>

#include "common/errors.hpp"

namespace aimcemu {

RoundMetrics::RoundMetrics(const ResultsWriter& writer, const Network& net) : layers_(net.layers.size()) {
    for (int l = 0; l < int(net.layers.size()); ++l) {
        LayerSums& s = layers_[std::size_t(l)];
        s.name = net.layers[std::size_t(l)].name;
        s.out_shape = net.layers[std::size_t(l)].out_shape;
        if (writer.round_data_needed(l)) continue;
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

namespace {
std::string describe(const Shape3& s) {
    return std::to_string(s.h) + "x" + std::to_string(s.w) + "x" + std::to_string(s.c);
}
}  // namespace

void RoundMetrics::check_network(const Network& net, const std::string& source) const {
    if (net.layers.size() != layers_.size())
        throw FormatError(source, "metrics", "made for a network of " + std::to_string(layers_.size()) +
                                                 " layers, this one has " + std::to_string(net.layers.size()));
    for (std::size_t l = 0; l < layers_.size(); ++l) {
        const LayerSums& made_for = layers_[l];
        const Layer& layer = net.layers[l];
        if (layer.name != made_for.name || !(layer.out_shape == made_for.out_shape))
            throw FormatError(source, "metrics." + made_for.name,
                              "made for layer " + std::to_string(l) + " '" + made_for.name + "' (" +
                                  describe(made_for.out_shape) + "), this network's is '" + layer.name + "' (" +
                                  describe(layer.out_shape) + ")");
    }
}

void RoundMetrics::check_run(const Network& net, std::size_t images, const std::string& source) const {
    check_network(net, source);
    for (const LayerSums& made_for : layers_) {
        if (!made_for.measured || made_for.image_size <= 0) continue;
        // The pass reports image i of its own as position i (first_image only keys noise), which is
        // compared with reference image i.
        const std::size_t held = made_for.reference.size() / std::size_t(made_for.image_size);
        if (images > held)
            throw FormatError(source, "images",
                              "a pass of " + std::to_string(images) + " images; the metrics' reference holds " +
                                  std::to_string(held));
    }
}

void RoundMetrics::check_writer(const ResultsWriter& writer, const Network& net, const std::string& source) const {
    check_network(net, source);
    for (int l = 0; l < int(layers_.size()); ++l) {
        const LayerSums& made_for = layers_[std::size_t(l)];
        if (!made_for.measured) continue;
        const std::span<const std::int8_t> now = writer.reference(l);
        if (now.data() != made_for.reference.data() || now.size() != made_for.reference.size())
            throw FormatError(source, "metrics." + made_for.name,
                              "taken against another reference than this writer's (another writer's, or a reference "
                              "set again since round_metrics())");
    }
}

void RoundMetrics::claim_round(std::size_t round_index, const std::string& source) const {
    std::int64_t expected = kNotStored;
    if (!stored_round_.compare_exchange_strong(expected, std::int64_t(round_index)))
        throw FormatError(source, "metrics",
                          "already stored as round " + std::to_string(expected) +
                              "; a RoundMetrics measures one pass and is stored once: each round needs its own "
                              "(ResultsWriter.round_metrics() per round)");
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
