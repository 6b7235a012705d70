// NIU time and bytes per round (see niu_timing.hpp).
#include "niu/niu_timing.hpp"

#include <algorithm>
#include <cmath>

#include "common/errors.hpp"

namespace aimcemu {

void NiuConfig::validate(const std::string& source) const {
    if (!(lanes_per_cycle > 0)) throw FormatError(source, "niu.lanes_per_cycle", "must be positive");
    if (lanes_per_cycle > beat_bytes)
        throw FormatError(source, "niu.lanes_per_cycle", "cannot exceed the lanes of one beat (" + std::to_string(beat_bytes) + ")");
    if (!(clock_hz > 0)) throw FormatError(source, "niu.clock_hz", "must be positive");
    if (beat_bytes <= 0) throw FormatError(source, "niu.beat_bytes", "must be positive");
    if (!(channel_bytes_per_s > 0)) throw FormatError(source, "niu.channel_bytes_per_s", "must be positive");
    if (!(channel_efficiency > 0 && channel_efficiency <= 1))
        throw FormatError(source, "niu.channel_efficiency", "must be in (0, 1]");
}

NiuThroughput niu_throughput(const NiuConfig& cfg) {
    cfg.validate();
    const double datapath = cfg.lanes_per_cycle * cfg.clock_hz;
    const double port = double(cfg.beat_bytes) * cfg.clock_hz;  // bytes per direction = weights/s
    const double channel = cfg.channel_bytes_per_s * cfg.channel_efficiency / 2.0;
    NiuThroughput t;
    t.channel_bytes_per_weight = 2.0;
    t.weights_per_s = std::min({datapath, port, channel});
    t.bound = t.weights_per_s == datapath ? "datapath" : (t.weights_per_s == channel ? "hbm-channel" : "axi-port");
    return t;
}

NiuRoundTime niu_round_time(const NiuConfig& cfg, std::int64_t weights) {
    if (weights < 0) throw FormatError("<niu>", "weights", "must be >= 0");
    const NiuThroughput t = niu_throughput(cfg);
    NiuRoundTime r;
    r.weights = weights;
    r.weights_per_s = t.weights_per_s;
    r.bound = t.bound;
    r.seconds = double(weights) / t.weights_per_s;
    // Whole beats move on the bus: a partial last beat still costs a full one.
    const std::int64_t beats = (weights + cfg.beat_bytes - 1) / cfg.beat_bytes;
    r.bytes_read = beats * cfg.beat_bytes;
    r.bytes_written = beats * cfg.beat_bytes;
    return r;
}

}  // namespace aimcemu
