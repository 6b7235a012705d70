// The structure record a checking process hands a model over in (formats/model_handover.hpp):
// every field a model file holds comes back as it went in, and a record that is not whole, ends
// early, runs on or holds a value no model file can is refused naming the file, never read past
// (the ASan build runs these too).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "formats/model_handover.hpp"
#include "formats/zoo.hpp"
#include "expect_same_network.hpp"

using namespace aimcemu;

namespace {

// Every layer kind, and each field of each layer set to a value no other field holds, so that a
// record that swapped, dropped or truncated any of them would decode to another network.
Network every_field_network() {
    Network net;
    net.name = "every field \xC3\xA9";
    net.input_shape = {9, 7, 3};
    net.input_frac_bits = 5;
    net.output_layer = 4;
    net.class_names = {"cat", "", "dog \xE2\x9C\x93"};
    Layer conv;
    conv.name = "conv";
    conv.kind = LayerKind::Conv;
    conv.window = {3, 2, 2, 1, 1, 0, 1, 1};
    conv.out_channels = 4;
    conv.weights.resize(4 * 3 * 2 * 3);
    for (std::size_t i = 0; i < conv.weights.size(); ++i) conv.weights[i] = std::int8_t(int(i * 37) % 256 - 128);
    conv.bias = {-128, 0, 5, 127};
    conv.bias_shift = 3;
    conv.out_shift = 9;
    conv.relu = true;
    Layer pool;
    pool.name = "pool";
    pool.kind = LayerKind::MaxPool;
    pool.input = 0;
    pool.window = Window::square(2, 2);
    pool.out_channels = 4;
    Layer add;
    add.name = "add";
    add.kind = LayerKind::Add;
    add.input = 1;
    add.residual_input = 1;
    add.residual_shift = -2;
    add.input_shift = 1;
    add.relu_after_residual = true;
    add.out_channels = 4;
    Layer avg;
    avg.name = "avg";
    avg.kind = LayerKind::AvgPool;
    avg.input = 2;
    avg.window = Window::square(2, 1);
    avg.avg_mult = 77;
    avg.out_channels = 4;
    Layer fc;
    fc.name = "fc";
    fc.kind = LayerKind::Linear;
    fc.input = 3;
    fc.out_channels = 3;
    fc.weights.resize(3 * 12);  // M = 1 x 3 x 4: the average pool's output
    for (std::size_t i = 0; i < fc.weights.size(); ++i) fc.weights[i] = std::int8_t(i * 7 % 251);
    fc.bias = {1, -2, 3};
    fc.out_shift = 4;
    net.layers = {conv, pool, add, avg, fc};
    net.resolve();
    return net;
}

struct Encoded {
    std::string record;
    std::vector<std::int8_t> weights;
};

Encoded encode(const Network& net) {
    Encoded e;
    std::vector<std::uint64_t> counts;
    for (const auto& l : net.layers)
        if (l.is_gemm()) {
            e.weights.insert(e.weights.end(), l.weights.begin(), l.weights.end());
            counts.push_back(l.weights.size());
        }
    e.record = encode_model_structure(net, counts);
    return e;
}

Network decode(const std::string& record, const std::vector<std::int8_t>& weights) {
    Network net = decode_model_structure(record, weights, "m.h5");
    net.resolve("m.h5");
    return net;
}

std::string error_of(const std::string& record, const std::vector<std::int8_t>& weights) {
    try {
        decode_model_structure(record, weights, "m.h5");
    } catch (const FormatError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(ModelHandOver, EveryFieldComesBackAsItWentIn) {
    const Network net = every_field_network();
    const Encoded e = encode(net);
    expect_same_network(decode(e.record, e.weights), net);
    const Network resnet = zoo::resnet18(4, 32, 10);
    const Encoded r = encode(resnet);
    expect_same_network(decode(r.record, r.weights), resnet);
}

// A plausible wrong codec fails the equality above: a record whose bias_shift and out_shift were
// swapped, or whose weights were taken from the wrong offset, decodes to another network.
TEST(ModelHandOver, TheEqualityCatchesASwappedFieldOrShiftedWeights) {
    const Network net = every_field_network();
    Network swapped = net;
    std::swap(swapped.layers[0].bias_shift, swapped.layers[0].out_shift);
    const Encoded e = encode(swapped);
    const Network back = decode_model_structure(e.record, e.weights, "m.h5");
    EXPECT_NE(back.layers[0].out_shift, net.layers[0].out_shift);
    Encoded shifted = encode(net);
    std::rotate(shifted.weights.begin(), shifted.weights.begin() + 1, shifted.weights.end());
    EXPECT_NE(decode_model_structure(shifted.record, shifted.weights, "m.h5").layers[0].weights, net.layers[0].weights);
}

TEST(ModelHandOver, EveryCutOfARecordIsRefused) {
    const Encoded e = encode(every_field_network());
    for (std::size_t size = 0; size < e.record.size(); ++size) {
        const std::string message = error_of(e.record.substr(0, size), e.weights);
        EXPECT_EQ(message.rfind("m.h5: field 'file': the file check handed over a damaged model (", 0), 0u)
            << "cut to " << size << " bytes: " << message;
    }
    EXPECT_NE(error_of(e.record + "x", e.weights).find("bytes after the last layer"), std::string::npos);
}

TEST(ModelHandOver, WeightsMustBeUsedUpExactly) {
    Encoded e = encode(every_field_network());
    e.weights.push_back(1);
    EXPECT_NE(error_of(e.record, e.weights).find("1 weights handed over that no layer takes"), std::string::npos);
    e.weights.resize(e.weights.size() - 2);
    EXPECT_NE(error_of(e.record, e.weights).find("its weights run past"), std::string::npos);
}

// Any byte of a record changed to any value: the decoder refuses it or returns a network (which
// the caller's graph checks then judge), and never reads past the record or allocates for a
// count the record cannot hold.
TEST(ModelHandOver, AnyChangedByteIsRefusedOrDecodedNeverReadPast) {
    const Encoded e = encode(every_field_network());
    int refused = 0, decoded = 0;
    for (std::size_t at = 0; at < e.record.size(); ++at)
        for (const int value : {0x00, 0x01, 0x7F, 0x80, 0xFF}) {
            std::string changed = e.record;
            if (changed[at] == char(value)) continue;
            changed[at] = char(value);
            try {
                const Network net = decode_model_structure(changed, e.weights, "m.h5");
                ++decoded;
                EXPECT_LE(net.layers.size(), changed.size());
            } catch (const FormatError& err) {
                ++refused;
                EXPECT_EQ(std::string(err.what()).rfind("m.h5: field 'file': ", 0), 0u) << err.what();
            }
        }
    EXPECT_GT(refused, 0);
    EXPECT_GT(decoded, 0);
}

TEST(ModelHandOver, AnUnknownKindOrFlagIsRefused) {
    const Network net = every_field_network();
    Encoded e = encode(net);
    // The first layer's kind byte follows the tag, the network's fields and the layer's name.
    std::size_t at = kModelStructureTag.size() + 4 + net.name.size() + 5 * 4 + 4;
    for (const auto& c : net.class_names) at += 4 + c.size();
    at += 4 + 4 + net.layers[0].name.size();
    ASSERT_EQ(e.record[at], char(LayerKind::Conv));
    std::string bad_kind = e.record;
    bad_kind[at] = 9;
    EXPECT_NE(error_of(bad_kind, e.weights).find("unknown layer kind 9"), std::string::npos);
    std::string bad_flag = e.record;
    bad_flag[at + 1 + 8 * 4 + 8 * 4] = 2;  // relu, after the kind, kInts and kWindow
    EXPECT_NE(error_of(bad_flag, e.weights).find("relu is not a flag"), std::string::npos);
}
