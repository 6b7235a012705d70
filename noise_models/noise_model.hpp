// The polymorphic device noise model: program a layer's weights into a chip's devices, then
// read them at any time since programming, any number of rounds.
//
//   LayerState s = model.program(weights, shape, {seed, chip, layer});   // chip-fixed draws
//   std::vector<double> w = model.read(s, t, round);                     // fresh read draws
//
// program() draws programming noise and drift exponents once (keyed by seed, chip, layer,
// device index); read() draws read noise keyed additionally by `round`.  Reading the same state
// at several t drifts the same programmed devices.  Conductances are in uS, t in seconds since
// programming (aihwkit's t_inference).  Models never share random streams (see rng.hpp).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "noise_models/buffer_pool.hpp"
#include "noise_models/converter.hpp"
#include "noise_models/params.hpp"
#include "noise_models/rng.hpp"

namespace aimcemu::noise {

// Fault code of a device (generic model); other models leave every device Healthy.
enum class Fault : std::uint8_t { Healthy = 0, StuckLow = 1, StuckHigh = 2 };

// Which conductances drift and read noise start from.
//   Reconverted (aihwkit parity): W_prog = convert_back(g_prog) is re-converted with a scale
//     refitted on max|W_prog|, as aihwkit's apply_drift_noise does; so the "off" device of a
//     pair is zero again and the scale absorbs the programming noise of the largest weight.
//   Programmed (physical): the devices drift from the conductances actually programmed.
enum class DriftReference : std::uint8_t { Reconverted = 0, Programmed = 1 };

// The programmed devices of one layer of one chip.  Arrays are [weight][device].  Its arrays
// come from and go back to the engine's buffer pool (buffer_pool.hpp), so that the next layer
// reuses their pages instead of faulting in fresh ones.
struct LayerState {
    ChipKey key;
    std::vector<std::int64_t> shape;  // weight array shape; shape[0] = output channels
    PooledVector<double> weights;      // the clean weights that were programmed
    Conversion conversion;             // the converter fit at programming
    int devices_per_weight = 0;
    PooledVector<double> g_target;     // uS
    PooledVector<double> g_prog;       // uS, after programming noise
    PooledVector<double> nu;           // drift exponents (or model-specific drift parameter)
    PooledVector<std::uint8_t> fault;  // Fault codes
    // max |g_prog[2i] - g_prog[2i+1]| over the layer (uS), found while programming a layout of
    // two devices per weight (the re-converted read's scale needs it; finding it then, from L1,
    // spares the read a pass over g_prog); < 0 when not known.  Code that changes g_prog after
    // programming must set it to -1.
    double max_pair_difference = -1.0;
    // The model that programmed it (its name and its converter's parameters: g_max, g_min, the
    // converter and its own settings): a read or programmed_weights() through another physics or
    // another conductance mapping would misread the devices, so NoiseModel::check_state refuses
    // it.  Parameters used only when reading (read_noise_scale, t_read, t0), or only when
    // programming (their outcome is in the state), may differ: program once, read with another
    // read noise is a legitimate study.  Empty for a state not made by program(): not checked.
    std::string programmed_by;
    NoiseParams programmed_converter;

    std::size_t num_weights() const { return weights.size(); }
    std::size_t rows() const { return shape.empty() ? 1 : std::size_t(shape[0]); }

    LayerState() = default;
    LayerState(const LayerState&) = default;
    LayerState(LayerState&&) noexcept = default;
    LayerState& operator=(const LayerState&) = default;
    LayerState& operator=(LayerState&&) noexcept = default;
    ~LayerState();  // gives the arrays back to the buffer pool
};

// The random inputs of one device, one standard normal (or uniform) per purpose.
struct DeviceDraws {
    double prog = 0.0;       // N(0,1), Purpose::Programming
    double nu = 0.0;         // N(0,1), Purpose::DriftExponent
    double fault = 0.0;      // U[0,1), Purpose::Fault
    double read = 0.0;       // N(0,1), Purpose::Read
    double relaxation = 0.0; // N(0,1), Purpose::Relaxation
};

// What program_device() returns for one device.
struct ProgrammedDevice {
    double g_prog = 0.0;
    double nu = 0.0;
    Fault fault = Fault::Healthy;
};

// One device as read_device() sees it.
struct DeviceAtRead {
    double g_target = 0.0;  // uS, as converted at programming
    double g_start = 0.0;   // uS, where drift starts (g_prog, or re-converted: DriftReference)
    double nu = 0.0;
    Fault fault = Fault::Healthy;
};

// The random inputs of a block of consecutive devices: one array per purpose, null for purposes
// the model does not use (the engine fills them in bulk, simd.hpp).
struct BlockDraws {
    const double* prog = nullptr;
    const double* nu = nullptr;
    const double* fault = nullptr;
    const double* read = nullptr;
    const double* relaxation = nullptr;

    DeviceDraws at(std::size_t i) const;   // device i's draws (zero for unused purposes)
};

// Constants of one read that do not depend on the device, computed once per read.
struct ReadContext {
    double t = 0.0;            // s since programming
    double log_time = 0.0;     // PCM family: ln(t_total / t0) when t_total > t0, else 0; CMO: ln t
    double read_factor = 0.0;  // PCM family: sqrt(ln((t_total + t_read) / (2 t_read)));
                               // CMO: sqrt(ln((t + t_read) / (2 t_read))) with t_read = 1 us
};

class NoiseModel {
public:
    virtual ~NoiseModel() = default;
    NoiseModel(const NoiseModel&) = delete;
    NoiseModel& operator=(const NoiseModel&) = delete;

    // Factory name ("pcm_like", ...) and the full parameter set (every parameter of the
    // model's table, defaults resolved), so that make_noise_model(name(), params()) rebuilds
    // an identical model.
    virtual std::string name() const = 0;
    const NoiseParams& params() const { return params_; }
    // Refuses (FormatError naming "state") a state that another model programmed.
    void check_state(const LayerState& state) const;

    // Programs one layer.  weights: row-major, shape[0] = output channels.
    LayerState program(std::span<const double> weights, std::vector<std::int64_t> shape, const ChipKey& key) const;
    // Conductances ([weight][device], uS) of one read at time t after programming.
    std::vector<double> read_conductances(const LayerState& state, double t, std::uint64_t round) const;
    // Weights of one read at time t after programming (converted back with the read's scale).
    std::vector<double> read(const LayerState& state, double t, std::uint64_t round) const;
    // The same into out[0, num_weights) (no intermediate copy: the Python binding writes NumPy).
    void read_into(const LayerState& state, double t, std::uint64_t round, double* out) const;
    // Programmed weights (no drift, no read noise): convert_back(g_prog).
    std::vector<double> programmed_weights(const LayerState& state) const;

    const ConductanceConverter& converter() const { return *converter_; }
    DriftReference drift_reference() const { return drift_reference_; }
    // Worker threads for program/read (0 = hardware concurrency).  Results do not depend on it.
    // Atomic: Python may set it while another thread's program or read runs without the GIL;
    // each call reads it once.
    void set_num_threads(int n);  // FormatError naming num_threads when n < 0
    int num_threads() const { return num_threads_.load(std::memory_order_relaxed); }

    // Per-device physics, implemented by each model.  Draws for purposes not listed in
    // uses_purpose() are zero.
    virtual ProgrammedDevice program_device(double g_target, const DeviceDraws& draws) const = 0;
    virtual double read_device(const DeviceAtRead& device, const ReadContext& read, const DeviceDraws& draws) const = 0;
    virtual bool uses_purpose(Purpose p) const = 0;
    // The same physics for a block of `count` consecutive devices.  The defaults call
    // program_device / read_device per device; models override them with vectorised code.
    virtual void program_block(const double* g_target, const BlockDraws& draws, std::size_t count, double* g_prog,
                               double* nu, std::uint8_t* fault) const;
    virtual void read_block(const DeviceAtRead* devices, const ReadContext& read, const BlockDraws& draws,
                            std::size_t count, double* g) const;
    // A model's own path for a whole read (conductances into g_out and/or weights into w_out,
    // either may be null), used when it returns true; false = take the generic engine.  The
    // PCM-like model fuses re-conversion, drift and read noise here.
    virtual bool read_fused(const LayerState& state, double t, std::uint64_t round, double* g_out,
                            double* w_out) const;
    // Called once per read before any read_device(); throws FormatError for a bad t.
    virtual void check_time(double t) const;
    // The per-read constants (check_time has passed).
    virtual ReadContext read_context(double t) const { return ReadContext{t}; }

protected:
    // `resolved`: every parameter of the model as its table's resolve() returns them; the
    // converter and drift_reference are built from it here.
    explicit NoiseModel(NoiseParams resolved);
    double param_value(const std::string& name) const { return get_number(params_, name); }
    std::vector<double> param_list(const std::string& name) const { return get_numbers(params_, name); }

private:
    NoiseParams params_;
    std::unique_ptr<ConductanceConverter> converter_;
    DriftReference drift_reference_ = DriftReference::Reconverted;
    std::atomic<int> num_threads_{0};
};

// max |g[2i] - g[2i+1]| over `pairs` pairs (0 for none); exact, so the same in any grouping.
double max_pair_difference(const double* g, std::size_t pairs);

// Weights per chunk of for_each_weight_chunk (fixed: the random streams are positioned per chunk).
inline constexpr std::size_t kChunkWeights = std::size_t(1) << 14;

// Runs fn(begin, end) over [0, weights) in chunks of kChunkWeights whole weights on up to
// `threads` workers (0 = all cores).  Chunk boundaries never depend on the thread count, and every
// chunk starts at an even device, so positional streams (rng.hpp) start on a Box-Muller pair.
void for_each_weight_chunk(std::size_t weights, int threads, const std::function<void(std::size_t, std::size_t)>& fn);

// The table row every model has: which conductances drift starts from (`fallback` is the
// model's default, "reconverted" or "programmed").
ParamSpec drift_reference_row(const std::string& fallback);
// A noise scale (prog_noise_scale, read_noise_scale, drift_scale): >= 0, default 1 (aihwkit's).
ParamSpec scale_row(const std::string& name, const std::string& what);

// Builds a model from its factory name and parameters; unknown names, unknown parameters and
// invalid values throw FormatError naming the field.  Names: pcm_like, hermes,
// custom_drift_pcm, state_independent, reram_wan2022, reram_cmo, generic.
std::unique_ptr<NoiseModel> make_noise_model(const std::string& name, const NoiseParams& params);
std::vector<std::string> noise_model_names();
// The parameter table of a model (FormatError for an unknown name).
const ParamTable& noise_model_table(const std::string& name);

}  // namespace aimcemu::noise
