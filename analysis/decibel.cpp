// decibel_ratio: 10 log10 of an integer ratio in double-double arithmetic (see decibel.hpp for why).
//
// Every step is an IEEE binary64 +, -, * or / (Dekker/Knuth error-free transformations), so the
// result is the same wherever binary64 is.  The CMake build compiles this file with
// -ffp-contract=off: a product fused into an FMA would break the error terms of two_prod and
// two_sum, and with them the determinism.
#include "analysis/decibel.hpp"

#include <bit>
#include <stdexcept>

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace aimcemu {

namespace {

// An unevaluated sum hi + lo with |lo| <= ulp(hi) / 2: about 106 significant bits.
struct DoubleDouble {
    double hi = 0.0, lo = 0.0;
};

// a + b exactly as s + err (Knuth), any magnitudes.
DoubleDouble two_sum(double a, double b) {
    const double s = a + b;
    const double b_virtual = s - a;
    const double err = (a - (s - b_virtual)) + (b - b_virtual);
    return {s, err};
}

// a + b exactly as s + err, for |a| >= |b| (Dekker).
DoubleDouble quick_two_sum(double a, double b) {
    const double s = a + b;
    return {s, b - (s - a)};
}

// a = hi + lo with each half fitting in 26 bits, so their products are exact (Dekker).
DoubleDouble split(double a) {
    const double t = 134217729.0 * a;  // 2^27 + 1
    const double hi = t - (t - a);
    return {hi, a - hi};
}

// a * b exactly as p + err (Dekker), without an FMA.
DoubleDouble two_prod(double a, double b) {
    const double p = a * b;
    const DoubleDouble as = split(a), bs = split(b);
    const double err = ((as.hi * bs.hi - p) + as.hi * bs.lo + as.lo * bs.hi) + as.lo * bs.lo;
    return {p, err};
}

DoubleDouble add(DoubleDouble a, DoubleDouble b) {
    DoubleDouble s = two_sum(a.hi, b.hi);
    const DoubleDouble t = two_sum(a.lo, b.lo);
    s = quick_two_sum(s.hi, s.lo + t.hi);
    return quick_two_sum(s.hi, s.lo + t.lo);
}

DoubleDouble add(DoubleDouble a, double b) {
    const DoubleDouble s = two_sum(a.hi, b);
    return quick_two_sum(s.hi, s.lo + a.lo);
}

DoubleDouble negate(DoubleDouble a) { return {-a.hi, -a.lo}; }

DoubleDouble mul(DoubleDouble a, double b) {
    const DoubleDouble p = two_prod(a.hi, b);
    return quick_two_sum(p.hi, p.lo + a.lo * b);
}

DoubleDouble mul(DoubleDouble a, DoubleDouble b) {
    const DoubleDouble p = two_prod(a.hi, b.hi);
    return quick_two_sum(p.hi, p.lo + (a.hi * b.lo + a.lo * b.hi));
}

// a / b from three quotient digits, each taken from the remainder of the previous ones.
DoubleDouble div(DoubleDouble a, DoubleDouble b) {
    const double q1 = a.hi / b.hi;
    DoubleDouble r = add(a, negate(mul(b, q1)));
    const double q2 = r.hi / b.hi;
    r = add(r, negate(mul(b, q2)));
    const double q3 = r.hi / b.hi;
    return add(quick_two_sum(q1, q2), q3);
}

// An unsigned integer below 2^106, exactly.
DoubleDouble exactly(unsigned __int128 x) {
    const unsigned __int128 low_mask = (unsigned __int128)(1) << 53;
    const double high_part = double(std::uint64_t(x >> 53)) * 0x1p53;  // both halves below 2^53: exact
    const double low_part = double(std::uint64_t(x & (low_mask - 1)));
    return two_sum(high_part, low_part);
}

// ln 2 and 10 / ln 10 to about 2^-110 (hi = the nearest double, lo = the nearest double to the rest).
constexpr DoubleDouble kLn2{0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56};
constexpr DoubleDouble kTenOverLn10{0x1.15f2ced384f29p+2, -0x1.02bea6b55233cp-53};

// 2 atanh(f) = ln((1 + f) / (1 - f)) for |f| <= 0.18: the series 2 (f + f^3/3 + f^5/5 + ...) to
// f^45 / 45, whose first omitted term is below 2^-120 of f.  A fixed length, summed by Horner's rule.
DoubleDouble two_atanh(DoubleDouble f) {
    constexpr int kLastPower = 45;
    const DoubleDouble f2 = mul(f, f);
    DoubleDouble sum = div({1.0, 0.0}, {double(kLastPower), 0.0});
    for (int power = kLastPower - 2; power >= 1; power -= 2)
        sum = add(mul(sum, f2), div({1.0, 0.0}, {double(power), 0.0}));
    return mul(mul(f, sum), 2.0);
}

// ln(numerator / denominator) = k ln 2 + 2 atanh((r - e) / (r + e)) with r / e = numerator /
// (denominator 2^k) in [5/7, 1.43], where r and e are exact integers.  Forming r - e in integers
// keeps the result's relative error small even when the ratio is within 2^-60 of 1.
DoubleDouble ln_ratio(std::uint64_t numerator, std::uint64_t denominator) {
    int k = int(std::bit_width(numerator)) - int(std::bit_width(denominator));
    unsigned __int128 r = numerator, e = denominator;
    if (k > 0) e <<= k;
    else r <<= -k;  // now r / e lies in (1/2, 2), and both are below 2^63
    if (5 * r > 7 * e) {
        e <<= 1;
        ++k;
    } else if (7 * r < 5 * e) {
        r <<= 1;
        --k;
    }
    const DoubleDouble difference = r >= e ? exactly(r - e) : negate(exactly(e - r));
    const DoubleDouble f = div(difference, exactly(r + e));
    return add(mul(kLn2, double(k)), two_atanh(f));
}

}  // namespace

double decibel_ratio(std::int64_t numerator, std::int64_t denominator) {
    if (numerator <= 0 || denominator <= 0)
        throw std::invalid_argument("decibel_ratio: the integers must be positive");
    const DoubleDouble db = mul(ln_ratio(std::uint64_t(numerator), std::uint64_t(denominator)), kTenOverLn10);
    return db.hi + db.lo;
}

}  // namespace aimcemu
