// GoogleTest expectations that two networks are the same in every field a model file holds (the
// tests of model files and of files replaced while they load compare a loaded network with the
// one saved).  Weights and biases are compared whole and reported by layer name, not printed: a
// ResNet's layers hold millions of them.
#pragma once
#include <gtest/gtest.h>

#include "formats/network.hpp"

inline void expect_same_network(const aimcemu::Network& a, const aimcemu::Network& b) {
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.input_shape, b.input_shape);
    EXPECT_EQ(a.input_frac_bits, b.input_frac_bits);
    EXPECT_EQ(a.output_layer, b.output_layer);
    EXPECT_EQ(a.class_names, b.class_names);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (std::size_t i = 0; i < a.layers.size(); ++i) {
        const aimcemu::Layer &x = a.layers[i], &y = b.layers[i];
        SCOPED_TRACE(x.name);
        EXPECT_EQ(x.name, y.name);
        EXPECT_EQ(x.kind, y.kind);
        EXPECT_EQ(x.input, y.input);
        EXPECT_EQ(x.window, y.window);
        EXPECT_EQ(x.out_channels, y.out_channels);
        EXPECT_TRUE(x.weights == y.weights) << "weights of " << x.name;
        EXPECT_TRUE(x.bias == y.bias) << "bias of " << x.name;
        EXPECT_EQ(x.bias_shift, y.bias_shift);
        EXPECT_EQ(x.out_shift, y.out_shift);
        EXPECT_EQ(x.relu, y.relu);
        EXPECT_EQ(x.residual_input, y.residual_input);
        EXPECT_EQ(x.residual_shift, y.residual_shift);
        EXPECT_EQ(x.relu_after_residual, y.relu_after_residual);
        EXPECT_EQ(x.input_shift, y.input_shift);
        EXPECT_EQ(x.avg_mult, y.avg_mult);
        EXPECT_EQ(x.in_shape, y.in_shape);
        EXPECT_EQ(x.out_shape, y.out_shape);
    }
}
