// Registry of binding functions for the single aimcemu._core extension.
//
// Each python/src/bind_*.cpp registers one function with AIMCEMU_REGISTER_BINDINGS(order, fn).
// module.cpp calls them in ascending `order`, so types that others refer to (the network) are
// registered first.  Areas never edit a shared binding file.
#pragma once
#include <functional>
#include <map>
#include <pybind11/pybind11.h>

namespace aimcemu::bindings {

using BindFn = void (*)(pybind11::module_&);

inline std::multimap<int, BindFn>& binding_registry() {
    static std::multimap<int, BindFn> registry;
    return registry;
}

struct BindingRegistrar {
    BindingRegistrar(int order, BindFn fn) { binding_registry().emplace(order, fn); }
};

}  // namespace aimcemu::bindings

#define AIMCEMU_BIND_CAT2(a, b) a##b
#define AIMCEMU_BIND_CAT(a, b) AIMCEMU_BIND_CAT2(a, b)
#define AIMCEMU_REGISTER_BINDINGS(order, fn) \
    static ::aimcemu::bindings::BindingRegistrar AIMCEMU_BIND_CAT(aimcemu_registrar_, __LINE__)(order, fn)
