// aimcemu-check-file KIND PATH...: reads user files as the library would (KIND = model, dataset
// or results) and reports on stdout how each went, for formats/untrusted_file.hpp.
// A file that crashes the HDF5 library crashes this process, not the caller's.
// KIND model-weights (one model file, then optionally one data set file): also writes every GEMM
// layer's weights, in the order of the layers read, to file descriptor 3 (check_model_in_helper),
// before reporting "ok"; the second file is read as a data set, in the same process.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "common/errors.hpp"
#include "formats/model_file.hpp"
#include "formats/results_reader.hpp"

namespace {

constexpr int kHandoverFd = 3;

// Writes the model's weights to the caller's memory file; throws on a failed write.
void hand_over_weights(const aimcemu::Network& net) {
    for (const auto& layer : net.layers) {
        const auto* data = reinterpret_cast<const char*>(layer.weights.data());
        for (std::size_t done = 0; done < layer.weights.size();) {
            const ssize_t n = ::write(kHandoverFd, data + done, layer.weights.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) throw std::runtime_error(std::string("cannot hand the weights over: ") + std::strerror(errno));
            done += std::size_t(n);
        }
    }
}

// Reads one file; the report as described in formats/untrusted_file.cpp.
std::string check(const std::string& kind, const std::string& path) {
    using namespace aimcemu;
    try {
        if (kind == "model") load_model_in_process(path);
        else if (kind == "model-weights") hand_over_weights(load_model_in_process(path));
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
