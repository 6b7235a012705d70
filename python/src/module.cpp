// The aimcemu._core extension: runs every registered binding function in order.
#include "bindings.hpp"

#include <stdexcept>
#include <string>

#include "common/errors.hpp"

namespace py = pybind11;

namespace {

// Whether `self`, an instance of a class of this module, holds its C++ object already.
bool initialized(py::handle self) {
    return reinterpret_cast<py::detail::instance*>(self.ptr())->get_value_and_holder().instance_registered();
}

// pybind11 ignores __init__ called again on a live object (it returns None and changes nothing:
// it cannot rebuild the C++ object under references to it, such as the items of net.layers), so
// `net.__init__()` read as a reset that did not happen.  The class's __init__ is replaced by one
// that refuses that with a TypeError naming the class, and otherwise runs the class's own.
void refuse_second_init(const py::handle& cls) {
    const py::object own = cls.attr("__init__");
    const std::string name = py::str(cls.attr("__module__")).cast<std::string>() + "." +
                             py::str(cls.attr("__qualname__")).cast<std::string>();
    const py::object own_doc = own.attr("__doc__");
    const std::string doc = own_doc.is_none() ? std::string() : own_doc.cast<std::string>();  // copied by pybind11
    const py::cpp_function guarded(
        [own, name, of_class = py::reinterpret_borrow<py::object>(cls)](py::handle self, py::args args,
                                                                          py::kwargs kwargs) {
            // Another type's object (Network.__init__(5)) is not a pybind11 instance of this class:
            // the class's own __init__ refuses it with pybind11's TypeError.
            if (py::isinstance(self, of_class) && initialized(self))
                throw py::type_error(name + ".__init__: the object is initialized already; make a new " + name +
                                     " instead of calling __init__ again");
            own(self, *args, **kwargs);
        },
        // Not named "__init__": pybind11 takes a function of that name for a constructor and
        // would skip it on a live object, as it does the class's own.
        py::name("init_unless_initialized"), py::is_method(cls), py::doc(doc.c_str()));
    py::setattr(cls, "__init__", guarded);
}

// Every class this module (or a submodule) defines with a constructor of its own, once.
void refuse_second_init_in(const py::module_& m, py::set& done) {
    for (const auto& [key, value] : m.attr("__dict__").cast<py::dict>()) {
        if (py::isinstance<py::module_>(value)) {
            const auto sub = value.cast<py::module_>();
            const std::string prefix = m.attr("__name__").cast<std::string>() + ".";
            if (sub.attr("__name__").cast<std::string>().rfind(prefix, 0) == 0) refuse_second_init_in(sub, done);
            continue;
        }
        const bool bound_here = py::isinstance<py::type>(value) &&
                                py::detail::get_type_info(reinterpret_cast<PyTypeObject*>(value.ptr())) != nullptr;
        if (!bound_here) continue;  // an exception type, a constant
        if (done.contains(value) || !value.attr("__dict__").contains("__init__")) continue;
        refuse_second_init(value);
        done.add(value);
    }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "aimcemu C++ core: PU model, noise models, NIU, HDF5 results";
    // FormatError names the file and the field; Python sees it as aimcemu.FormatError (a ValueError).
    pybind11::register_exception<aimcemu::FormatError>(m, "FormatError", PyExc_ValueError);
    for (auto& [order, fn] : aimcemu::bindings::binding_registry()) fn(m);
    py::set done;
    refuse_second_init_in(m, done);
}
