// The versioned HDF5 model file and the data set file (formats in docs/model_format.md).
//
// A model file holds one quantized Network: root attributes (format "aimcemu-model",
// format_version 2, name, input_shape, input_frac_bits, output_layer, class_names) and one group
// per layer under /layers, in network order, with the layer's fields as attributes and its int8
// `weights` and `bias` datasets.  Version 2 stores a conv's or pool's window per axis
// (kernel_h, kernel_w, stride_h, stride_w, pad_top, pad_bottom, pad_left, pad_right); version-1
// files, with one square kernel, stride and pad, still load.  A data set file holds int8
// `images` [N, H, W, C], already quantized with the model's input_frac_bits, and integer
// `labels` [N].
//
// Loading validates every field and throws FormatError(path, field, what) on the first problem;
// the network is then checked as a graph by Network::resolve(path).  Saving writes a temporary
// file beside the target and renames it, so a failed save never leaves a file behind.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/network.hpp"
#include "formats/untrusted_file.hpp"

namespace aimcemu {

inline constexpr const char* kModelFormat = "aimcemu-model";
inline constexpr int kModelFormatVersion = 2;          // what save_model writes
inline constexpr int kOldestModelFormatVersion = 1;    // the oldest load_model reads (square windows)
inline constexpr const char* kDataSetFormat = "aimcemu-dataset";
inline constexpr int kDataSetFormatVersion = 1;

// Validates `net` (a copy is resolved) and writes it to `path` atomically.
void save_model(const Network& net, const std::string& path);
// Reads and validates a model file; the returned network is resolved.  The file is opened once and
// every read reads that open file (a file renamed over `path` meanwhile is never read).  It is read in the
// checking process first (formats/untrusted_file.hpp), so a file that crashes the HDF5 library
// is refused with a FormatError; that process hands the model it read over, and this one reads
// nothing of the file itself (check_model_in_helper, model_handover.hpp).
Network load_model(const std::string& path);
// load_model, and the data set file at `dataset_path` read in the same checking process (one
// process start instead of two); what that process found in the data set goes to `dataset_check`,
// for load_dataset(dataset_path, dataset_check), which raises it when the data set is read.
// `dataset_kind` FileKind::DataSetHeader has that process read only the data set's header
// (load_dataset_header), for load_dataset_header(dataset_path, dataset_check).
Network load_model(const std::string& path, const std::string& dataset_path, FileCheck& dataset_check,
                   FileKind dataset_kind = FileKind::DataSet);
// The same without the checking process (what that process and the fuzz harnesses run); with
// `file_fd` (an OpenedFile's), the file open on it, named `path` in messages.
Network load_model_in_process(const std::string& path, int file_fd = -1);
// What the checking process runs for check_model_in_helper: reads every field of the model file at
// `path` as load_model_in_process does, with every GEMM layer's weights read by HDF5 straight into
// the memory file `fd` (from its start, in the order of the file's layers) instead of into this
// process, followed by the structure record of everything else the file holds
// (model_handover.hpp); the file is then cut to those bytes.  The graph checks (Network::resolve)
// are left to the caller, which runs them on the decoded record; they read no file.  Throws
// FormatError as load_model_in_process; std::runtime_error when `fd` cannot be grown or mapped.
// With `file_fd`, the model file open on it (as load_model_in_process).
struct ModelHandOverSize {
    std::uint64_t weights = 0;    // bytes of weights, first in the memory file
    std::uint64_t structure = 0;  // bytes of the structure record after them
};
ModelHandOverSize hand_model_over(const std::string& path, int fd, int file_fd = -1);

struct DataSet {
    Shape3 image_shape;                 // H, W, C of one image
    std::vector<std::int8_t> images;    // count() * image_shape.size(), HWC per image
    std::vector<std::int64_t> labels;   // one class index per image
    int input_frac_bits = -1;           // -1: not recorded in the file
    std::string source, description;    // free text (provenance)
    std::int64_t count() const { return std::int64_t(labels.size()); }
};

void save_dataset(const DataSet& data, const std::string& path);
DataSet load_dataset(const std::string& path);             // checked like load_model
// The same, with the checking process's outcome for this file taken from `check` when it was
// checked beside the model (load_model's `dataset_check`), instead of starting another one.
DataSet load_dataset(const std::string& path, const FileCheck& check);
DataSet load_dataset_in_process(const std::string& path, int file_fd = -1);  // file_fd: as load_model_in_process
// A data set file's header: every field and every check of load_dataset but the images' values,
// which are left unread (`images` stays empty); their type, shape, storage and size in memory are
// checked, and the labels read whole.  What a sweep's plan needs to check that a data set fits a
// network (check_dataset_fits) without holding its images: an ImageNet-sized set's 7.5 GB.  Read
// in the checking process first, in the same mode (FileKind::DataSetHeader), so a hostile file is
// refused as load_dataset refuses it; a corrupt image chunk is found by the run's load_dataset.
DataSet load_dataset_header(const std::string& path);
// The same with the checking process's outcome taken from `check` (load_model's `dataset_check`,
// of either kind: a whole read covers the header).
DataSet load_dataset_header(const std::string& path, const FileCheck& check);
DataSet load_dataset_header_in_process(const std::string& path, int file_fd = -1);
// Checks that `data` (read from `path`, whole or its header) fits `net`: image shape,
// input_frac_bits when recorded, labels within the network's classes (it reads no image).  Throws FormatError naming `path` and the field.
void check_dataset_fits(const DataSet& data, const Network& net, const std::string& path);

}  // namespace aimcemu
