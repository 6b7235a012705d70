// libFuzzer harness: the NIU program parser (NiuProgram::from_words, niu/program.hpp) on
// arbitrary words.  Thin on purpose, so it follows the program format as it changes: a word
// image either parses or is refused with FormatError, and one that parses survives a round
// trip through to_words unchanged.
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/errors.hpp"
#include "niu/program.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aimcemu;
    std::vector<std::uint32_t> words(size / 4);
    if (!words.empty()) std::memcpy(words.data(), data, words.size() * 4);
    niu::NiuProgram program;
    try {
        program = niu::NiuProgram::from_words(words, "<fuzz>");
    } catch (const FormatError&) {
        return 0;
    }
    if (!(niu::NiuProgram::from_words(program.to_words(), "<fuzz>") == program)) std::abort();
    return 0;
}
