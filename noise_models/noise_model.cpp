// The program/read engine shared by every model: converts weights, splits the layer into
// chunks of whole weights, gives each chunk positional random streams (rng.hpp) and calls the
// model's per-device physics.  Chunks may run on any number of threads with identical results.
#include "noise_models/noise_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "common/errors.hpp"
#include "common/worker_pool.hpp"
#include "noise_models/buffer_pool.hpp"

namespace aimcemu::noise {

namespace {

int resolve_threads(int requested, std::size_t num_weights) {
    int n = requested > 0 ? requested : usable_cpus();
    const std::size_t chunks = (num_weights + kChunkWeights - 1) / kChunkWeights;
    return int(std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(n), chunks)));
}

}  // namespace

// Eight running maxima, not one chain that waits a max latency per pair.
double max_pair_difference(const double* g, std::size_t pairs) {
    double lane[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= pairs; i += 8)
        for (std::size_t k = 0; k < 8; ++k) lane[k] = std::max(lane[k], std::abs(g[2 * (i + k)] - g[2 * (i + k) + 1]));
    for (; i < pairs; ++i) lane[0] = std::max(lane[0], std::abs(g[2 * i] - g[2 * i + 1]));
    double m = 0.0;
    for (double x : lane) m = std::max(m, x);
    return m;
}

void for_each_weight_chunk(std::size_t n, int requested_threads, const std::function<void(std::size_t, std::size_t)>& fn) {
    const int threads = resolve_threads(requested_threads, n);
    const std::size_t chunks = (n + kChunkWeights - 1) / kChunkWeights;
    run_on_worker_pool(std::int64_t(chunks), threads, [&](std::int64_t c) {
        fn(std::size_t(c) * kChunkWeights, std::min(n, (std::size_t(c) + 1) * kChunkWeights));
    });
}

namespace {

template <class Fn>
void for_each_chunk(std::size_t n, int requested_threads, Fn&& fn) {
    for_each_weight_chunk(n, requested_threads, fn);
}

// Devices per block: the draws of a block are made in bulk and stay in L1 while the model uses them.
constexpr std::size_t kBlockDevices = 512;

// The streams one chunk needs, each positioned at the chunk's first device, and the block
// buffers their draws go to.
struct ChunkStreams {
    std::optional<DeviceStream> prog, nu, fault, read, relaxation;
    double buffer[5][kBlockDevices];

    static void open(std::optional<DeviceStream>& s, const NoiseModel& m, const ChipKey& key, Purpose p,
                     std::uint64_t round, std::uint64_t first_device) {
        if (m.uses_purpose(p)) s.emplace(key, p, round, first_device);
    }
    static std::unique_ptr<ChunkStreams> for_program(const NoiseModel& m, const ChipKey& key, std::uint64_t first_device) {
        auto s = std::make_unique<ChunkStreams>();
        open(s->prog, m, key, Purpose::Programming, 0, first_device);
        open(s->nu, m, key, Purpose::DriftExponent, 0, first_device);
        open(s->fault, m, key, Purpose::Fault, 0, first_device);
        return s;
    }
    static std::unique_ptr<ChunkStreams> for_read(const NoiseModel& m, const ChipKey& key, std::uint64_t round,
                                                  std::uint64_t first_device) {
        auto s = std::make_unique<ChunkStreams>();
        open(s->read, m, key, Purpose::Read, round, first_device);
        open(s->relaxation, m, key, Purpose::Relaxation, round, first_device);
        return s;
    }
    // The next `count` devices' draws; every used stream advances by exactly `count` devices.
    BlockDraws next(std::size_t count) {
        BlockDraws d;
        if (prog) prog->gaussians(buffer[0], count), d.prog = buffer[0];
        if (nu) nu->gaussians(buffer[1], count), d.nu = buffer[1];
        if (fault) fault->uniforms(buffer[2], count), d.fault = buffer[2];
        if (read) read->gaussians(buffer[3], count), d.read = buffer[3];
        if (relaxation) relaxation->gaussians(buffer[4], count), d.relaxation = buffer[4];
        return d;
    }
};

void check_shape(std::span<const double> weights, const std::vector<std::int64_t>& shape) {
    if (shape.empty()) throw FormatError("<memory>", "weights", "shape must have at least one dimension");
    std::int64_t count = 1;
    for (std::int64_t s : shape) {
        if (s <= 0) throw FormatError("<memory>", "weights", "every dimension of the shape must be > 0");
        count *= s;
    }
    if (std::size_t(count) != weights.size())
        throw FormatError("<memory>", "weights", "shape does not match the number of weights");
}

// The smallest and the largest weight, after checking that every weight is finite.
struct WeightRange {
    double lo = 0.0, hi = 0.0;
};

// One chunk's range in eight running lanes (one min/max chain would wait a latency per weight).
WeightRange chunk_range(const double* w, std::size_t n) {
    double lo[8], hi[8];
    bool finite = true;
    for (std::size_t k = 0; k < 8; ++k) lo[k] = hi[k] = w[0];
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (std::size_t k = 0; k < 8; ++k) {
            const double x = w[i + k];
            lo[k] = std::min(lo[k], x);
            hi[k] = std::max(hi[k], x);
            finite &= std::abs(x) <= std::numeric_limits<double>::max();   // false for inf and NaN
        }
    for (; i < n; ++i) {
        lo[0] = std::min(lo[0], w[i]);
        hi[0] = std::max(hi[0], w[i]);
        finite &= std::abs(w[i]) <= std::numeric_limits<double>::max();
    }
    if (!finite) throw FormatError("<memory>", "weights", "weights must be finite");
    WeightRange r{lo[0], hi[0]};
    for (std::size_t k = 1; k < 8; ++k) r.lo = std::min(r.lo, lo[k]), r.hi = std::max(r.hi, hi[k]);
    return r;
}

// Checks every weight finite and fits the converter, the pass over the weights on the workers:
// a fit depends only on the smallest and the largest weight (converter.hpp), so fitting on
// those two gives the fit of the whole layer.  A zero at either end is the exception: which
// zero (+0 or -0) a fit keeps depends on the order of the weights, so then the converter fits
// the whole layer itself (serially; only layers with no weight of one sign).
Conversion check_and_fit(const ConductanceConverter& converter, std::span<const double> weights, int threads) {
    std::vector<WeightRange> ranges((weights.size() + kChunkWeights - 1) / kChunkWeights);
    for_each_weight_chunk(weights.size(), threads, [&](std::size_t begin, std::size_t end) {
        ranges[begin / kChunkWeights] = chunk_range(weights.data() + begin, end - begin);
    });
    WeightRange all = ranges.front();
    for (const WeightRange& r : ranges) all.lo = std::min(all.lo, r.lo), all.hi = std::max(all.hi, r.hi);
    if (all.lo == 0.0 || all.hi == 0.0) return converter.fit(weights);
    const double ends[2] = {all.lo, all.hi};
    return converter.fit(ends);
}

}  // namespace

NoiseModel::NoiseModel(NoiseParams resolved)
    : params_(std::move(resolved)),
      converter_(make_converter(params_)),
      drift_reference_(get_text(params_, "drift_reference") == "programmed" ? DriftReference::Programmed
                                                                            : DriftReference::Reconverted) {}

ParamSpec scale_row(const std::string& name, const std::string& what) {
    return number(name).fallback(1.0).non_negative().doc("multiplies the " + what);
}

ParamSpec drift_reference_row(const std::string& fallback) {
    return text("drift_reference")
        .fallback(fallback)
        .one_of({std::string("reconverted"), std::string("programmed")})
        .doc("where drift and read noise start: 'reconverted' re-fits the programmed weights as aihwkit does, "
             "'programmed' drifts the devices as programmed");
}

void NoiseModel::check_time(double t) const {
    if (!(t >= 0.0) || !std::isfinite(t))
        throw FormatError("noise model '" + name() + "'", "t", "time since programming must be finite and >= 0 s");
}

void NoiseModel::set_num_threads(int n) {
    if (n < 0) throw FormatError("noise model '" + name() + "'", "num_threads", "must be >= 0 (0 = all cores), got " + std::to_string(n));
    num_threads_.store(n, std::memory_order_relaxed);
}

LayerState NoiseModel::program(std::span<const double> weights, std::vector<std::int64_t> shape, const ChipKey& key) const {
    check_shape(weights, shape);
    LayerState s;
    s.programmed_by = name();
    s.programmed_converter = converter_->params();
    s.key = key;
    s.shape = std::move(shape);
    const int threads = num_threads();  // once: the same count for the fit and the chunks
    s.conversion = check_and_fit(*converter_, weights, threads);
    s.devices_per_weight = converter_->devices_per_weight();
    const std::size_t d = std::size_t(s.devices_per_weight);
    // Every array is taken from the buffer pool and written whole, chunk by chunk, below.
    s.weights = take_doubles(weights.size());
    s.g_target = take_doubles(weights.size() * d);
    s.g_prog = take_doubles(weights.size() * d);
    s.nu = take_doubles(weights.size() * d);
    s.fault = take_bytes(weights.size() * d);
    std::vector<double> chunk_pair_max(d == 2 ? (weights.size() + kChunkWeights - 1) / kChunkWeights : 0);
    for_each_chunk(weights.size(), threads, [&](std::size_t begin, std::size_t end) {
        // The chunk's copy and conversion on its own thread; its g_target (256 KiB for a pair)
        // is still in L2 when the blocks below program it.
        std::copy(weights.begin() + begin, weights.begin() + end, s.weights.begin() + begin);
        converter_->convert_into(weights.subspan(begin, end - begin), s.conversion, s.g_target.data() + begin * d);
        const auto streams = ChunkStreams::for_program(*this, key, begin * d);
        double chunk_max = 0.0;
        for (std::size_t i = begin * d; i < end * d; i += kBlockDevices) {
            const std::size_t count = std::min(kBlockDevices, end * d - i);
            program_block(s.g_target.data() + i, streams->next(count), count, s.g_prog.data() + i, s.nu.data() + i,
                          s.fault.data() + i);
            if (d == 2)   // blocks hold whole pairs (chunks start on a pair, kBlockDevices is even)
                chunk_max = std::max(chunk_max, max_pair_difference(s.g_prog.data() + i, count / 2));
        }
        if (d == 2) chunk_pair_max[begin / kChunkWeights] = chunk_max;
    });
    if (d == 2) s.max_pair_difference = *std::max_element(chunk_pair_max.begin(), chunk_pair_max.end());
    return s;
}

LayerState::~LayerState() {
    give_back(std::move(weights));
    give_back(std::move(g_target));
    give_back(std::move(g_prog));
    give_back(std::move(nu));
    give_back(std::move(fault));
}

DeviceDraws BlockDraws::at(std::size_t i) const {
    DeviceDraws d;
    if (prog) d.prog = prog[i];
    if (nu) d.nu = nu[i];
    if (fault) d.fault = fault[i];
    if (read) d.read = read[i];
    if (relaxation) d.relaxation = relaxation[i];
    return d;
}

void NoiseModel::program_block(const double* g_target, const BlockDraws& draws, std::size_t count, double* g_prog,
                               double* nu, std::uint8_t* fault) const {
    for (std::size_t i = 0; i < count; ++i) {
        const ProgrammedDevice p = program_device(g_target[i], draws.at(i));
        g_prog[i] = p.g_prog;
        nu[i] = p.nu;
        fault[i] = std::uint8_t(p.fault);
    }
}

void NoiseModel::read_block(const DeviceAtRead* devices, const ReadContext& read, const BlockDraws& draws,
                            std::size_t count, double* g) const {
    for (std::size_t i = 0; i < count; ++i) g[i] = read_device(devices[i], read, draws.at(i));
}

bool NoiseModel::read_fused(const LayerState&, double, std::uint64_t, double*, double*) const { return false; }

namespace {
// The parameters in which two resolved sets differ, "g_max 25 vs 50, t0 20 vs 30".
std::string differences(const NoiseParams& programmed, const NoiseParams& reader) {
    std::string text;
    auto add = [&](const std::string& key, const std::string& was, const std::string& is) {
        text += (text.empty() ? "" : ", ") + key + " " + was + " vs " + is;
    };
    for (const auto& [key, value] : programmed) {
        const auto it = reader.find(key);
        if (it == reader.end()) add(key, format_value(value), "(none)");
        else if (it->second != value) add(key, format_value(value), format_value(it->second));
    }
    for (const auto& [key, value] : reader)
        if (!programmed.count(key)) add(key, "(none)", format_value(value));
    return text;
}
}  // namespace

void NoiseModel::check_state(const LayerState& state) const {
    const NoiseParams converter_params = converter_->params();
    if (state.programmed_by.empty() ||
        (state.programmed_by == name() && state.programmed_converter == converter_params))
        return;
    throw FormatError("<memory>", "state",
                      "programmed by noise model '" + state.programmed_by + "', read through '" + name() + "' (" +
                          differences(state.programmed_converter, converter_params) +
                          "): a state reads only through a model of the same physics and conductance mapping");
}

std::vector<double> NoiseModel::programmed_weights(const LayerState& state) const {
    check_state(state);
    return converter_->convert_back(state.g_prog, state.conversion);
}

namespace {
// The starting conductances of a read and the conversion to map them back.
struct ReadStart {
    std::vector<double> g_start;
    Conversion conversion;
};

ReadStart read_start(const NoiseModel& m, const LayerState& state) {
    const ConductanceConverter& conv = m.converter();
    if (state.g_prog.size() != state.weights.size() * std::size_t(conv.devices_per_weight()))
        throw FormatError("<memory>", "state", "device state does not belong to this model's converter");
    if (m.drift_reference() == DriftReference::Programmed)
        return {std::vector<double>(state.g_prog.begin(), state.g_prog.end()), state.conversion};
    // aihwkit parity: re-convert W_prog with a freshly fitted scale.
    const std::vector<double> w_prog = conv.convert_back(state.g_prog, state.conversion);
    ReadStart r;
    r.conversion = conv.fit(w_prog);
    r.g_start = conv.convert(w_prog, r.conversion);
    return r;
}

std::vector<double> read_devices(const NoiseModel& m, const LayerState& state, const std::vector<double>& g_start,
                                 double t, std::uint64_t round) {
    m.check_time(t);
    const ReadContext context = m.read_context(t);
    const std::size_t d = std::size_t(state.devices_per_weight);
    std::vector<double> g(g_start.size());
    for_each_chunk(state.num_weights(), m.num_threads(), [&](std::size_t begin, std::size_t end) {
        const auto streams = ChunkStreams::for_read(m, state.key, round, begin * d);
        DeviceAtRead devices[kBlockDevices];
        for (std::size_t i = begin * d; i < end * d; i += kBlockDevices) {
            const std::size_t count = std::min(kBlockDevices, end * d - i);
            for (std::size_t k = 0; k < count; ++k)
                devices[k] = {state.g_target[i + k], g_start[i + k], state.nu[i + k], Fault(state.fault[i + k])};
            m.read_block(devices, context, streams->next(count), count, g.data() + i);
        }
    });
    return g;
}
}  // namespace

std::vector<double> NoiseModel::read_conductances(const LayerState& state, double t, std::uint64_t round) const {
    check_state(state);
    std::vector<double> g(state.g_prog.size());
    if (read_fused(state, t, round, g.data(), nullptr)) return g;
    const ReadStart start = read_start(*this, state);
    return read_devices(*this, state, start.g_start, t, round);
}

std::vector<double> NoiseModel::read(const LayerState& state, double t, std::uint64_t round) const {
    std::vector<double> w(state.num_weights());  // (Python reads into a pooled NumPy array instead)
    read_into(state, t, round, w.data());
    return w;
}

void NoiseModel::read_into(const LayerState& state, double t, std::uint64_t round, double* out) const {
    check_state(state);
    if (read_fused(state, t, round, nullptr, out)) return;
    const ReadStart start = read_start(*this, state);
    const std::vector<double> w =
        converter_->convert_back(read_devices(*this, state, start.g_start, t, round), start.conversion);
    std::copy(w.begin(), w.end(), out);
}

}  // namespace aimcemu::noise
