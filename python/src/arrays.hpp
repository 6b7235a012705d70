// The one int8 check of the bindings.  INT8 data (images, weights, activations) must arrive as
// numpy int8 arrays: a silent cast from another dtype would hide a quantization bug.  Every
// binding that takes int8 data calls require_int8, so the rule and its error read the same
// everywhere: FormatError(source, field, "expected a numpy int8 array, got ...").
#pragma once
#include <cstdint>
#include <string>

#include <pybind11/numpy.h>

#include "common/errors.hpp"

namespace aimcemu::bindings {

using Int8Array = pybind11::array_t<std::int8_t, pybind11::array::c_style>;

// `obj` as a C-contiguous int8 array (copied only when it is not contiguous); with ndim >= 0
// the rank must match too.
inline Int8Array require_int8(const pybind11::handle& obj, const std::string& source, const std::string& field,
                              int ndim = -1) {
    namespace py = pybind11;
    if (!py::isinstance<py::array>(obj))
        throw FormatError(source, field, "expected a numpy int8 array, got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
    const auto array = py::reinterpret_borrow<py::array>(obj);
    if (!array.dtype().is(py::dtype::of<std::int8_t>()))
        throw FormatError(source, field, "expected a numpy int8 array, got dtype " + std::string(py::str(array.dtype())));
    if (ndim >= 0 && array.ndim() != ndim)
        throw FormatError(source, field, "expected " + std::to_string(ndim) + " dimensions, got " + std::to_string(array.ndim()));
    return Int8Array::ensure(array);
}

}  // namespace aimcemu::bindings
