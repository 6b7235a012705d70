// Shape inference, validation errors and the zoo topologies.
#include <gtest/gtest.h>

#include "common/errors.hpp"
#include "formats/network.hpp"
#include "formats/zoo.hpp"

using namespace aimcemu;

TEST(Zoo, ResNet50HasPublishedParameterCount) {
    const Network net = zoo::resnet50();
    // torchvision's resnet50 has 25,557,032 parameters, 53,120 of them in batch norm (folded
    // here) and 1,000 in the fc bias: 25,502,912 conv/fc weights.
    std::int64_t conv_fc_weights = 0;
    for (const auto& l : net.layers) conv_fc_weights += std::int64_t(l.weights.size());
    EXPECT_EQ(conv_fc_weights, 25502912);
    EXPECT_EQ(net.layers.back().out_shape, (Shape3{1, 1, 1000}));
}

TEST(Zoo, ResNet18ShapesAndCounts) {
    const Network net = zoo::resnet18();
    EXPECT_EQ(net.total_weights(), 11678912);  // torchvision: 11,689,512 params - 9,600 BN - 1000 fc bias
    EXPECT_EQ(net.layers[0].out_shape, (Shape3{112, 112, 64}));
    EXPECT_EQ(net.layers[1].out_shape, (Shape3{56, 56, 64}));
    const int avg = net.find_layer("avgpool");
    ASSERT_GE(avg, 0);
    EXPECT_EQ(net.layers[avg].in_shape, (Shape3{7, 7, 512}));
    EXPECT_EQ(net.layers[avg].avg_mult, 84);   // 84 / 2^12 ~ 1/49
    EXPECT_EQ(net.layers[avg].out_shift, 12);
}

TEST(Zoo, ResNet50VariantsPlaceTheStrideDifferently) {
    const Network v1 = zoo::resnet50(zoo::ResNetVariant::V1);
    const Network v15 = zoo::resnet50(zoo::ResNetVariant::V1_5);
    const int a = v1.find_layer("layer2.0.conv1");
    EXPECT_EQ(v1.layers[a].window, Window::square(1, 2));
    EXPECT_EQ(v15.layers[a].window, Window::square(1, 1));
    EXPECT_EQ(v15.layers[v15.find_layer("layer2.0.conv2")].window, Window::square(3, 2, 1));
    EXPECT_EQ(v1.layers.back().in_shape, v15.layers.back().in_shape);
}

TEST(Network, ValidationNamesTheField) {
    Network net = zoo::resnet18();
    net.layers[3].weights.pop_back();
    try {
        net.resolve("model.h5");
        FAIL() << "expected FormatError";
    } catch (const FormatError& e) {
        EXPECT_EQ(e.source(), "model.h5");
        EXPECT_NE(e.field().find("weights"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find(net.layers[3].name), std::string::npos);
    }
}

TEST(Network, RejectsForwardReferencesAndBadShifts) {
    Network net = zoo::resnet18();
    net.layers[2].input = 5;
    EXPECT_THROW(net.resolve(), FormatError);
    net = zoo::resnet18();
    net.layers[0].out_shift = 40;
    EXPECT_THROW(net.resolve(), FormatError);
    EXPECT_THROW(layer_kind_from_string("deconv", "x.h5"), FormatError);
}

TEST(Network, RejectsAccumulatorOverflow) {
    Network net;
    net.input_shape = {1, 1, 200000};
    Layer l;
    l.name = "fc";
    l.kind = LayerKind::Linear;
    l.out_channels = 1;
    l.weights.assign(200000, 1);
    l.bias.assign(1, 0);
    net.layers.push_back(l);
    EXPECT_THROW(net.resolve(), FormatError);
}

// is_resolved makes resolve's checks without writing anything: the same FormatError (source,
// field, message) for each way a network can be invalid, false for a valid network whose shapes
// are not filled in (or are stale), true once resolve filled them; a failed resolve writes nothing.
TEST(Network, IsResolvedChecksInPlaceWithResolvesErrors) {
    const Network resolved = zoo::resnet18();
    EXPECT_TRUE(resolved.is_resolved());

    Network fresh = resolved;
    for (Layer& l : fresh.layers) l.in_shape = l.out_shape = Shape3{};
    EXPECT_FALSE(fresh.is_resolved());
    fresh.resolve();
    EXPECT_TRUE(fresh.is_resolved());
    for (std::size_t i = 0; i < fresh.layers.size(); ++i) {
        EXPECT_EQ(fresh.layers[i].in_shape, resolved.layers[i].in_shape) << i;
        EXPECT_EQ(fresh.layers[i].out_shape, resolved.layers[i].out_shape) << i;
    }

    Network stale = resolved;  // one layer's shape no longer what resolve fills in
    stale.layers[7].in_shape.w += 1;
    EXPECT_FALSE(stale.is_resolved());

    const std::vector<void (*)(Network&)> breakages = {
        [](Network& n) { n.layers[3].weights.pop_back(); },
        [](Network& n) { n.layers[2].input = 5; },
        [](Network& n) { n.layers[0].out_shift = 40; },
        [](Network& n) { n.layers[4].name = n.layers[1].name; },
        [](Network& n) { n.layers.back().residual_input = 0; },
        [](Network& n) { n.input_shape.c = 0; },
        [](Network& n) { n.output_layer = int(n.layers.size()); },
    };
    for (std::size_t b = 0; b < breakages.size(); ++b) {
        Network bad = resolved;
        breakages[b](bad);
        std::string resolve_error, check_error;
        Network copy = bad;
        try {
            copy.resolve("model.h5");
        } catch (const FormatError& e) {
            resolve_error = std::string(e.source()) + "|" + e.field() + "|" + e.what();
        }
        try {
            bad.is_resolved("model.h5");
        } catch (const FormatError& e) {
            check_error = std::string(e.source()) + "|" + e.field() + "|" + e.what();
        }
        EXPECT_FALSE(resolve_error.empty()) << "breakage " << b;
        EXPECT_EQ(check_error, resolve_error) << "breakage " << b;
        for (std::size_t i = 0; i < copy.layers.size(); ++i)  // the failed resolve wrote nothing
            EXPECT_EQ(copy.layers[i].out_shape, resolved.layers[i].out_shape) << "breakage " << b << " layer " << i;
    }
}

// require_resolved: resolve's errors for an invalid network, and for a valid one whose shapes are
// stale (edited after resolve) an error naming the first stale layer -- or input_shape when that
// is what moved -- instead of a pass run on the stale shapes.
TEST(Network, RequireResolvedNamesWhatChangedSinceResolve) {
    Network resolved;  // conv 3x3 (pad 1) -> max_pool 2x2 / 2: valid for any even input size
    resolved.input_shape = {8, 8, 1};
    Layer conv;
    conv.name = "conv";
    conv.window = Window::square(3, 1, 1);
    conv.out_channels = 4;
    conv.weights.assign(4 * 9, 1);
    conv.bias.assign(4, 0);
    Layer pool;
    pool.name = "pool";
    pool.kind = LayerKind::MaxPool;
    pool.input = 0;
    pool.window = Window::square(2, 2);
    pool.weights.clear();
    resolved.layers = {conv, pool};
    resolved.resolve();
    EXPECT_NO_THROW(resolved.require_resolved("model.h5"));
    const auto error_of = [](const Network& n) -> std::string {
        try {
            n.require_resolved("model.h5");
        } catch (const FormatError& e) {
            return std::string(e.field()) + "|" + e.what();
        }
        return "";
    };
    Network moved_input = resolved;
    moved_input.input_shape = {6, 6, 1};
    std::string what = error_of(moved_input);
    EXPECT_EQ(what.rfind("input_shape|", 0), 0u) << what;
    EXPECT_NE(what.find("changed since Network.resolve()"), std::string::npos) << what;

    Network unfilled = resolved;
    for (Layer& l : unfilled.layers) l.in_shape = l.out_shape = Shape3{};
    EXPECT_EQ(error_of(unfilled).rfind("layers/0 (" + resolved.layers[0].name + ")|", 0), 0u) << error_of(unfilled);

    Network restrided = resolved;
    restrided.layers[1].window = Window::square(2, 1);
    EXPECT_EQ(error_of(restrided).rfind("layers/1 (pool)|", 0), 0u) << error_of(restrided);

    Network bad = resolved;
    bad.layers[0].weights.pop_back();
    Network copy = bad;
    std::string resolve_error;
    try {
        copy.resolve("model.h5");
    } catch (const FormatError& e) {
        resolve_error = std::string(e.field()) + "|" + e.what();
    }
    EXPECT_EQ(error_of(bad), resolve_error);
}

// without_operands: the same network as a full copy whose weights and biases are cleared, field by
// field, and the source keeps its operands.  A network with a residual, pools and class names, so
// that every field carries a value other than its default somewhere.
TEST(Network, WithoutOperandsKeepsEveryFieldButTheWeights) {
    Network net = zoo::resnet18(7, 64, 10);
    net.class_names = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
    net.input_frac_bits = 5;
    net.output_layer = int(net.layers.size()) - 1;
    Network expected = net;
    for (auto& l : expected.layers) l.weights.clear(), l.bias.clear();

    const Network shell = net.without_operands();
    EXPECT_EQ(shell.name, expected.name);
    EXPECT_EQ(shell.input_shape, expected.input_shape);
    EXPECT_EQ(shell.input_frac_bits, expected.input_frac_bits);
    EXPECT_EQ(shell.output_layer, expected.output_layer);
    EXPECT_EQ(shell.class_names, expected.class_names);
    ASSERT_EQ(shell.layers.size(), expected.layers.size());
    bool some_residual = false, some_avg = false;
    for (std::size_t i = 0; i < shell.layers.size(); ++i) {
        const Layer& s = shell.layers[i];
        const Layer& e = expected.layers[i];
        SCOPED_TRACE(e.name);
        EXPECT_EQ(s.name, e.name);
        EXPECT_EQ(s.kind, e.kind);
        EXPECT_EQ(s.input, e.input);
        EXPECT_EQ(s.window, e.window);
        EXPECT_EQ(s.out_channels, e.out_channels);
        EXPECT_TRUE(s.weights.empty() && s.bias.empty());
        EXPECT_EQ(s.bias_shift, e.bias_shift);
        EXPECT_EQ(s.out_shift, e.out_shift);
        EXPECT_EQ(s.relu, e.relu);
        EXPECT_EQ(s.residual_input, e.residual_input);
        EXPECT_EQ(s.residual_shift, e.residual_shift);
        EXPECT_EQ(s.relu_after_residual, e.relu_after_residual);
        EXPECT_EQ(s.input_shift, e.input_shift);
        EXPECT_EQ(s.avg_mult, e.avg_mult);
        EXPECT_EQ(s.in_shape, e.in_shape);
        EXPECT_EQ(s.out_shape, e.out_shape);
        EXPECT_EQ(s.gemm_n(), e.gemm_n());
        EXPECT_EQ(s.gemm_m(), e.gemm_m());
        some_residual |= e.residual_input >= 0;
        some_avg |= e.avg_mult != 1;
    }
    EXPECT_TRUE(some_residual && some_avg);
    EXPECT_EQ(net.total_weights(), zoo::resnet18(7, 64, 10).total_weights());  // the source is untouched
}
