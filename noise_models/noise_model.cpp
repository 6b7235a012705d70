// The program/read engine shared by every model: converts weights, splits the layer into
// chunks of whole weights, gives each chunk positional random streams (rng.hpp) and calls the
// model's per-device physics.  Chunks may run on any number of threads with identical results.
#include "noise_models/noise_model.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>

#include "common/errors.hpp"

namespace aimcemu::noise {

namespace {

constexpr std::size_t kChunkWeights = std::size_t(1) << 14;

int resolve_threads(int requested, std::size_t num_weights) {
    int n = requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
    const std::size_t chunks = (num_weights + kChunkWeights - 1) / kChunkWeights;
    return int(std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(n), chunks)));
}

// Runs fn(begin, end) over [0, n) in chunks of kChunkWeights, chunk c on thread c % threads.
template <class Fn>
void for_each_chunk(std::size_t n, int requested_threads, Fn&& fn) {
    const int threads = resolve_threads(requested_threads, n);
    const std::size_t chunks = (n + kChunkWeights - 1) / kChunkWeights;
    auto worker = [&](int id) {
        for (std::size_t c = std::size_t(id); c < chunks; c += std::size_t(threads))
            fn(c * kChunkWeights, std::min(n, (c + 1) * kChunkWeights));
    };
    if (threads == 1) {
        worker(0);
        return;
    }
    std::vector<std::jthread> pool;
    for (int id = 1; id < threads; ++id) pool.emplace_back(worker, id);
    worker(0);
}

// The streams one chunk needs, each positioned at the chunk's first device.
struct ChunkStreams {
    std::optional<DeviceStream> prog, nu, fault, read, relaxation;

    static ChunkStreams for_program(const NoiseModel& m, const ChipKey& key, std::uint64_t first_device) {
        ChunkStreams s;
        if (m.uses_purpose(Purpose::Programming)) s.prog.emplace(key, Purpose::Programming, 0, first_device);
        if (m.uses_purpose(Purpose::DriftExponent)) s.nu.emplace(key, Purpose::DriftExponent, 0, first_device);
        if (m.uses_purpose(Purpose::Fault)) s.fault.emplace(key, Purpose::Fault, 0, first_device);
        return s;
    }
    static ChunkStreams for_read(const NoiseModel& m, const ChipKey& key, std::uint64_t round, std::uint64_t first_device) {
        ChunkStreams s;
        if (m.uses_purpose(Purpose::Read)) s.read.emplace(key, Purpose::Read, round, first_device);
        if (m.uses_purpose(Purpose::Relaxation)) s.relaxation.emplace(key, Purpose::Relaxation, round, first_device);
        return s;
    }
    // One device's draws; every used stream advances by exactly one device.
    DeviceDraws next() {
        DeviceDraws d;
        if (prog) d.prog = prog->gaussian();
        if (nu) d.nu = nu->gaussian();
        if (fault) d.fault = fault->uniform();
        if (read) d.read = read->gaussian();
        if (relaxation) d.relaxation = relaxation->gaussian();
        return d;
    }
};

void check_weights(std::span<const double> weights, const std::vector<std::int64_t>& shape) {
    if (shape.empty()) throw FormatError("<memory>", "weights", "shape must have at least one dimension");
    std::int64_t count = 1;
    for (std::int64_t s : shape) {
        if (s <= 0) throw FormatError("<memory>", "weights", "every dimension of the shape must be > 0");
        count *= s;
    }
    if (std::size_t(count) != weights.size())
        throw FormatError("<memory>", "weights", "shape does not match the number of weights");
    for (double w : weights)
        if (!std::isfinite(w)) throw FormatError("<memory>", "weights", "weights must be finite");
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

LayerState NoiseModel::program(std::span<const double> weights, std::vector<std::int64_t> shape, const ChipKey& key) const {
    check_weights(weights, shape);
    LayerState s;
    s.key = key;
    s.shape = std::move(shape);
    s.weights.assign(weights.begin(), weights.end());
    s.conversion = converter_->fit(weights);
    s.devices_per_weight = converter_->devices_per_weight();
    s.g_target = converter_->convert(weights, s.conversion);
    const std::size_t devices = s.g_target.size();
    s.g_prog.resize(devices);
    s.nu.resize(devices);
    s.fault.resize(devices);
    const std::size_t d = std::size_t(s.devices_per_weight);
    for_each_chunk(weights.size(), num_threads_, [&](std::size_t begin, std::size_t end) {
        ChunkStreams streams = ChunkStreams::for_program(*this, key, begin * d);
        for (std::size_t i = begin * d; i < end * d; ++i) {
            const ProgrammedDevice p = program_device(s.g_target[i], streams.next());
            s.g_prog[i] = p.g_prog;
            s.nu[i] = p.nu;
            s.fault[i] = std::uint8_t(p.fault);
        }
    });
    return s;
}

std::vector<double> NoiseModel::programmed_weights(const LayerState& state) const {
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
    if (m.drift_reference() == DriftReference::Programmed) return {state.g_prog, state.conversion};
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
        ChunkStreams streams = ChunkStreams::for_read(m, state.key, round, begin * d);
        for (std::size_t i = begin * d; i < end * d; ++i) {
            const DeviceAtRead dev{state.g_target[i], g_start[i], state.nu[i], Fault(state.fault[i])};
            g[i] = m.read_device(dev, context, streams.next());
        }
    });
    return g;
}
}  // namespace

std::vector<double> NoiseModel::read_conductances(const LayerState& state, double t, std::uint64_t round) const {
    const ReadStart start = read_start(*this, state);
    return read_devices(*this, state, start.g_start, t, round);
}

std::vector<double> NoiseModel::read(const LayerState& state, double t, std::uint64_t round) const {
    const ReadStart start = read_start(*this, state);
    return converter_->convert_back(read_devices(*this, state, start.g_start, t, round), start.conversion);
}

}  // namespace aimcemu::noise
