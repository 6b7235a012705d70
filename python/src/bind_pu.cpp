// Bindings for the PU functional model: whole-network inference, the GEMM paths, IM2COL and the
// cycle-level systolic-array model.  Arrays must have exactly the documented dtype and rank; any
// other input is an aimcemu.FormatError naming the argument.  Compute runs without the GIL.
#include <limits>
#include <utility>
#include <optional>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "niu/peripherals.hpp"
#include "arrays.hpp"
#include "bindings.hpp"
#include "network_guard.hpp"
#include "common/errors.hpp"
#include "emulator/emulator.hpp"
#include "formats/results.hpp"
#include "pu_model/gemm.hpp"
#include "pu_model/im2col.hpp"
#include "pu_model/inference.hpp"
#include "pu_model/pass_buffers.hpp"
#include "pu_model/sa_cycle.hpp"

namespace py = pybind11;
using namespace aimcemu;

namespace {

using bindings::Int8Array;

// The argument as a C-contiguous int8 array of the given rank (copied only if not contiguous).
Int8Array int8_arg(const py::handle& obj, int ndim, const std::string& name) {
    return bindings::require_int8(obj, "<memory>", name, ndim);
}

GemmBackend backend_from(const std::string& name) { return gemm_backend_from_string(name); }

FastKernel kernel_from(const std::string& name) { return fast_kernel_from_string(name, "kernel"); }

// A layer index given by Python (an int or anything with __index__) for argument `field`.  What
// __index__ raises reaches the caller as it is (py::cast would replace it with "Unable to cast");
// a bool (True is 1 to Python, never meant as layer 1) or an index beyond int is a FormatError
// naming the argument.
int layer_index_arg(const py::handle& key, const std::string& field) {
    if (PyBool_Check(key.ptr()))
        throw FormatError("<memory>", field, "expected a layer index or name, got a bool (" + std::string(py::str(key)) + ")");
    const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(key.ptr()));
    if (!index) throw py::error_already_set();
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (overflow != 0 || value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
        throw FormatError("<memory>", field, "no layer index " + std::string(py::str(index)));
    return int(value);
}

// An optional argument that must be a bound C++ object: `obj` as T*, nullptr for None, else a
// FormatError naming the argument (py::cast's "Unable to cast" names none).
template <class T>
const T* optional_object_arg(const py::object& obj, const std::string& field, const char* expected) {
    if (obj.is_none()) return nullptr;
    if (!py::isinstance<T>(obj))
        throw FormatError("<memory>", field, std::string("expected ") + expected + " or None, got " +
                                                 std::string(py::str(py::type::of(obj).attr("__name__"))));
    return obj.cast<const T*>();
}

// {layer_index: int8 array} supplied by the caller (e.g. noisy weights from the NIU model).
class DictWeights : public WeightView {
public:
    DictWeights(const Network& net, const py::dict& weights) : table_(net.layers.size(), nullptr) {
        for (const auto& [key, value] : weights) {
            const int index = layer_index_arg(key, "weights");
            const std::string field = "weights[" + std::to_string(index) + "]";
            if (index < 0 || index >= int(net.layers.size()))
                throw FormatError("<memory>", field, "no such layer index");
            const Layer& l = net.layers[std::size_t(index)];
            if (!l.is_gemm()) throw FormatError("<memory>", field, "layer '" + l.name + "' has no weights");
            auto array = bindings::require_int8(value, "<memory>", field);
            if (array.size() != py::ssize_t(l.weights.size()))
                throw FormatError("<memory>", field, "expected " + std::to_string(l.weights.size()) +
                                                         " values (layer '" + l.name + "'), got " +
                                                         std::to_string(array.size()));
            table_[std::size_t(index)] = array.data();
            keep_.push_back(std::move(array));
        }
    }
    const std::int8_t* weights(int index) const override { return table_[std::size_t(index)]; }

private:
    std::vector<const std::int8_t*> table_;
    std::vector<Int8Array> keep_;
};

// keep: None (every layer) or layer indices / names; the others come back as None.
std::vector<bool> keep_flags(const Network& net, const py::object& keep) {
    if (keep.is_none()) return {};
    // A string is iterable, letter by letter: keep='stem' would ask for layers 's', 't', ...
    if (py::isinstance<py::str>(keep) || py::isinstance<py::bytes>(keep))
        throw FormatError("<memory>", "keep", "expected a list of layer indices or names, got the string " +
                                                  std::string(py::repr(keep)) + " (keep=[name] keeps one layer)");
    if (!py::isinstance<py::iterable>(keep))
        throw FormatError("<memory>", "keep", "expected None or a list of layer indices or names, got " +
                                                  std::string(py::str(py::type::of(keep).attr("__name__"))));
    std::vector<bool> flags(net.layers.size(), false);
    for (const auto& item : keep.cast<py::iterable>()) {
        int index = -1;
        if (py::isinstance<py::str>(item)) {
            const std::string name = item.cast<std::string>();
            for (std::size_t i = 0; i < net.layers.size(); ++i)
                if (net.layers[i].name == name) index = int(i);
            if (index < 0) throw FormatError("<memory>", "keep", "no layer named '" + name + "'");
        } else {
            const int given = layer_index_arg(item, "keep");
            index = given < 0 ? given + int(net.layers.size()) : given;  // -1 = the last layer
            if (index < 0 || index >= int(net.layers.size()))
                throw FormatError("<memory>", "keep", "no layer index " + std::to_string(given));
        }
        flags[std::size_t(index)] = true;
    }
    return flags;
}

// Copies each layer the reference holds into it as the pass makes it (one micro-batch at a time,
// while it is in cache), so that the reference reaches the results writer without a NumPy copy.
class StoreIntoReference : public LayerOutputObserver {
public:
    explicit StoreIntoReference(ReferenceActivations& reference) : reference_(reference) {}
    void layer_output(int layer, std::int64_t first, int count, std::span<const std::int8_t> values) const override {
        reference_.store(layer, first, count, values);
    }

private:
    ReferenceActivations& reference_;
};

// `into` (a ReferenceActivations for this network and these images, not yet sealed), or none.
std::shared_ptr<ReferenceActivations> reference_arg(const py::object& into, const Network& net, std::int64_t images) {
    if (into.is_none()) return nullptr;
    if (!py::isinstance<ReferenceActivations>(into))
        throw FormatError("<memory>", "into", "expected an aimcemu._core.ReferenceActivations or None, got " +
                                                  std::string(py::str(py::type::of(into).attr("__name__"))));
    auto reference = into.cast<std::shared_ptr<ReferenceActivations>>();
    if (reference->sealed()) throw FormatError("<memory>", "into", "this reference is already filled (sealed)");
    if (reference->layer_count() != net.layers.size() || std::int64_t(reference->images()) != images)
        throw FormatError("<memory>", "into", "made for " + std::to_string(reference->images()) + " images of a " +
                                                  std::to_string(reference->layer_count()) + "-layer network, the run has " +
                                                  std::to_string(images) + " images and " +
                                                  std::to_string(net.layers.size()) + " layers");
    // Claimed, not only checked: two passes on two threads must not fill one reference at once.
    if (!reference->begin_filling())
        throw FormatError("<memory>", "into", reference->sealed() ? "this reference is already filled (sealed)"
                                                                  : "another pass is filling this reference");
    return reference;
}

// The process's kept pass buffers for one call, handed back when it ends, whether its pass
// succeeded or not.
class KeptPassBuffersLease {
public:
    KeptPassBuffersLease() : buffers_(niu::take_kept_pass_buffers()) {}
    ~KeptPassBuffersLease() { niu::keep_pass_buffers(std::move(buffers_)); }
    KeptPassBuffersLease(const KeptPassBuffersLease&) = delete;
    KeptPassBuffersLease& operator=(const KeptPassBuffersLease&) = delete;
    PassBuffers* get() const { return buffers_.get(); }

private:
    std::unique_ptr<PassBuffers> buffers_;
};

// Gives a claimed reference back (what was stored forgotten) unless the pass sealed it.
struct AbandonUnlessSealed {
    ReferenceActivations* reference;
    ~AbandonUnlessSealed() {
        if (reference != nullptr) reference->abandon_filling();
    }
};

py::list run_network_py(const Network& net, const py::object& images_obj, const std::string& backend, int threads,
                        const py::object& weights_obj, const py::object& keep, int batch,
                        const py::object& peripherals, std::int64_t first_image, const py::object& into) {
    // Raised before anything below can run Python (the images' and weights' conversions, a weights
    // key's __index__, the keep iterable) or release the GIL, lowered when the call returns: until
    // then no Python code can change or free what the pass reads of `net`.
    const bindings::NetworkReadGuard reading(net);
    // Once a call, under the guard (nothing can change `net` from here until the pass returns): a
    // network edited since resolve() (net.layers[k].out_channels = ..., net.input_shape = ...)
    // would be run on its stale shapes, reading and writing past its buffers.
    net.require_resolved("<memory>");
    check_threads(threads, "threads");
    if (first_image < 0) throw FormatError("<memory>", "first_image", "must be >= 0 (the first image's index)");
    const Int8Array images = int8_arg(images_obj, 4, "images");
    const Shape3 in{int(images.shape(1)), int(images.shape(2)), int(images.shape(3))};
    if (!(in == net.input_shape))
        throw FormatError("<memory>", "images", "expected [N, " + std::to_string(net.input_shape.h) + ", " +
                                                    std::to_string(net.input_shape.w) + ", " +
                                                    std::to_string(net.input_shape.c) + "] int8");
    std::unique_ptr<DictWeights> view;
    if (!weights_obj.is_none()) {
        if (!py::isinstance<py::dict>(weights_obj))
            throw FormatError("<memory>", "weights", "expected a dict {layer_index: int8 array}");
        view = std::make_unique<DictWeights>(net, weights_obj.cast<py::dict>());
    }
    RunOptions options;
    options.backend = backend_from(backend);
    options.threads = threads;
    options.weights = view.get();
    options.keep = keep_flags(net, keep);
    options.batch = batch;
    options.peripherals = optional_object_arg<niu::Peripherals>(peripherals, "peripherals", "an aimcemu._core.niu.Peripherals");
    options.first_image = first_image;
    const std::int64_t count = images.shape(0), image_size = in.size();
    const std::shared_ptr<ReferenceActivations> reference = reference_arg(into, net, count);
    const AbandonUnlessSealed abandon{reference.get()};  // a sealed reference is left as it is
    std::optional<StoreIntoReference> store;
    if (reference) options.observer = &store.emplace(*reference);
    std::vector<Tensor8> inputs(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i)
        inputs[std::size_t(i)] = {in, std::vector<std::int8_t>(images.data() + i * image_size,
                                                               images.data() + (i + 1) * image_size)};
    std::vector<std::vector<Tensor8>> results;
    {
        py::gil_scoped_release release;
        // The process's kept pass buffers (the last pass's, emulator/emulator.hpp), so that a
        // reference pass or a digital run reuses pages instead of faulting them in; a call running
        // while another holds them gets its own.  Handed back whether the pass succeeds or not.
        const KeptPassBuffersLease buffers;
        options.buffers = buffers.get();
        results = run_network_batch(net, inputs, options);
        if (reference) reference->seal();
    }
    py::list per_layer;
    for (std::size_t l = 0; l < net.layers.size(); ++l) {
        if (!options.keep.empty() && !options.keep[l]) {
            per_layer.append(py::none());
            continue;
        }
        const Shape3& s = net.layers[l].out_shape;
        Int8Array out({py::ssize_t(count), py::ssize_t(s.h), py::ssize_t(s.w), py::ssize_t(s.c)});
        for (std::int64_t i = 0; i < count; ++i) {
            auto& data = results[std::size_t(i)][l].data;
            std::copy(data.begin(), data.end(), out.mutable_data() + i * s.size());
            // Freed once copied: the activations are never held twice (C++ and NumPy) in full.
            std::vector<std::int8_t>().swap(data);
        }
        per_layer.append(out);
    }
    return per_layer;
}

struct GemmArgs {
    Int8Array w, xt, bias;
    std::int64_t n, m, p;
};

// Validates (w [N,M], x [M,P], bias [N]) and transposes x into the P x M operand.
GemmArgs gemm_args(const py::object& w_obj, const py::object& x_obj, const py::object& bias_obj, int bias_shift) {
    GemmArgs a{int8_arg(w_obj, 2, "w"), Int8Array(), int8_arg(bias_obj, 1, "bias"), 0, 0, 0};
    const Int8Array x = int8_arg(x_obj, 2, "x");
    a.n = a.w.shape(0);
    a.m = a.w.shape(1);
    a.p = x.shape(1);
    if (a.n == 0 || a.m == 0 || a.p == 0) throw FormatError("<memory>", "w", "empty operand");
    if (x.shape(0) != a.m)
        throw FormatError("<memory>", "x", "expected " + std::to_string(a.m) + " rows (w is [N, M]), got " +
                                               std::to_string(x.shape(0)));
    if (a.bias.shape(0) != a.n)
        throw FormatError("<memory>", "bias", "expected " + std::to_string(a.n) + " values, got " +
                                                  std::to_string(a.bias.shape(0)));
    check_gemm_fits_int32(a.m, bias_shift, "bias_shift");
    a.xt = Int8Array({py::ssize_t(a.p), py::ssize_t(a.m)});
    auto src = x.unchecked<2>();
    auto dst = a.xt.mutable_unchecked<2>();
    for (std::int64_t k = 0; k < a.m; ++k)
        for (std::int64_t j = 0; j < a.p; ++j) dst(j, k) = src(k, j);
    return a;
}

// P x N accumulators back to the [N, P] orientation of the Python API.
py::array_t<std::int32_t> transpose_acc(const std::vector<std::int32_t>& acc, std::int64_t n, std::int64_t p) {
    py::array_t<std::int32_t> out({py::ssize_t(n), py::ssize_t(p)});
    auto o = out.mutable_unchecked<2>();
    for (std::int64_t j = 0; j < p; ++j)
        for (std::int64_t i = 0; i < n; ++i) o(i, j) = acc[std::size_t(j * n + i)];
    return out;
}

py::dict stats_dict(const SaCycleStats& s) {
    py::dict d;
    d["cycles"] = s.cycles;
    d["waves"] = s.waves;
    d["cycles_per_wave"] = s.cycles_per_wave;
    d["chunks"] = s.chunks;
    d["compute_cycles"] = s.compute_cycles;
    d["sa_stall_cycles"] = s.sa_stall_cycles;
    d["wrb_full_cycles"] = s.wrb_full_cycles;
    d["out_of_order_writes"] = s.out_of_order_writes;
    d["first_output_cycle"] = s.first_output_cycle;
    d["max_wrb_chunks"] = s.max_wrb_chunks;
    d["cycle_limit"] = s.cycle_limit;
    return d;
}

void bind_pu(py::module_& m) {
    m.def("check_backend", [](const std::string& name, const std::string& source, const std::string& field) {
        gemm_backend_from_string(name, source, field);
    }, py::arg("name"), py::arg("source") = "<memory>", py::arg("field") = "backend",
          "FormatError(source, field) unless `name` is a PU backend (fast, reference, cycle_sa)");
    m.def("run_network", &run_network_py, py::arg("net"), py::arg("images"), py::arg("backend") = "fast",
          py::arg("threads") = 0, py::arg("weights") = py::none(), py::arg("keep") = py::none(), py::arg("batch") = 0,
          py::arg("peripherals") = py::none(), py::arg("first_image") = 0, py::arg("into") = py::none(),
          "Bit-exact INT8 inference of a resolved Network on int8 images [N, H, W, C] (HWC); a network\n"
          "edited since its last resolve() is a FormatError naming the field (call resolve() again).\n"
          "Returns one int8 array [N, H, W, C] per layer.  backend: 'fast', 'reference' or 'cycle_sa'.\n"
          "weights: optional {layer_index: int8 array} replacing the weights the PU reads (e.g. noisy\n"
          "ones).  keep: None (every layer) or the layer indices/names to return (-1 = the last); the\n"
          "others come back as None and are never held for all images at once.  batch: images per\n"
          "GEMM (0 = automatic).  peripherals: an aimcemu._core.niu.Peripherals applied to its AIMC\n"
          "layers, their noise keyed by first_image + the image's position.  into: a ReferenceActivations\n"
          "made for this network and these images: every layer it holds is copied into it during the\n"
          "pass (then sealed), whatever keep says.  threads: 0..4096, 0 = all cores; results never\n"
          "depend on threads or batch.");

    m.def("gemm",
          [](const py::object& w, const py::object& x, const py::object& bias, int bias_shift, const std::string& backend,
             const std::string& kernel, int threads) {
              check_threads(threads, "threads");
              const GemmArgs a = gemm_args(w, x, bias, bias_shift);
              const GemmBackend b = backend_from(backend);
              const FastKernel k = kernel_from(kernel);
              std::vector<std::int32_t> acc(std::size_t(a.n * a.p));
              {
                  py::gil_scoped_release release;
                  if (b == GemmBackend::Fast)
                      gemm_fast(a.w.data(), a.xt.data(), a.bias.data(), bias_shift, a.n, a.m, a.p, acc.data(), threads, k);
                  else if (b == GemmBackend::Reference)
                      gemm_reference(a.w.data(), a.xt.data(), a.m, a.bias.data(), bias_shift, a.n, a.m, a.p, acc.data());
                  else
                      sa_cycle_gemm(a.w.data(), a.xt.data(), a.m, a.bias.data(), bias_shift, a.n, a.m, a.p, SaConfig{},
                                    acc.data());
              }
              return transpose_acc(acc, a.n, a.p);
          },
          py::arg("w"), py::arg("x"), py::arg("bias"), py::arg("bias_shift"), py::arg("backend") = "fast",
          py::arg("kernel") = "auto", py::arg("threads") = 1,
          "acc[N, P] = w[N, M] @ x[M, P] + (bias[N] << bias_shift), exact int32.\n"
          "kernel (fast backend): 'auto' or one of fast_kernels().  threads: 0..4096, 0 = all cores.");

    const auto im2col_window = [](const py::object& x_obj, const Window& window) {
        const Int8Array x = int8_arg(x_obj, 3, "x");
        for (const auto& [value, field] : {std::pair{window.kernel_h, "kernel_h"}, {window.kernel_w, "kernel_w"},
                                           {window.stride_h, "stride_h"}, {window.stride_w, "stride_w"}})
            if (!kDimensionRange.contains(value))
                throw FormatError("<memory>", field, "must be in 1.." + std::to_string(kDimensionRange.max) + " (got " +
                                                         std::to_string(value) + ")");
        for (int axis = 0; axis < 3; ++axis)
            if (x.shape(axis) > kDimensionRange.max)
                throw FormatError("<memory>", "x", "each dimension must be at most " + std::to_string(kDimensionRange.max));
        const WindowGeometry g{{int(x.shape(0)), int(x.shape(1)), int(x.shape(2))}, window};
        g.validate("im2col");
        // The operand is P x M bytes: a kernel of 65535 with its padding made 4e9 x 4e9 (NumPy's
        // "array is too big"); one image's operand is held to what a layer's activations may be.
        if (g.m() > kMaxActivationsPerImage / g.p())
            throw FormatError("<memory>", "kernel", "the operand would be " + std::to_string(g.p()) + " x " +
                                                        std::to_string(g.m()) + " values, over 2^31 - 1");
        Int8Array out({py::ssize_t(g.p()), py::ssize_t(g.m())});
        {
            py::gil_scoped_release release;
            im2col_into(x.data(), g, 0, g.m(), reinterpret_cast<std::uint8_t*>(out.mutable_data()));
        }
        return out;
    };
    m.def("im2col", im2col_window, py::arg("x"), py::arg("window"),
          "IM2COL of an HWC int8 map x[H, W, C] under a per-axis Window (see the square form below).");
    m.def("im2col",
          [im2col_window](const py::object& x_obj, int kernel, int stride, int pad) {
              return im2col_window(x_obj, Window::square(kernel, stride, pad));
          },
          py::arg("x"), py::arg("kernel"), py::arg("stride") = 1, py::arg("pad") = 0,
          "IM2COL of an HWC int8 map x[H, W, C]: returns the patch-major operand [P, M] (row p = output\n"
          "pixel oy*out_w+ox, columns in (ky, kx, c) order, padding reads 0); the GEMM's X is its transpose.");

    m.def("sa_cycle_gemm",
          [](const py::object& w, const py::object& x, const py::object& bias, int bias_shift, int rows, int cols, int rg,
             int fifo_depth, int wrb_waves, std::int64_t cycle_limit) {
              SaConfig cfg{rows, cols, rg, fifo_depth, wrb_waves};
              cfg.cycle_limit = cycle_limit;
              cfg.validate();  // before the operands are copied: a bad config is named, not a bad_alloc
              const GemmArgs a = gemm_args(w, x, bias, bias_shift);
              std::vector<std::int32_t> acc(std::size_t(a.n * a.p));
              SaCycleStats stats;
              {
                  py::gil_scoped_release release;
                  stats = sa_cycle_gemm(a.w.data(), a.xt.data(), a.m, a.bias.data(), bias_shift, a.n, a.m, a.p, cfg,
                                        acc.data());
              }
              return py::make_tuple(transpose_acc(acc, a.n, a.p), stats_dict(stats));
          },
          py::arg("w"), py::arg("x"), py::arg("bias"), py::arg("bias_shift"), py::arg("rows") = 64, py::arg("cols") = 8,
          py::arg("rg") = 8, py::arg("fifo_depth") = SaConfig{}.fifo_depth, py::arg("wrb_waves") = SaConfig{}.wrb_waves,
          py::arg("cycle_limit") = 0,
          "The GEMM on the cycle-level systolic-array model: returns (acc int32 [N, P], stats dict with\n"
          "cycles, waves, cycles_per_wave, chunks, compute_cycles, stall and WRB figures).\n"
          "cycle_limit: the guard against a stuck datapath (0: an upper bound derived from the shape\n"
          "and the FIFO / WRB depths; stats['cycle_limit'] is the one used).");

    m.def("fast_kernels", [] {
        std::vector<std::string> names;
        for (FastKernel k : kAllFastKernels)
            if (fast_kernel_available(k)) names.emplace_back(to_string(k));
        return names;
    }, "Fast GEMM kernels available in this build on this CPU; 'auto' picks the first.");
    m.def("resolve_threads", [](int threads) {
        check_threads(threads);
        return resolve_threads(threads);
    }, py::arg("threads"),
          "The worker threads a thread count gives (0 = the CPUs this process may run on: its affinity\n"
          "mask, as taskset, cpusets and batch schedulers set it), as every call of the core resolves it.");
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(10, bind_pu);
