// aimcemu-check-file KIND PATH...: reads user files as the library would (KIND = model, dataset
// or results) and reports on stdout how each went, for formats/untrusted_file.hpp.
// aimcemu-check-file serve: the same for requests read from stdin (below), one after another, so
// that one process serves a sweep's model loads (the checking process kept between loads).
// A file that crashes the HDF5 library crashes this process, not the caller's.
// KIND model-weights (one model file, then optionally one data set file): the model's every GEMM
// layer's weights, in the order of the layers read, are read straight into the memory file on
// descriptor 3 (check_model_in_helper, read_model_weights_into) before "ok\nweights N" (N bytes
// handed over) is reported; the graph checks are left to the caller.  The second file is read as a
// data set, in the same process.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

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

bool valid_request(const std::string& kind, std::size_t paths) {
    if (kind == "model-weights") return paths == 1 || paths == 2;
    return paths >= 1 && (kind == "model" || kind == "dataset" || kind == "results");
}

// Reads each file of one request and reports it, one record per file, in order.
void check_all(const std::string& kind, const std::vector<std::string>& paths) {
    for (std::size_t i = 0; i < paths.size(); ++i) {
        const bool dataset_beside_model = kind == "model-weights" && i == 1;
        const std::string report = check(dataset_beside_model ? "dataset" : kind, paths[i]) + '\x1e';
        std::fwrite(report.data(), 1, report.size(), stdout);
        std::fflush(stdout);  // what is reported stays reported if a later file crashes this process
    }
}

// Each file of a request as "error" (a request whose working directory cannot be entered).
void refuse_all(std::size_t files, const std::string& why) {
    const std::string report = "error\n" + why + '\x1e';
    for (std::size_t i = 0; i < files; ++i) std::fwrite(report.data(), 1, report.size(), stdout);
    std::fflush(stdout);
}

// serve: requests on stdin, each KIND \0 DIRECTORY \0 PATH \0 ... \0 and an empty string (\0) to end
// it, answered as the command line's; until the end of the input (the caller ended or retired this
// process).  DIRECTORY is the caller's working directory at the request: relative paths name files
// there, and the caller may have changed directory since it started this process.
int serve() {
    std::vector<std::string> fields;
    std::string field;
    for (int c; (c = std::getchar()) != EOF;) {
        if (c != '\0') {
            field += char(c);
        } else if (!field.empty()) {
            fields.push_back(std::move(field));
            field.clear();
        } else {
            if (fields.size() < 2 || !valid_request(fields[0], fields.size() - 2)) return 2;
            if (::chdir(fields[1].c_str()) == 0)
                check_all(fields[0], {fields.begin() + 2, fields.end()});
            else
                refuse_all(fields.size() - 2, "cannot enter the working directory " + fields[1] + ": " +
                                                  std::strerror(errno));
            fields.clear();
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string kind = argc > 1 ? argv[1] : "";
    if (kind == "serve" && argc == 2) return serve();
    if (argc < 3 || !valid_request(kind, std::size_t(argc - 2))) {
        std::fprintf(stderr, "usage: aimcemu-check-file model|dataset|results PATH...  |  model-weights MODEL [DATASET]"
                             "  |  serve\n");
        return 2;
    }
    check_all(kind, {argv + 2, argv + argc});
    return 0;
}
