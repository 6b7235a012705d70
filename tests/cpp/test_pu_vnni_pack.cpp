// The vectorised VNNI weight packer (detail::vnni_pack_weights_avx512) against the definition:
// the same bytes as the scalar vnni_pack_weights, every byte of the packed size written, row sums
// and 128 x segment prefix sums equal to sums taken here over the plain weights.  Every noisy
// pass packs every AIMC layer with it, so a wrong byte here is a wrong noisy round.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <pcg_random.hpp>

#include "pu_model/gemm.hpp"

using namespace aimcemu;

namespace {

// Uniform int8 with the extremes forced in, so that sums reach their bounds somewhere.
std::vector<std::int8_t> weights_with_extremes(pcg32& rng, std::int64_t n, std::int64_t m) {
    std::vector<std::int8_t> w(std::size_t(n * m));
    for (auto& v : w) v = std::int8_t(std::int32_t(rng(256)) - 128);
    if (!w.empty()) {
        w.front() = -128;
        w.back() = 127;
    }
    return w;
}

struct Shape {
    std::int64_t n, m, segment;
};

}  // namespace

TEST(VnniPack, OnePassEqualsTheDefinitionWithItsRowAndSegmentSums) {
    if (!detail::cpu_has_vnni512()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    pcg32 rng(2026, 12);
    // Channel counts around the 16-lane vector and the 64-channel panel; depths from one dword to
    // ResNet-50's deepest 3x3 kernel; segments of conv kernel rows (and none).
    const std::vector<Shape> shapes = {{1, 4, 0},    {15, 8, 4},    {16, 64, 0},    {17, 60, 12},  {63, 192, 64},
                                       {64, 68, 0},  {65, 576, 192}, {130, 36, 12}, {200, 4608, 1536},
                                       {1000, 2048, 0}};
    for (const Shape& s : shapes) {
        SCOPED_TRACE("n=" + std::to_string(s.n) + " m=" + std::to_string(s.m) + " segment=" + std::to_string(s.segment));
        const auto w = weights_with_extremes(rng, s.n, s.m);
        const std::size_t size = std::size_t(detail::vnni_packed_size(s.n, s.m));
        std::vector<std::int8_t> expected(size);
        detail::vnni_pack_weights(w.data(), s.n, s.m, expected.data());
        std::vector<std::int8_t> packed(size, std::int8_t(0x5A));   // garbage: every byte must be written
        const std::int64_t channels = (s.n + 63) / 64 * 64, segments = s.segment ? s.m / s.segment : 0;
        const std::int32_t untouched = 0x7EADBEEF;
        std::vector<std::int32_t> rowsum(std::size_t(s.n), untouched);
        std::vector<std::int32_t> segment_sums(std::size_t((segments + 1) * channels), untouched);
        detail::vnni_pack_weights_avx512(w.data(), s.n, s.m, packed.data(), rowsum.data(),
                                         {s.segment, s.segment ? segment_sums.data() : nullptr, channels});
        ASSERT_EQ(packed, expected);
        for (std::int64_t row = 0; row < s.n; ++row) {
            std::int64_t sum = 0;
            for (std::int64_t k = 0; k < s.m; ++k) {
                sum += w[std::size_t(row * s.m + k)];
                if (s.segment && (k + 1) % s.segment == 0)   // 128 x the prefix sum, modulo 2^32
                    ASSERT_EQ(segment_sums[std::size_t((k + 1) / s.segment * channels + row)],
                              std::int32_t(std::uint32_t(std::uint64_t(128 * sum))))
                        << "row " << row << " boundary " << (k + 1);
            }
            ASSERT_EQ(rowsum[std::size_t(row)], sum) << "row " << row;
        }
        // Boundary 0 and the padding channels are the caller's (zeros there): never written.
        for (std::int64_t j = 0; j <= segments; ++j)
            for (std::int64_t row = j == 0 ? 0 : s.n; row < channels; ++row)
                ASSERT_EQ(segment_sums[std::size_t(j * channels + row)], untouched) << "j " << j << " row " << row;
    }
}

TEST(VnniPack, PackedWeightsGiveTheSameProductsWhicheverPackerRan) {
    // m % 4 != 0 goes through the definition; m % 4 == 0 through the one pass.  Both must give
    // the reference GEMM's accumulators (the column term carries the row sums).
    if (!detail::cpu_has_vnni512()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
    pcg32 rng(7, 3);
    for (const std::int64_t m : {147, 148, 576}) {
        SCOPED_TRACE("m=" + std::to_string(m));
        const std::int64_t n = 70, p = 9;
        const auto w = weights_with_extremes(rng, n, m);
        const auto x = weights_with_extremes(rng, p, m);
        std::vector<std::int8_t> bias(static_cast<std::size_t>(n));
        for (auto& b : bias) b = std::int8_t(std::int32_t(rng(256)) - 128);
        std::vector<std::int32_t> fast(std::size_t(n * p)), reference(std::size_t(n * p));
        gemm_fast(w.data(), x.data(), bias.data(), 3, n, m, p, fast.data(), 1, FastKernel::Vnni512);
        gemm_reference(w.data(), x.data(), m, bias.data(), 3, n, m, p, reference.data());
        ASSERT_EQ(fast, reference);
    }
}
