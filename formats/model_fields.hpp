// The per-layer fields of a model file, one table for every reader and writer of them: the HDF5
// model file (model_file.cpp: attribute names, read ranges) and the checking process's hand-over
// of a model it read (model_handover.cpp: the same fields, in this order).  A field added to Layer
// and to these tables is stored, read and handed over everywhere.
#pragma once
#include <cstdint>
#include <limits>

#include "formats/network.hpp"

namespace aimcemu::model_fields {

inline constexpr std::int64_t kIntMin = std::numeric_limits<int>::min();
inline constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// Layer attributes stored as scalar integers: name in the file, the member they fill, and the
// range a reader accepts (Network::resolve checks the tighter ones, naming the field).
struct IntField {
    const char* name;
    int Layer::*member;
    std::int64_t lo, hi;
};
inline constexpr IntField kInts[] = {
    {"input", &Layer::input, -1, kIntMax},
    {"out_channels", &Layer::out_channels, kIntMin, kIntMax},
    {"bias_shift", &Layer::bias_shift, kIntMin, kIntMax},
    {"out_shift", &Layer::out_shift, kIntMin, kIntMax},
    {"residual_input", &Layer::residual_input, -1, kIntMax},
    {"residual_shift", &Layer::residual_shift, kIntMin, kIntMax},
    {"input_shift", &Layer::input_shift, kIntMin, kIntMax},
    {"avg_mult", &Layer::avg_mult, kIntMin, kIntMax},
};

// The window (model file version 2): every layer stores all eight, 1x1 / 1 / 0 where it has no
// window.  Network::resolve checks their ranges, naming the field.
struct WindowField {
    const char* name;
    int Window::*member;
};
inline constexpr WindowField kWindow[] = {
    {"kernel_h", &Window::kernel_h}, {"kernel_w", &Window::kernel_w}, {"stride_h", &Window::stride_h},
    {"stride_w", &Window::stride_w}, {"pad_top", &Window::pad_top},   {"pad_bottom", &Window::pad_bottom},
    {"pad_left", &Window::pad_left}, {"pad_right", &Window::pad_right},
};

// Layer attributes stored as int8 flags (0 or 1).
struct FlagField {
    const char* name;
    bool Layer::*member;
};
inline constexpr FlagField kFlags[] = {{"relu", &Layer::relu}, {"relu_after_residual", &Layer::relu_after_residual}};

}  // namespace aimcemu::model_fields
