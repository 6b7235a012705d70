// Errors that carry where bad input came from.
//
// FormatError is thrown for any malformed input (model file, config, tensor shape).  Its message
// always names the source (a file path, or "<memory>") and the field, so that a user can fix the
// input without reading our code.  The Python bindings map it to aimcemu.FormatError (ValueError).
#pragma once
#include <stdexcept>
#include <string>

namespace aimcemu {

class FormatError : public std::runtime_error {
public:
    FormatError(const std::string& source, const std::string& field, const std::string& what)
        : std::runtime_error(source + ": field '" + field + "': " + what), source_(source), field_(field) {}
    const std::string& source() const noexcept { return source_; }
    const std::string& field() const noexcept { return field_; }

private:
    std::string source_;
    std::string field_;
};

}  // namespace aimcemu
