// libFuzzer harness: the model file loader (formats/model_file.hpp) on arbitrary bytes, in this process
// (the *_in_process reader, without the checking process that guards users against libhdf5's own
// crashes: tests/fuzz/run_fuzzer.py sorts those out).
//
// A file either loads or is refused with FormatError; any other exception, a crash, a hang or
// a runaway allocation is a bug.  A file that loads must save and load again with the same
// layers (save_model refuses nothing that load_model accepted).
#include <cstdint>

#include "common/errors.hpp"
#include "formats/model_file.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aimcemu;
    const std::string path = fuzz::write_input(data, size);
    Network net;
    try {
        net = load_model_in_process(path);
    } catch (const FormatError&) {
        return 0;
    }
    const std::string copy = fuzz::scratch_path("copy.h5");
    save_model(net, copy);
    const Network again = load_model_in_process(copy);
    if (again.layers.size() != net.layers.size() || again.name != net.name) std::abort();
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (again.layers[i].weights != net.layers[i].weights || !(again.layers[i].out_shape == net.layers[i].out_shape))
            std::abort();
    return 0;
}
