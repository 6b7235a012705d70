// aimcemu-check-file KIND PATH...: reads user files as the library would (KIND = model, dataset
// or results) and reports on stdout how each went, for formats/untrusted_file.hpp.
// A file that crashes the HDF5 library crashes this process, not the caller's.
// KIND model-weights (one model file, then optionally one data set file): the model's every GEMM
// layer's weights, in the order of the layers read, are read straight into the memory file on
// descriptor 3 (check_model_in_helper, read_model_weights_into) before "ok\nweights N" (N bytes
// handed over) is reported; the graph checks are left to the caller.  The second file is read as a
// data set, in the same process.
#include <cstdio>
#include <exception>
#include <string>

#include "common/errors.hpp"
#include "formats/model_file.hpp"
#include "formats/results_reader.hpp"

namespace {

constexpr int kHandoverFd = 3;

// Reads one file; the report as described in formats/untrusted_file.cpp.
std::string check(const std::string& kind, const std::string& path) {
    using namespace aimcemu;
    try {
        if (kind == "model-weights") return "ok\nweights " + std::to_string(read_model_weights_into(path, kHandoverFd));
        if (kind == "model") load_model_in_process(path);
        else if (kind == "dataset") load_dataset_in_process(path);
        else read_results_in_process(path);
        return "ok";
    } catch (const FormatError& e) {
        const std::string what = e.what();
        const std::string prefix = e.source() + ": field '" + e.field() + "': ";
        return "format-error\n" + e.source() + '\0' + e.field() + '\0' +
               (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    } catch (const std::exception& e) {
        return std::string("error\n") + e.what();
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string kind = argc > 1 ? argv[1] : "";
    if (argc < 3 || (kind != "model" && kind != "dataset" && kind != "results" && kind != "model-weights") ||
        (kind == "model-weights" && argc > 4)) {
        std::fprintf(stderr,
                     "usage: aimcemu-check-file model|dataset|results PATH...  |  model-weights MODEL [DATASET]\n");
        return 2;
    }
    for (int i = 2; i < argc; ++i) {
        const bool dataset_beside_model = kind == "model-weights" && i == 3;
        const std::string report = check(dataset_beside_model ? "dataset" : kind, argv[i]) + '\x1e';  // one record per file, in order
        std::fwrite(report.data(), 1, report.size(), stdout);
        std::fflush(stdout);  // what is reported stays reported if a later file crashes this process
    }
    return 0;
}
