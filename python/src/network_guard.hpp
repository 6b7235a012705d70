// A network that the C++ core is reading in place, without the GIL or while it calls back into
// Python (run_network, feed_network), must not change under it: Python replacing its layers or a
// layer's weights would free the memory the pass reads.  While a NetworkReadGuard for a network is
// alive, every setter the bindings give Python for that network, its layers (the items of
// net.layers) and their windows and shapes refuses with aimcemu._core.NetworkInUseError (a
// RuntimeError).  Guards count, so passes may overlap on one network.  Everything here runs with
// the GIL held (the GIL is what orders a guard against a setter); defined in bind_network.cpp.
#pragma once
#include <stdexcept>

#include "formats/network.hpp"

namespace aimcemu::bindings {

class NetworkReadGuard {
public:
    explicit NetworkReadGuard(const Network& net);  // before the first Python call or GIL release
    ~NetworkReadGuard();                             // with the GIL held again
    NetworkReadGuard(const NetworkReadGuard&) = delete;
    NetworkReadGuard& operator=(const NetworkReadGuard&) = delete;

private:
    const Network& net_;
};

// Raised by a setter of a network a pass is reading.
class NetworkInUse : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace aimcemu::bindings
