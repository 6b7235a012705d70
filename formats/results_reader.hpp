// Reading a results file back (layout in docs/hdf5_layout.md), validated as untrusted input.
//
// read_results() checks that a file is a complete results file of the version this build
// writes, and returns its small parts: configuration, round coordinates, accuracies and
// per-layer metrics.  The activation arrays (the bulk of the file) are checked for shape and
// storage but not read; analysis code reads them with h5py or xarray afterwards.  Every problem
// (not HDF5, truncated, another format, a newer version, a missing or inconsistent field)
// throws FormatError naming the file and the field, so `aimcemu report` and the sweep code can
// say which file of a folder is broken.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "common/errors.hpp"
#include "formats/network.hpp"
#include "formats/results.hpp"

namespace aimcemu {

struct ResultsLayerInfo {
    std::string name, kind, input;
    int index = 0;
    Shape3 in_shape, out_shape;
    int out_shift = 0;
    bool activations_stored = false;
    std::vector<double> snr_db, cosine, mismatch_rate;  // one per round
};

struct ResultsFileInfo {
    std::string model, config_json;
    std::vector<std::string> class_names, layer_names;
    std::vector<RoundInfo> rounds;
    std::vector<std::int64_t> labels;                   // one per image
    std::int64_t classes = 0;
    std::vector<double> accuracy;                       // one per round
    double reference_accuracy = 0.0;
    std::vector<ResultsLayerInfo> layers;               // network order
};

// Checked in a helper process first, like load_model (formats/untrusted_file.hpp), the file opened
// once for both reads.
ResultsFileInfo read_results(const std::string& path);
// Many results files (a sweep's task files): each opened once, checked in batches (one checking
// process per batch, check_in_helper), then read through the same descriptors, in order; throws the
// FormatError of the first file that fails.
std::vector<ResultsFileInfo> read_results_files(const std::vector<std::string>& paths);
// The same, each file on its own account (for_each_checked_file with `failed`): each file's info,
// or the FormatError that read_results(path) alone gives for it, in order; a file that fails does
// not stop the others, and no file is read twice by a checking process.
std::vector<std::variant<ResultsFileInfo, FormatError>> read_each_results_file(const std::vector<std::string>& paths);
// Without the checking process; with `file_fd` (an OpenedFile's), the file open on it, named `path`.
ResultsFileInfo read_results_in_process(const std::string& path, int file_fd = -1);

}  // namespace aimcemu
