// aimcemu-check-file KIND PATH: reads one user file as the library would (KIND = model,
// dataset or results) and reports on stdout how that went, for formats/untrusted_file.hpp.
// A file that crashes the HDF5 library crashes this process, not the caller's.
#include <cstdio>
#include <exception>
#include <string>

#include "common/errors.hpp"
#include "formats/model_file.hpp"
#include "formats/results_reader.hpp"

int main(int argc, char** argv) {
    using namespace aimcemu;
    if (argc != 3) {
        std::fprintf(stderr, "usage: aimcemu-check-file model|dataset|results PATH\n");
        return 2;
    }
    const std::string kind = argv[1], path = argv[2];
    std::string report;
    try {
        if (kind == "model") load_model_in_process(path);
        else if (kind == "dataset") load_dataset_in_process(path);
        else if (kind == "results") read_results_in_process(path);
        else return 2;
        report = "ok\n";
    } catch (const FormatError& e) {
        const std::string what = e.what();
        const std::string prefix = e.source() + ": field '" + e.field() + "': ";
        report = "format-error\n" + e.source() + '\0' + e.field() + '\0' +
                 (what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    } catch (const std::exception& e) {
        report = std::string("error\n") + e.what();
    }
    std::fwrite(report.data(), 1, report.size(), stdout);
    std::fflush(stdout);
    return 0;
}
