// libFuzzer harness: the results file reader (formats/results_reader.hpp) on arbitrary bytes, in this process
// (the *_in_process reader, without the checking process that guards users against libhdf5's own
// crashes: tests/fuzz/run_fuzzer.py sorts those out).
//
// A file is either read or refused with FormatError; anything else is a bug.  What it returns
// must be self-consistent (one accuracy and one coordinate per round, one metric per round and
// layer), since the analysis code indexes by those counts.
#include <cstdint>

#include "common/errors.hpp"
#include "formats/results_reader.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aimcemu;
    const std::string path = fuzz::write_input(data, size);
    ResultsFileInfo info;
    try {
        info = read_results_in_process(path);
    } catch (const FormatError&) {
        return 0;
    }
    const std::size_t rounds = info.rounds.size();
    if (info.accuracy.size() != rounds || info.labels.empty() || info.layers.size() != info.layer_names.size())
        std::abort();
    for (const auto& layer : info.layers)
        if (layer.snr_db.size() != rounds || layer.cosine.size() != rounds || layer.mismatch_rate.size() != rounds)
            std::abort();
    return 0;
}
