// Bindings for reading results files back and for the temporary files of atomic writers:
// _core.read_results(path) -> dict, _core.files.temporary_path(target),
// _core.files.remove_stale_temporaries(folder), _core.files.parse_temporary_name(name).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <system_error>
#include <variant>

#include "bindings.hpp"
#include "common/temp_files.hpp"
#include "formats/between_reads_hook.hpp"
#include "formats/field_reader.hpp"
#include "formats/results_reader.hpp"
#include "formats/untrusted_file.hpp"

namespace py = pybind11;
using namespace aimcemu;

namespace {

template <class T>
py::array_t<T> array_of(const std::vector<T>& v) {
    return py::array_t<T>(py::ssize_t(v.size()), v.data());
}

py::dict results_to_python(const ResultsFileInfo& info) {
    std::vector<std::int64_t> chip, niu_round;
    std::vector<double> t;
    std::vector<std::string> compensation;
    for (const auto& r : info.rounds) {
        chip.push_back(r.chip);
        niu_round.push_back(r.niu_round);
        t.push_back(r.t);
        compensation.push_back(r.drift_compensation);
    }
    py::list layers;
    for (const auto& l : info.layers) {
        py::dict d;
        d["name"] = l.name;
        d["kind"] = l.kind;
        d["input"] = l.input;
        d["index"] = l.index;
        d["in_shape"] = py::make_tuple(l.in_shape.h, l.in_shape.w, l.in_shape.c);
        d["out_shape"] = py::make_tuple(l.out_shape.h, l.out_shape.w, l.out_shape.c);
        d["out_shift"] = l.out_shift;
        d["activations_stored"] = l.activations_stored;
        d["snr_db"] = array_of(l.snr_db);
        d["cosine"] = array_of(l.cosine);
        d["mismatch_rate"] = array_of(l.mismatch_rate);
        layers.append(d);
    }
    py::dict out;
    out["model"] = info.model;
    out["config"] = info.config_json;
    out["class_names"] = info.class_names;
    out["layer_names"] = info.layer_names;
    out["images"] = info.labels.size();
    out["classes"] = info.classes;
    out["labels"] = array_of(info.labels);
    out["chip"] = array_of(chip);
    out["t"] = array_of(t);
    out["niu_round"] = array_of(niu_round);
    out["drift_compensation"] = compensation;
    out["accuracy"] = array_of(info.accuracy);
    out["reference_accuracy"] = info.reference_accuracy;
    out["layers"] = layers;
    return out;
}

// aimcemu-check-file beside this extension module (build/python, or the installed package).
std::string helper_beside_this_module() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&helper_beside_this_module), &info) == 0 || info.dli_fname == nullptr) return {};
    const auto helper = std::filesystem::path(info.dli_fname).parent_path() / "aimcemu-check-file";
    return ::access(helper.c_str(), X_OK) == 0 ? helper.string() : std::string();
}

void bind_files(py::module_& m) {
    set_file_check_helper(helper_beside_this_module());
    m.def("read_results", [](const std::string& path, bool check) {
              return results_to_python(check ? read_results(path) : read_results_in_process(path));
          },
          py::arg("path"), py::arg("check") = true,
          "Read and validate a results file (docs/hdf5_layout.md) without its activations: a dict of the model\n"
          "name, config (JSON text), class and layer names, round coordinates (chip, t, niu_round,\n"
          "drift_compensation), labels, accuracy per round, reference_accuracy and per-layer metrics.\n"
          "Raises FormatError naming the file and the field for anything that is not a complete results\n"
          "file of this version.  check=False skips the checking process (for files check_results_files\n"
          "has just passed).");
    const py::handle module = m;  // the extension module lives as long as the interpreter
    m.def("read_results_files", [module](const std::vector<std::string>& paths, bool per_file) {
              py::list out;
              if (per_file) {
                  std::vector<std::variant<ResultsFileInfo, FormatError>> outcomes;
                  {
                      py::gil_scoped_release release;
                      outcomes = read_each_results_file(paths);
                  }
                  for (const auto& outcome : outcomes) {
                      if (const auto* info = std::get_if<ResultsFileInfo>(&outcome)) out.append(results_to_python(*info));
                      else out.append(module.attr("FormatError")(std::get<FormatError>(outcome).what()));
                  }
                  return out;
              }
              std::vector<ResultsFileInfo> infos;
              {
                  py::gil_scoped_release release;
                  infos = read_results_files(paths);
              }
              for (const auto& info : infos) out.append(results_to_python(info));
              return out;
          },
          py::arg("paths"), py::arg("per_file") = false,
          "read_results for many files: each opened once, checked in batches (one checking process per\n"
          "128 files) and read through the same descriptor, so a file renamed over its path meanwhile is\n"
          "never read; a list of dicts, in order.  Raises the FormatError of the first file that fails.\n"
          "per_file=True: a file that fails is no failure of the others: its entry is its FormatError (the\n"
          "one read_results(path) raises), the files after it are still read, and no file is read twice by\n"
          "a checking process (one that hangs it costs the time limit once).  Raises only what fails every\n"
          "file (no checking process can be started, no descriptor left).");
    m.def("check_results_files", [](const std::vector<std::string>& paths) {
              py::gil_scoped_release release;
              check_in_helper(FileKind::Results, paths);
          },
          py::arg("paths"),
          "Read many results files in the checking process (one process per 128 files); raises the\n"
          "FormatError of the first that fails.  Does nothing when no checking process is configured.\n"
          "For files read later by path (h5py); read_results_files reads them through the checked descriptors.");
    py::module_ files = m.def_submodule("files", "Temporary files of atomic writers (common/temp_files.hpp)");
    files.def("temporary_path", &files::temporary_path_for, py::arg("target"),
              "A fresh hidden temporary name beside `target`: .NAME.tmp-HOST-PID-N");
    files.def("remove_stale_temporaries", &files::remove_stale_temporaries, py::arg("folder"),
              "Remove the temporary files in `folder` whose writer (this host, that PID) is gone; returns their paths.");
    files.def("parse_temporary_name", [](const std::string& name) -> py::object {
        const files::TemporaryName p = files::parse_temporary_name(name);
        if (!p.ok) return py::none();
        py::dict d;
        d["target"] = p.target;
        d["host"] = p.host;
        d["pid"] = p.pid;
        return d;
    }, py::arg("name"), "The parts of a temporary file name (target, host, pid), or None.");
    files.def("host_tag", &files::host_tag, "This machine's name as temporary file names carry it.");
    files.def("open_input", &open_user_file_descriptor, py::arg("path"),
              "Opens a user's input file for reading as the loaders do (formats/field_reader.hpp): the path\n"
              "resolved once, only a regular file opened, so a device or FIFO renamed over it is never opened.\n"
              "Returns the descriptor (close-on-exec, the caller's to close); FormatError naming the path.");
    files.def("open_checked_results", [](const std::string& path) {
                  ResultsFileInfo info;
                  int descriptor = -1;
                  {
                      py::gil_scoped_release release;
                      const OpenedFile file = open_user_file(path);
                      if (check_in_helper(FileKind::Results, file)) between_reads(path);
                      info = read_results_in_process(path, file.fd());
                      descriptor = ::fcntl(file.fd(), F_DUPFD_CLOEXEC, 0);
                      if (descriptor < 0) throw std::system_error(errno, std::generic_category(), path);
                  }
                  return py::make_tuple(descriptor, results_to_python(info));
              },
              py::arg("path"),
              "read_results(path), also returning a descriptor of the file that was checked and read:\n"
              "(descriptor, dict).  For reading the activations afterwards (h5py on /proc/self/fd/N or on\n"
              "a file object of it): the very file checked, whatever the path names by then.  The\n"
              "descriptor is close-on-exec and the caller's to close.");
    files.def("set_check_time_limit_for_tests", [](py::object seconds) {
                  set_check_time_limit_for_tests(seconds.is_none() ? 0 : std::max(1, int(seconds.cast<double>() * 1000.0)));
              },
              py::arg("seconds"),
              "Test only: the checking process's time limit in seconds (None: the one sized by the files again),\n"
              "so that a test can make a checking process that hangs run past it in seconds.");
    files.def("check_helper", [] { return file_check_helper(); },
              "The helper that reads user files first, in its own process ('' = none: read in-process).");
    files.def("set_check_helper", &set_file_check_helper, py::arg("executable"),
              "Use another helper executable ('' = read files in-process only).");
    files.def("set_between_reads_hook_for_tests", [](py::object hook) {
        if (hook.is_none()) return set_between_reads_hook_for_tests({});
        // The last copy of the hook may go in a load that runs without the GIL (another thread unset
        // the hook meanwhile): the object is freed with the GIL taken (left alone after Python ended).
        const std::shared_ptr<py::object> held(new py::object(std::move(hook)), [](py::object* object) {
            if (Py_IsInitialized()) {
                py::gil_scoped_acquire gil;
                delete object;
            } else {
                object->release();  // Python has ended: nothing to give back to
                delete object;
            }
        });
        set_between_reads_hook_for_tests([hook = held](const std::string& path) {
            py::gil_scoped_acquire gil;
            (*hook)(path);
        });
    }, py::arg("hook"),
              "Test only: call hook(path) between the checking process's read of a user file and this process's\n"
              "own (formats/between_reads_hook.hpp); None removes it.");
}

}  // namespace

AIMCEMU_REGISTER_BINDINGS(55, bind_files);
