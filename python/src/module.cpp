// The aimcemu._core extension: runs every registered binding function in order.
#include "bindings.hpp"

#include <stdexcept>

#include "common/errors.hpp"

PYBIND11_MODULE(_core, m) {
    m.doc() = "aimcemu C++ core: PU model, noise models, NIU, HDF5 results";
    // FormatError names the file and the field; Python sees it as aimcemu.FormatError (a ValueError).
    pybind11::register_exception<aimcemu::FormatError>(m, "FormatError", PyExc_ValueError);
    for (auto& [order, fn] : aimcemu::bindings::binding_registry()) fn(m);
}
