// Activation metrics against hand-computed values and their closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "analysis/metrics.hpp"

using namespace aimcemu;

namespace {
using V = std::vector<std::int8_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST(Metrics, HandComputedSmallVectors) {
    const V ref{3, -4, 0, 12};
    const V noisy{3, -2, 1, 12};
    // sum ref^2 = 9 + 16 + 0 + 144 = 169; error = (0, 2, 1, 0) -> 5.
    EXPECT_DOUBLE_EQ(snr_db(noisy, ref), 10.0 * std::log10(169.0 / 5.0));
    // cross = 9 + 8 + 0 + 144 = 161; sum noisy^2 = 9 + 4 + 1 + 144 = 158.
    EXPECT_DOUBLE_EQ(cosine_similarity(noisy, ref), 161.0 / std::sqrt(169.0 * 158.0));
    EXPECT_DOUBLE_EQ(mismatch_rate(noisy, ref), 0.5);
}

TEST(Metrics, EqualArraysAreInfiniteSnrUnitCosineNoMismatch) {
    const V a{-128, 127, 5, 0};
    EXPECT_EQ(snr_db(a, a), kInf);
    EXPECT_DOUBLE_EQ(cosine_similarity(a, a), 1.0);
    EXPECT_EQ(mismatch_rate(a, a), 0.0);
}

TEST(Metrics, ZeroEdgeCasesFollowTheDocumentedConventions) {
    const V zeros{0, 0, 0}, some{0, 1, 0};
    EXPECT_EQ(snr_db(zeros, zeros), kInf);
    EXPECT_EQ(snr_db(some, zeros), -kInf);
    EXPECT_EQ(cosine_similarity(zeros, zeros), 1.0);
    EXPECT_EQ(cosine_similarity(some, zeros), 0.0);
    EXPECT_EQ(cosine_similarity(zeros, some), 0.0);
    EXPECT_EQ(mismatch_rate(V{}, V{}), 0.0);
    EXPECT_DOUBLE_EQ(mismatch_rate(some, zeros), 1.0 / 3.0);
}

TEST(Metrics, SignFlipGivesCosineMinusOneAndSnrMinusSixDb) {
    // noisy = -ref: error = 2 ref, so SNR = 10 log10(1/4) = -6.0206 dB exactly.
    const V ref{1, -2, 3, 100}, flipped{-1, 2, -3, -100};
    EXPECT_DOUBLE_EQ(cosine_similarity(flipped, ref), -1.0);
    EXPECT_DOUBLE_EQ(snr_db(flipped, ref), 10.0 * std::log10(0.25));
}

TEST(Metrics, ExtremeValuesAccumulateExactly) {
    // 1e6 elements of (-128 vs 127): every sum is far beyond int32 but exact in int64.
    const V ref(1000000, -128), noisy(1000000, 127);
    ActivationErrorSums s;
    s.accumulate(noisy, ref);
    // The sums run in int32 blocks (metrics.cpp): a block too long for 255^2 per element would
    // overflow here.
    EXPECT_EQ(s.error_energy, 255LL * 255 * 1000000);
    EXPECT_EQ(s.cross, -128LL * 127 * 1000000);
    EXPECT_EQ(s.ref_energy, 128LL * 128 * 1000000);
    EXPECT_EQ(s.noisy_energy, 127LL * 127 * 1000000);
    EXPECT_EQ(s.mismatches, 1000000);
    EXPECT_EQ(s.count, 1000000);
    EXPECT_DOUBLE_EQ(s.snr_db(), 10.0 * std::log10(128.0 * 128.0 / (255.0 * 255.0)));
}

TEST(Metrics, StreamingInPiecesEqualsOneShot) {
    V ref, noisy;
    for (int i = 0; i < 1000; ++i) {
        ref.push_back(std::int8_t((i * 37) % 256 - 128));
        noisy.push_back(std::int8_t((i * 37 + (i % 7 == 0 ? 3 : 0)) % 256 - 128));
    }
    ActivationErrorSums pieces;
    for (std::size_t start = 0; start < ref.size(); start += 300) {
        const std::size_t n = std::min<std::size_t>(300, ref.size() - start);
        pieces.accumulate(std::span(noisy).subspan(start, n), std::span(ref).subspan(start, n));
    }
    EXPECT_EQ(pieces.snr_db(), snr_db(noisy, ref));
    EXPECT_EQ(pieces.cosine(), cosine_similarity(noisy, ref));
    EXPECT_EQ(pieces.mismatch_rate(), mismatch_rate(noisy, ref));
    EXPECT_NEAR(pieces.mismatch_rate(), 143.0 / 1000.0, 0.0);  // i % 7 == 0 for 143 of 0..999
}

TEST(Metrics, SizeMismatchThrows) {
    EXPECT_THROW(snr_db(V{1, 2}, V{1}), std::invalid_argument);
}
