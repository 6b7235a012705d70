// 10 log10 of a ratio of two exact integer sums, the same bits on every CPU, compiler and C library.
//
// Why not std::log10: the C library's log10 is not correctly rounded, and glibc picks an FMA or a
// non-FMA variant by CPU (other libms differ again), so the same int64 sums could store SNRs that
// differ in the last bit from machine to machine (about 1 value in 10^5).  decibel.cpp evaluates
// the logarithm in double-double arithmetic from the integers themselves, with only IEEE +, -, *
// and / (no FMA contraction, no libm call), to about 2^-100 relative error, then rounds once to
// double: the result is the correctly rounded 10 log10(numerator / denominator) except when that
// value lies within ~2^-100 (relative) of a halfway point between two doubles, and whatever it is,
// it is a fixed function of the two integers.
#pragma once
#include <cstdint>

namespace aimcemu {

// 10 log10(numerator / denominator) for numerator > 0 and denominator > 0 (std::invalid_argument
// otherwise).
double decibel_ratio(std::int64_t numerator, std::int64_t denominator);

}  // namespace aimcemu
