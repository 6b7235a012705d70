// PU presets and validation (see pu_config.hpp).
#include "perf_model/pu_config.hpp"

#include <algorithm>
#include <cctype>

#include "common/errors.hpp"

namespace aimcemu {

namespace {
void require(bool ok, const std::string& source, const std::string& field, const std::string& what) {
    if (!ok) throw FormatError(source, field, what);
}
}  // namespace

void PuConfig::validate(const std::string& source) const {
    require(r_sa > 0 && r_sa <= 4096, source, "r_sa", "must be in 1..4096");
    require(c_sa > 0 && c_sa <= 64, source, "c_sa", "must be in 1..64");
    require(r_g > 0, source, "r_g", "must be positive");
    require(fast_hz > 0 && axi_hz > 0, source, "fast_hz/axi_hz", "clocks must be positive");
    require(axi_bytes > 0 && align_bytes > 0, source, "axi_bytes/align_bytes", "must be positive");
    require(align_bytes % axi_bytes == 0 || axi_bytes % align_bytes == 0, source, "align_bytes",
            "must divide or be a multiple of axi_bytes");
    require(adm_command_overhead >= 0, source, "adm_command_overhead", "must be >= 0");
    require(adm_io_stream_bytes > 0 && adm_io_stream_bytes <= axi_bytes, source, "adm_io_stream_bytes",
            "must be in 1..axi_bytes");
    require(uram_count >= r_sa, source, "uram_count", "needs one URAM per SA row at least");
    require(uram_entries > 0, source, "uram_entries", "must be positive");
    require(uram_subregions >= 1, source, "uram_subregions", "must be >= 1");
    require(c_sa * 8 * uram_subregions == uram_weight_bits, source, "c_sa",
            "C_SA * 8 bit * sub-regions must equal the URAM weight width (" + std::to_string(uram_weight_bits) +
                " bit)");
    require(uram_cascades >= 1 && uram_write_bits >= 8 * uram_cascades, source, "uram_write_bits",
            "the URAM write side needs at least one byte per cascade");
    require(hbm_channel_peak_bytes_per_s > 0, source, "hbm_channel_peak_bytes_per_s", "must be positive");
    require(hbm_efficiency > 0 && hbm_efficiency <= 1, source, "hbm_efficiency", "must be in (0, 1]");
    require(postproc_pipeline >= 0 && hbm_latency_s >= 0, source, "pipeline",
            "depths and latency must be >= 0");
}

PuConfig pu2x() {
    PuConfig c;
    c.name = "PU2x";
    c.c_sa = 8;
    c.uram_subregions = 1;
    return c;
}

PuConfig pu1x() {
    PuConfig c;
    c.name = "PU1x";
    c.c_sa = 4;
    c.uram_subregions = 2;
    return c;
}

PuConfig pu_by_name(const std::string& name, const std::string& source) {
    std::string low = name;
    std::transform(low.begin(), low.end(), low.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (low == "pu2x") return pu2x();
    if (low == "pu1x") return pu1x();
    throw FormatError(source, "pu", "unknown PU type '" + name + "' (known: PU2x, PU1x)");
}

void HbmConfig::validate(const std::string& source) const {
    require(channels > 0, source, "hbm.channels", "must be positive");
    require(channel_bytes_per_s > 0, source, "hbm.channel_bytes_per_s", "must be positive");
}

}  // namespace aimcemu
