// A test-only hook between the checking process's read of a user file and this process's own.
//
// Why: a file replaced (renamed over) between the two reads must not give a network or a data set
// made of two files.  The window lasts microseconds, so tests hit it with this hook: it is called
// with the path the user gave right after the checking process read the file and before this process
// reads it (load_model, load_dataset).  The product never sets it; unset, it costs one check of an
// empty std::function per load.
#pragma once
#include <functional>
#include <string>

namespace aimcemu {

// Test only: `hook` (empty = none) is called as described above, on the loading thread.
void set_between_reads_hook_for_tests(std::function<void(const std::string& path)> hook);

// Calls the hook when one is set (model_file.cpp).
void between_reads(const std::string& path);

}  // namespace aimcemu
