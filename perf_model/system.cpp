// System model: frame-parallel and layer-pipelined PUs, NIUs, HBM channels (see system.hpp).
#include "perf_model/system.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <regex>

#include "common/errors.hpp"
#include "perf_model/uram.hpp"

namespace aimcemu {

const char* to_string(MultiPuMode m) { return m == MultiPuMode::FrameParallel ? "frame-parallel" : "layer-pipelined"; }
const char* to_string(NiuSharing s) { return s == NiuSharing::Shared ? "shared" : "per-pu"; }

MultiPuMode multi_pu_mode_from_string(const std::string& s, const std::string& source) {
    if (s == "frame-parallel") return MultiPuMode::FrameParallel;
    if (s == "layer-pipelined") return MultiPuMode::LayerPipelined;
    throw FormatError(source, "mode", "unknown mode '" + s + "' (known: frame-parallel, layer-pipelined)");
}

NiuSharing niu_sharing_from_string(const std::string& s, const std::string& source) {
    if (s == "shared") return NiuSharing::Shared;
    if (s == "per-pu") return NiuSharing::PerPu;
    throw FormatError(source, "niu_sharing", "unknown NIU sharing '" + s + "' (known: shared, per-pu)");
}

void SystemConfig::validate(const std::string& source) const {
    if (pus.empty()) throw FormatError(source, "pus", "the system needs at least one PU slot");
    for (std::size_t i = 0; i < pus.size(); ++i) pus[i].validate(source + ":pus/" + std::to_string(i));
    hbm.validate(source);
    if (niu_count < 0) throw FormatError(source, "niu_count", "must be >= 0");
    if (niu_sharing == NiuSharing::Shared && niu_count >= int(pus.size()))
        throw FormatError(source, "niu_count", std::to_string(niu_count) + " NIUs leave no PU among " +
                                                   std::to_string(pus.size()) + " slots");
    if (niu_sharing == NiuSharing::PerPu && pus.size() < 2)
        throw FormatError(source, "niu_sharing", "per-pu NIUs need at least two slots");
}

SystemConfig u50_system() {
    SystemConfig cfg;
    for (int i = 0; i < 5; ++i) cfg.pus.push_back(pu2x());
    for (int i = 0; i < 5; ++i) cfg.pus.push_back(pu1x());
    return cfg;
}

std::vector<PuConfig> parse_pu_mix(const std::string& mix, const std::string& source) {
    std::vector<PuConfig> out;
    static const std::regex part(R"(\s*(\d+)\s*[xX*]\s*([A-Za-z0-9]+)\s*)");
    std::size_t start = 0;
    while (start <= mix.size()) {
        const std::size_t plus = mix.find('+', start);
        const std::string item = mix.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
        std::smatch m;
        if (!std::regex_match(item, m, part))
            throw FormatError(source, "pus", "cannot read '" + item + "' (expected e.g. 5xPU2x+5xPU1x)");
        const int count = std::stoi(m[1].str());
        if (count < 1 || count > 64) throw FormatError(source, "pus", "count in '" + item + "' must be 1..64");
        for (int i = 0; i < count; ++i) out.push_back(pu_by_name(m[2].str(), source));
        if (plus == std::string::npos) break;
        start = plus + 1;
    }
    return out;
}

namespace {

bool is_aimc(const std::vector<bool>& aimc, int layer) {
    return layer >= 0 && std::size_t(layer) < aimc.size() && aimc[std::size_t(layer)];
}

// Weights the NIU re-noises for one copy of the AIMC layers (the bias is never noisy).
std::int64_t aimc_weight_count(const Network& net, const std::vector<bool>& aimc, const std::vector<int>& layers) {
    std::int64_t n = 0;
    for (int i : layers)
        if (is_aimc(aimc, i) && net.layers[std::size_t(i)].is_gemm()) n += net.layers[std::size_t(i)].gemm_n() * net.layers[std::size_t(i)].gemm_m();
    return n;
}

// The AIMC layers among `layers`: each is one layer block of an NIU program.
int aimc_layer_count(const Network& net, const std::vector<bool>& aimc, const std::vector<int>& layers) {
    int n = 0;
    for (int i : layers) n += is_aimc(aimc, i) && net.layers[std::size_t(i)].is_gemm();
    return n;
}

// Seconds one NIU takes to re-noise one copy of `weights` weights in `layers` layers.
double niu_copy_seconds(const NiuThroughput& niu, std::int64_t weights, int layers) {
    return double(weights) / niu.weights_per_s + (layers > 0 ? niu.program_seconds : 0.0) + double(layers) * niu.layer_seconds;
}

std::vector<int> all_layers(const Network& net) {
    std::vector<int> v(net.layers.size());
    std::iota(v.begin(), v.end(), 0);
    return v;
}

// Chooses which digital layers stay resident: all of them if they fit beside room for two of the
// largest dynamic tiles, otherwise the first ones in network order that fit in that budget.
std::vector<bool> pick_static_layers(const NetworkTiming& t, const PuConfig& pu, const std::vector<int>& layers,
                                     const std::vector<bool>& aimc, std::int64_t already_static) {
    std::vector<std::string> names;
    std::vector<std::int64_t> m_eff, tiles;
    std::int64_t largest_dynamic = 0;
    for (int i : layers) {
        const LayerTiming& lt = t.layers[std::size_t(i)];
        const bool candidate = lt.timed && lt.tiles > 0 && !is_aimc(aimc, i) && lt.kind != LayerKind::AvgPool;
        names.push_back(lt.name);
        m_eff.push_back(lt.m_eff);
        tiles.push_back(candidate ? lt.tiles : 0);
        if (lt.timed && lt.tiles > 0 && lt.kind != LayerKind::AvgPool)
            largest_dynamic = std::max(largest_dynamic, uram_tile_entries(pu, lt.m_eff));
    }
    const std::int64_t capacity = uram_capacity_entries(pu) - already_static;
    StaticFitReport all = uram_static_fit(pu, names, m_eff, tiles, capacity);
    std::int64_t dynamic_need = 0;  // room the AIMC tiles need (two of the largest)
    for (int i : layers)
        if (is_aimc(aimc, i)) dynamic_need = 2 * largest_dynamic;
    if (all.total_entries + dynamic_need > capacity)
        all = uram_static_fit(pu, names, m_eff, tiles, std::max<std::int64_t>(0, capacity - 2 * largest_dynamic));
    std::vector<bool> pinned(t.layers.size(), false);
    for (const LayerFootprint& f : all.layers)
        if (f.fits_statically) pinned[std::size_t(layers[std::size_t(f.layer)])] = true;
    return pinned;
}

}  // namespace

PuRun run_pu(const Network& net, const PuConfig& pu, const TimingOptions& timing, SchedulePolicy policy,
             const std::vector<int>& layers_in, const std::vector<bool>& aimc, bool pin_static) {
    PuRun run;
    run.timing = time_network(net, pu, timing);
    run.layers = layers_in.empty() ? all_layers(net) : layers_in;
    std::vector<bool> included(net.layers.size(), false);
    for (int i : run.layers) {
        if (i < 0 || i >= int(net.layers.size()))
            throw FormatError("<system:" + net.name + ">", "layers", "layer index " + std::to_string(i) + " out of range");
        included[std::size_t(i)] = true;
    }
    // Tiles shared by a whole layer (block-diagonal average pool) are loaded once and kept.
    std::vector<bool> counted_shared(net.layers.size(), false);
    for (const TileTiming& tt : run.timing.tiles)
        if (included[std::size_t(tt.layer)] && tt.shared_static && !counted_shared[std::size_t(tt.layer)]) {
            run.static_entries += tt.entries;
            counted_shared[std::size_t(tt.layer)] = true;
        }
    std::vector<bool> pinned(net.layers.size(), false);
    if (pin_static) pinned = pick_static_layers(run.timing, pu, run.layers, aimc, run.static_entries);
    for (std::size_t i = 0; i < pinned.size(); ++i)
        if (pinned[i]) run.static_entries += run.timing.layers[i].tiles * uram_tile_entries(pu, run.timing.layers[i].m_eff);

    run.problem.source = "<schedule:" + net.name + "@" + pu.name + ">";
    run.problem.capacity = std::max<std::int64_t>(1, uram_capacity_entries(pu) - run.static_entries);
    run.problem.port_headroom = pu.port_bytes_per_s() / pu.weight_port_bytes_per_s();
    run.problem.load_latency_s = pu.hbm_latency_s;
    // The roofline variant moves weights for free: its schedule has no stall.
    const bool free_weights = timing.model == TimingModel::Roofline;
    for (const TileTiming& tt : run.timing.tiles) {
        if (!included[std::size_t(tt.layer)]) continue;
        const bool resident = tt.shared_static || pinned[std::size_t(tt.layer)];
        SchedTile st;
        st.exec_s = tt.exec_s;
        st.side_port_s = tt.side_port_s;
        st.label = run.timing.layers[std::size_t(tt.layer)].name + "#" + std::to_string(tt.tile);
        if (!resident) {
            run.weight_bytes_per_round += tt.load_bytes;
            if (!free_weights) {
                st.load_s = double(tt.load_bytes) / pu.weight_port_bytes_per_s();
                st.entries = tt.entries;
            }
        }
        run.problem.tiles.push_back(st);
    }
    for (int i : run.layers) {
        run.compute_s += run.timing.layers[std::size_t(i)].time_s;
        run.macs += run.timing.layers[std::size_t(i)].macs;
    }
    run.aimc_weight_bytes = aimc_weight_count(net, aimc, run.layers);
    if (run.problem.tiles.empty()) {  // only fused layers: nothing runs on the SA
        run.latency_s = run.compute_s;
        return run;
    }
    run.schedule = schedule(run.problem, policy);
    run.baseline = policy == SchedulePolicy::Baseline ? run.schedule : schedule(run.problem, SchedulePolicy::Baseline);
    run.lower_bound_stall_s = stall_lower_bound(run.problem);
    run.latency_s = run.schedule.period_s;
    return run;
}

namespace {

struct Slots {
    std::vector<int> pu_slots, niu_slots;
};

Slots assign_slots(const SystemConfig& cfg) {
    Slots s;
    const int total = int(cfg.pus.size());
    const int nius = cfg.niu_sharing == NiuSharing::PerPu ? total / 2 : cfg.niu_count;
    const int pus = cfg.niu_sharing == NiuSharing::PerPu ? total / 2 : total - nius;
    for (int i = 0; i < pus; ++i) s.pu_slots.push_back(i);
    for (int i = total - nius; i < total; ++i) s.niu_slots.push_back(i);
    return s;
}

PuReport make_report(int slot, const PuConfig& pu, const PuRun& run) {
    PuReport r;
    r.slot = slot;
    r.pu = pu.name;
    r.layers = run.layers;
    r.compute_s = run.compute_s;
    r.latency_s = run.latency_s;
    r.stall_s = run.schedule.stall_s;
    r.baseline_stall_s = run.baseline.stall_s;
    r.lower_bound_stall_s = run.lower_bound_stall_s;
    r.fps = run.latency_s > 0 ? 1.0 / run.latency_s : 0.0;
    return r;
}

// HBM bytes one frame moves on a PU's activation (input + output) and residual channels.
std::pair<double, double> activation_bytes(const PuRun& run) {
    double act = 0, res = 0;
    for (int i : run.layers) {
        const LayerTiming& lt = run.timing.layers[std::size_t(i)];
        act += double(lt.input_bytes + lt.output_bytes);
        res += double(lt.residual_bytes);
    }
    return {act, res};
}

SystemReport frame_parallel(const Network& net, const SystemConfig& cfg, const std::vector<bool>& aimc,
                            const Slots& slots) {
    SystemReport rep;
    rep.mode = MultiPuMode::FrameParallel;
    std::map<std::string, PuRun> runs;  // one schedule per PU type
    const double bw = cfg.hbm.channel_bytes_per_s;
    for (int slot : slots.pu_slots) {
        const PuConfig& pu = cfg.pus[std::size_t(slot)];
        auto it = runs.find(pu.name);
        if (it == runs.end()) it = runs.emplace(pu.name, run_pu(net, pu, cfg.timing, cfg.policy, {}, aimc, false)).first;
        rep.pus.push_back(make_report(slot, pu, it->second));
        rep.peak_ops += pu.peak_ops();
        rep.macs_per_frame = it->second.macs;
        rep.latency_s = std::max(rep.latency_s, it->second.latency_s);
    }
    rep.aimc_weights = aimc_weight_count(net, aimc, all_layers(net));
    rep.aimc_layers = aimc_layer_count(net, aimc, all_layers(net));
    rep.bottleneck = "PU compute and weight loads";
    const double copy_s = niu_copy_seconds(cfg.niu, rep.aimc_weights, rep.aimc_layers);
    // NIUs: balance the PUs' re-noising demand over the NIUs (largest demand first).
    for (int slot : slots.niu_slots) rep.nius.push_back(NiuReport{slot, {}, 0, 0, 0});
    if (!rep.nius.empty() && rep.aimc_weights > 0) {
        std::vector<std::size_t> order(rep.pus.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rep.pus[a].fps > rep.pus[b].fps; });
        for (std::size_t k = 0; k < order.size(); ++k) {
            PuReport& p = rep.pus[order[k]];
            std::size_t g = 0;
            if (cfg.niu_sharing == NiuSharing::PerPu) {
                g = k;
            } else {
                for (std::size_t n = 1; n < rep.nius.size(); ++n)
                    if (rep.nius[n].weights_per_s_needed < rep.nius[g].weights_per_s_needed) g = n;
            }
            p.niu = rep.nius[g].slot;
            rep.nius[g].pus.push_back(p.slot);
            rep.nius[g].weights_per_s_needed += p.fps * double(rep.aimc_weights);
            rep.nius[g].utilization += p.fps * copy_s;
        }
        for (NiuReport& n : rep.nius) {
            const double throttle = std::max(n.utilization, 1.0);
            if (n.utilization > 1.0) {  // the NIU cannot keep up: its PUs wait for their weights
                rep.bottleneck = "NIU";
                for (PuReport& p : rep.pus)
                    if (p.niu == n.slot) p.fps /= n.utilization;
            }
            n.channel_use = n.weights_per_s_needed / throttle * cfg.niu.channel_bytes_per_weight / bw;
        }
    }
    for (PuReport& p : rep.pus) {
        const PuRun& run = runs.at(p.pu);
        const auto [act, res] = activation_bytes(run);
        const double niu_writes = p.niu >= 0 ? double(rep.aimc_weights) : 0.0;
        p.weight_channel_use = (double(run.weight_bytes_per_round) + niu_writes) * p.fps / bw;
        p.activation_channel_use = act * p.fps / bw;
        p.residual_channel_use = res * p.fps / bw;
        rep.fps += p.fps;
        rep.max_channel_use = std::max({rep.max_channel_use, p.weight_channel_use, p.activation_channel_use,
                                        p.residual_channel_use});
    }
    for (const NiuReport& n : rep.nius) rep.max_channel_use = std::max(rep.max_channel_use, n.channel_use);
    rep.channels_used = 3 * int(rep.pus.size()) + int(rep.nius.size());
    return rep;
}

// Stage-time estimate used to cut the network: compute, or the weight traffic if it is larger.
double stage_estimate(const NetworkTiming& t, const PuConfig& pu, int first, int last, const std::vector<bool>& aimc) {
    double compute = 0, port = 0;
    std::int64_t entries = 0;
    double digital_bytes = 0;
    for (int i = first; i < last; ++i) {
        const LayerTiming& lt = t.layers[std::size_t(i)];
        compute += lt.time_s;
        if (!lt.timed || lt.kind == LayerKind::AvgPool) continue;
        if (is_aimc(aimc, i)) port += double(lt.weight_bytes);
        else {
            digital_bytes += double(lt.weight_bytes);
            entries += lt.tiles * uram_tile_entries(pu, lt.m_eff);
        }
    }
    if (entries > uram_capacity_entries(pu)) port += digital_bytes;  // must stream
    return std::max(compute, port / pu.weight_port_bytes_per_s());
}

// Cuts layers into at most `stages` contiguous stages (stage k on PU stage_pus[k]) minimising the
// largest estimate: bisection on the target time with a greedy fill.
std::vector<std::pair<int, int>> cut_stages(const Network& net, const std::vector<const NetworkTiming*>& timing,
                                            const std::vector<PuConfig>& stage_pus, const std::vector<bool>& aimc) {
    const int n = int(net.layers.size());
    auto fill = [&](double target) {
        std::vector<std::pair<int, int>> cuts;
        int first = 0;
        for (std::size_t k = 0; k < stage_pus.size() && first < n; ++k) {
            int last = first;
            while (last < n && stage_estimate(*timing[k], stage_pus[k], first, last + 1, aimc) <= target) ++last;
            if (last == first) return std::vector<std::pair<int, int>>{};
            cuts.emplace_back(first, last);
            first = last;
        }
        if (first < n) return std::vector<std::pair<int, int>>{};
        return cuts;
    };
    double lo = 0, hi = 0;
    for (std::size_t k = 0; k < stage_pus.size(); ++k) hi = std::max(hi, stage_estimate(*timing[k], stage_pus[k], 0, n, aimc));
    for (int iter = 0; iter < 60; ++iter) {
        const double mid = 0.5 * (lo + hi);
        if (fill(mid).empty()) lo = mid;
        else hi = mid;
    }
    return fill(hi);
}

SystemReport layer_pipelined(const Network& net, const SystemConfig& cfg, const std::vector<bool>& aimc,
                             const Slots& slots) {
    SystemReport rep;
    rep.mode = MultiPuMode::LayerPipelined;
    const double bw = cfg.hbm.channel_bytes_per_s;
    std::map<std::string, NetworkTiming> timings;
    std::vector<PuConfig> stage_pus;
    for (int slot : slots.pu_slots) {
        const PuConfig& pu = cfg.pus[std::size_t(slot)];
        stage_pus.push_back(pu);
        if (!timings.count(pu.name)) timings.emplace(pu.name, time_network(net, pu, cfg.timing));
    }
    std::vector<const NetworkTiming*> per_stage;
    for (const PuConfig& pu : stage_pus) per_stage.push_back(&timings.at(pu.name));
    const auto cuts = cut_stages(net, per_stage, stage_pus, aimc);
    if (cuts.empty()) throw FormatError("<system:" + net.name + ">", "pus", "cannot cut the network into stages");

    std::vector<int> stage_of(net.layers.size(), -1);
    double period = 0;
    for (std::size_t k = 0; k < cuts.size(); ++k) {
        std::vector<int> layers;
        for (int i = cuts[k].first; i < cuts[k].second; ++i) {
            layers.push_back(i);
            stage_of[std::size_t(i)] = int(k);
        }
        const PuConfig& pu = stage_pus[k];
        const PuRun run = run_pu(net, pu, cfg.timing, cfg.policy, layers, aimc, true);
        PuReport r = make_report(slots.pu_slots[k], pu, run);
        const auto [act, res] = activation_bytes(run);
        r.weight_channel_use = double(run.weight_bytes_per_round + run.aimc_weight_bytes);  // bytes/frame for now
        r.activation_channel_use = act;
        r.residual_channel_use = res;
        rep.pus.push_back(r);
        rep.peak_ops += pu.peak_ops();
        rep.macs_per_frame += run.macs;
        rep.latency_s += run.latency_s;
        if (run.latency_s > period) {
            period = run.latency_s;
            rep.bottleneck = "stage " + std::to_string(k) + " (" + pu.name + ", " + net.layers[std::size_t(cuts[k].first)].name + "..)";
        }
    }
    // Tensors crossing a stage boundary: written once to the producing stage's output channel
    // and read there once by every later stage that consumes them.
    std::vector<double> crossing(cuts.size(), 0.0);
    for (std::size_t c = 0; c < net.layers.size(); ++c) {
        const Layer& l = net.layers[c];
        std::vector<int> producers = {l.input};
        if (l.residual_input >= 0) producers.push_back(l.residual_input);
        for (int prod : producers) {
            if (prod < 0 || stage_of[std::size_t(prod)] == stage_of[c]) continue;
            crossing[std::size_t(stage_of[std::size_t(prod)])] += double(net.layers[std::size_t(prod)].out_shape.size());
        }
    }
    for (std::size_t k = 0; k < cuts.size(); ++k) {
        const double channel_time = (rep.pus[k].activation_channel_use + crossing[k]) / bw;
        if (channel_time > period) {
            period = channel_time;
            rep.bottleneck = "HBM channel of stage " + std::to_string(k);
        }
        const double weight_time = rep.pus[k].weight_channel_use / bw;
        if (weight_time > period) {
            period = weight_time;
            rep.bottleneck = "HBM weight channel of stage " + std::to_string(k);
        }
    }
    // NIUs: one copy of the AIMC weights per frame, split over the NIUs by stage.
    rep.aimc_weights = aimc_weight_count(net, aimc, all_layers(net));
    rep.aimc_layers = aimc_layer_count(net, aimc, all_layers(net));
    for (int slot : slots.niu_slots) rep.nius.push_back(NiuReport{slot, {}, 0, 0, 0});
    if (!rep.nius.empty() && rep.aimc_weights > 0) {
        std::vector<double> niu_weights(rep.nius.size(), 0.0), niu_seconds(rep.nius.size(), 0.0);
        for (std::size_t k = 0; k < rep.pus.size(); ++k) {
            const std::int64_t w = aimc_weight_count(net, aimc, rep.pus[k].layers);
            if (w == 0) continue;
            std::size_t g = 0;
            if (cfg.niu_sharing == NiuSharing::PerPu) g = k;
            else
                for (std::size_t n = 1; n < niu_seconds.size(); ++n)
                    if (niu_seconds[n] < niu_seconds[g]) g = n;
            niu_weights[g] += double(w);
            niu_seconds[g] += niu_copy_seconds(cfg.niu, w, aimc_layer_count(net, aimc, rep.pus[k].layers));
            rep.nius[g].pus.push_back(rep.pus[k].slot);
            rep.pus[k].niu = rep.nius[g].slot;
        }
        for (std::size_t g = 0; g < rep.nius.size(); ++g) {
            const double t = niu_seconds[g];
            if (t > period) {
                period = t;
                rep.bottleneck = "NIU";
            }
        }
        for (std::size_t g = 0; g < rep.nius.size(); ++g) {
            rep.nius[g].weights_per_s_needed = niu_weights[g] / period;
            rep.nius[g].utilization = niu_seconds[g] / period;
            rep.nius[g].channel_use = rep.nius[g].weights_per_s_needed * cfg.niu.channel_bytes_per_weight / bw;
        }
    }
    rep.fps = 1.0 / period;
    for (std::size_t k = 0; k < rep.pus.size(); ++k) {
        PuReport& p = rep.pus[k];
        p.fps = rep.fps;
        p.weight_channel_use *= rep.fps / bw;
        p.activation_channel_use = (p.activation_channel_use + crossing[k]) * rep.fps / bw;
        p.residual_channel_use *= rep.fps / bw;
        rep.max_channel_use = std::max({rep.max_channel_use, p.weight_channel_use, p.activation_channel_use,
                                        p.residual_channel_use});
    }
    for (const NiuReport& n : rep.nius) rep.max_channel_use = std::max(rep.max_channel_use, n.channel_use);
    rep.channels_used = 3 * int(rep.pus.size()) + int(rep.nius.size());
    return rep;
}

}  // namespace

SystemReport evaluate_system(const Network& net, const SystemConfig& cfg, const std::vector<bool>& aimc) {
    const std::string source = "<system:" + net.name + ">";
    cfg.validate(source);
    if (!aimc.empty() && aimc.size() != net.layers.size())
        throw FormatError(source, "aimc", "mapping has " + std::to_string(aimc.size()) + " entries for " +
                                              std::to_string(net.layers.size()) + " layers");
    const Slots slots = assign_slots(cfg);
    const bool any_aimc = std::any_of(aimc.begin(), aimc.end(), [](bool b) { return b; });
    if (any_aimc && slots.niu_slots.empty())
        throw FormatError(source, "niu_count", "AIMC layers need at least one NIU to re-noise their weights");
    if (any_aimc && !(cfg.niu.weights_per_s > 0 && std::isfinite(cfg.niu.weights_per_s)))
        throw FormatError(source, "niu.weights_per_s", "NIU throughput must be positive and finite");
    const auto check_cost = [&](double value, const char* field) {  // !(>= 0) also refuses NaN
        if (any_aimc && !(value >= 0 && std::isfinite(value)))
            throw FormatError(source, std::string("niu.") + field, "must be finite and >= 0, got " + std::to_string(value));
    };
    check_cost(cfg.niu.program_seconds, "program_seconds");
    check_cost(cfg.niu.layer_seconds, "layer_seconds");
    check_cost(cfg.niu.channel_bytes_per_weight, "channel_bytes_per_weight");
    SystemReport rep = cfg.mode == MultiPuMode::FrameParallel ? frame_parallel(net, cfg, aimc, slots)
                                                              : layer_pipelined(net, cfg, aimc, slots);
    if (rep.channels_used > cfg.hbm.channels)
        throw FormatError(source, "hbm.channels", "the system needs " + std::to_string(rep.channels_used) +
                                                      " HBM channels, the device has " + std::to_string(cfg.hbm.channels));
    rep.efficiency = rep.peak_ops > 0 ? rep.fps * 2.0 * rep.macs_per_frame / rep.peak_ops : 0.0;
    return rep;
}

}  // namespace aimcemu
