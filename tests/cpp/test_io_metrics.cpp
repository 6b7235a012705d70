// Activation metrics against hand-computed values and their closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
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

// snr_db is 10 log10(ref / err) correctly rounded from the exact sums: the expected bits are Python's
// decimal module at 60 digits (tests/python/test_snr_correctly_rounded.py checks thousands more).
// glibc's log10 of the rounded quotient got the first two wrong on an FMA CPU.
TEST(Metrics, SnrIsCorrectlyRoundedFromTheExactSums) {
    const auto snr = [](std::int64_t ref_energy, std::int64_t error_energy) {
        ActivationErrorSums s;
        s.ref_energy = ref_energy;
        s.error_energy = error_energy;
        return s.snr_db();
    };
    constexpr std::int64_t kTop = std::numeric_limits<std::int64_t>::max();
    EXPECT_EQ(snr(1051, 997), 0x1.d5259381eaef7p-3);
    EXPECT_EQ(snr(149964, 336), 0x1.a7f192452f0e4p+4);
    EXPECT_EQ(snr(kTop, 1), 0x1.7b4c3c4343b1dp+7);
    EXPECT_EQ(snr(1, kTop), -0x1.7b4c3c4343b1dp+7);
    // Ratios within one unit of 1, where double(ref) / double(err) would round to 1 and give 0 dB.
    EXPECT_EQ(snr((std::int64_t(1) << 53) + 1, std::int64_t(1) << 53), 0x1.15f2ced384f29p-51);
    EXPECT_EQ(snr(kTop, kTop - 1), 0x1.15f2ced384f29p-61);
    EXPECT_EQ(snr(1000, 10), 20.0);
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

namespace {
// Sums by their definition, in int64, one element at a time: the independent reference.
ActivationErrorSums definition_sums(const V& noisy, const V& ref) {
    ActivationErrorSums s;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const std::int64_t a = noisy[i], r = ref[i], d = a - r;
        s.ref_energy += r * r;
        s.noisy_energy += a * a;
        s.cross += r * a;
        s.error_energy += d * d;
        s.mismatches += d != 0;
    }
    s.count = std::int64_t(ref.size());
    return s;
}
}  // namespace

TEST(Metrics, EveryKernelGivesTheDefinitionsSumsForAnyLengthAndValues) {
    // Lengths around the 64-element vector step and the 2^15-element int32 block; random values,
    // then the extremes (every term at its largest) over more than one block.
    const auto kernels = metric_kernels();
    ASSERT_EQ(kernels.back(), "scalar");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
        ASSERT_EQ(kernels.front(), "avx512") << "the AVX-512 kernel silently dropped out";
    }
    std::uint32_t state = 12345;
    const auto next = [&] { return state = state * 1664525u + 1013904223u; };
    for (std::size_t n : {0u, 1u, 63u, 64u, 65u, 127u, 1000u, 32767u, 32768u, 32769u, 100000u}) {
        V ref(n), noisy(n);
        for (std::size_t i = 0; i < n; ++i) {
            ref[i] = std::int8_t(next() >> 24);
            noisy[i] = (next() >> 28) < 3 ? std::int8_t(next() >> 24) : ref[i];  // some equal, some not
        }
        const ActivationErrorSums expected = definition_sums(noisy, ref);
        for (const auto& kernel : kernels) {
            ActivationErrorSums got;
            got.accumulate_kernel(kernel, noisy, ref);
            EXPECT_EQ(got, expected) << kernel << ", " << n << " elements";
        }
    }
    for (const auto& [a, b] : {std::pair{std::int8_t(127), std::int8_t(-128)}, {std::int8_t(-128), std::int8_t(-128)}}) {
        const V noisy(3 * 32768 + 17, a), ref(3 * 32768 + 17, b);
        for (const auto& kernel : kernels) {
            ActivationErrorSums got;
            got.accumulate_kernel(kernel, noisy, ref);
            EXPECT_EQ(got, definition_sums(noisy, ref)) << kernel << ", extremes " << int(a) << " vs " << int(b);
        }
    }
}

TEST(Metrics, AnUnknownKernelOrSizeMismatchIsRefused) {
    ActivationErrorSums s;
    EXPECT_THROW(s.accumulate_kernel("avx9000", V{1}, V{1}), std::invalid_argument);
    EXPECT_THROW(s.accumulate_kernel("scalar", V{1, 2}, V{1}), std::invalid_argument);
}

TEST(Metrics, SumsOfPiecesAddUpToTheWhole) {
    V ref, noisy;
    for (int i = 0; i < 5000; ++i) {
        ref.push_back(std::int8_t((i * 53) % 256 - 128));
        noisy.push_back(std::int8_t((i * 53 + (i % 5 == 0 ? -7 : 0)) % 256 - 128));
    }
    ActivationErrorSums whole, first, second;
    whole.accumulate(noisy, ref);
    first.accumulate(std::span(noisy).first(1234), std::span(ref).first(1234));
    second.accumulate(std::span(noisy).subspan(1234), std::span(ref).subspan(1234));
    second += first;  // the other order
    EXPECT_EQ(second, whole);
}
