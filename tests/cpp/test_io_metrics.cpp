// Activation metrics against hand-computed values and their closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "analysis/metrics.hpp"
#include "analysis/metrics_kernels.hpp"
#include "cpuid_features.hpp"

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

// What metric_kernels() must list on this CPU, from CPUID read by the test itself
// (cpuid_features.hpp), so a broken CPU check fails here as well as a kernel that dropped out.
std::vector<std::string> kernels_this_cpu_should_list() {
    const test_cpu::VectorFeatures cpu = test_cpu::vector_features();
    std::vector<std::string> expected;
    if (cpu.avx512f && cpu.avx512bw) expected.push_back("avx512");
    if (cpu.avx2 && cpu.popcnt) expected.push_back("avx2");
    expected.push_back("scalar");
    return expected;
}

// Runs `kernel` on noisy[offset, offset + n) and ref[offset, offset + n).
ActivationErrorSums kernel_sums(const std::string& kernel, const V& noisy, const V& ref, std::size_t offset = 0) {
    ActivationErrorSums got;
    got.accumulate_kernel(kernel, std::span(noisy).subspan(offset), std::span(ref).subspan(offset));
    return got;
}

// Random values, about one pair in five different (so both the mismatch count and the equal
// pairs are exercised).
std::pair<V, V> random_pairs(std::size_t n, std::uint32_t seed) {
    std::uint32_t state = seed;
    const auto next = [&] { return state = state * 1664525u + 1013904223u; };
    V noisy(n), ref(n);
    for (std::size_t i = 0; i < n; ++i) {
        ref[i] = std::int8_t(next() >> 24);
        noisy[i] = (next() >> 28) < 3 ? std::int8_t(next() >> 24) : ref[i];
    }
    return {noisy, ref};
}

constexpr std::size_t kBlock = detail::kMetricBlock;

}  // namespace

TEST(Metrics, TheKernelListHasEveryKernelThisCpuCanRunFastestFirst) {
    EXPECT_EQ(metric_kernels(), kernels_this_cpu_should_list());
}

TEST(Metrics, AKernelThisCpuLacksIsRefusedByName) {
    const auto listed = kernels_this_cpu_should_list();
    ActivationErrorSums s;
    for (const char* kernel : {"avx512", "avx2"}) {
        if (std::find(listed.begin(), listed.end(), kernel) != listed.end()) continue;
        try {
            s.accumulate_kernel(kernel, V{1}, V{1});
            ADD_FAILURE() << kernel << " ran on a CPU without it";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("'") + kernel + "' is not available"), std::string::npos)
                << e.what();
        }
    }
    EXPECT_EQ(s, ActivationErrorSums{});  // nothing half-added
}

TEST(Metrics, EveryKernelGivesTheDefinitionsSumsForAnyLengthAndValues) {
    // Every length up to 200 (the 32- and 64-element vector steps and their tails), then lengths
    // around the int32 block and twice it, each also starting one byte in, so a vector step
    // straddles the block boundary at an odd address.
    std::vector<std::size_t> lengths;
    for (std::size_t n = 0; n <= 200; ++n) lengths.push_back(n);
    for (std::size_t n : {std::size_t(1000), kBlock - 33, kBlock - 1, kBlock, kBlock + 1, kBlock + 31, kBlock + 33,
                          2 * kBlock - 1, 2 * kBlock, 2 * kBlock + 1, 2 * kBlock + 17, std::size_t(100000)})
        lengths.push_back(n);
    for (std::size_t n : lengths) {
        for (std::size_t offset : {0, 1}) {
            const auto [noisy, ref] = random_pairs(n + offset, std::uint32_t(12345 + n));
            const V noisy_part(noisy.begin() + offset, noisy.end()), ref_part(ref.begin() + offset, ref.end());
            const ActivationErrorSums expected = definition_sums(noisy_part, ref_part);
            ASSERT_EQ(kernel_sums("scalar", noisy, ref, offset), expected) << n << " elements";
            for (const auto& kernel : metric_kernels())
                EXPECT_EQ(kernel_sums(kernel, noisy, ref, offset), expected)
                    << kernel << ", " << n << " elements from offset " << offset;
        }
    }
}

TEST(Metrics, EveryKernelSumsTheExtremesExactlyAcrossBlocks) {
    // Every term at its largest (255^2 for the error, 128^2 for the energies and the cross term)
    // at lengths around one and two int32 blocks, and over 20 blocks: there a kernel that let its
    // int32 lanes run past a block would overflow even with 16 lanes
    // (20 * 2^15 / 16 * 65025 > 2^31).
    using P = std::pair<std::int8_t, std::int8_t>;
    for (const auto& [a, b] : {P{127, -128}, P{-128, 127}, P{-128, -128}, P{0, -128}}) {
        for (std::size_t n : {kBlock - 1, kBlock, kBlock + 1, 2 * kBlock - 1, 2 * kBlock, 2 * kBlock + 1,
                              3 * kBlock + 17, 20 * kBlock + 17}) {
            const V noisy(n, a), ref(n, b);
            const ActivationErrorSums expected = definition_sums(noisy, ref);
            for (const auto& kernel : metric_kernels())
                EXPECT_EQ(kernel_sums(kernel, noisy, ref), expected)
                    << kernel << ", " << n << " elements of " << int(a) << " vs " << int(b);
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
