// libFuzzer harness: the data set file loader (formats/model_file.hpp) on arbitrary bytes, in this process
// (the *_in_process reader, without the checking process that guards users against libhdf5's own
// crashes: tests/fuzz/run_fuzzer.py sorts those out).
//
// A file either loads or is refused with FormatError; anything else is a bug.  A data set that
// loads must save and load again unchanged.  The header reader (load_dataset_header, a sweep's
// plan) runs on the same bytes: its checks are a subset of the full reader's, so it must accept
// every file the full reader accepts, and agree with it on everything but the image values.
#include <cstdint>

#include "common/errors.hpp"
#include "formats/model_file.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aimcemu;
    const std::string path = fuzz::write_input(data, size);
    DataSet header;
    bool header_loaded = true;
    try {
        header = load_dataset_header_in_process(path);
    } catch (const FormatError&) {
        header_loaded = false;
    }
    DataSet set;
    try {
        set = load_dataset_in_process(path);
    } catch (const FormatError&) {
        return 0;
    }
    if (!header_loaded || header.count() != set.count() || !(header.image_shape == set.image_shape) ||
        header.labels != set.labels || header.source != set.source || header.description != set.description ||
        header.input_frac_bits != set.input_frac_bits || !header.images.empty())
        std::abort();
    const std::string copy = fuzz::scratch_path("copy.h5");
    save_dataset(set, copy);
    const DataSet again = load_dataset_in_process(copy);
    if (again.images != set.images || again.labels != set.labels || !(again.image_shape == set.image_shape) ||
        again.source != set.source || again.input_frac_bits != set.input_frac_bits)
        std::abort();
    return 0;
}
