// The NIU program and its compiler (docs/niu_datapath.md sections 3 and 5).
//
// compile_program() turns a PCM-family noise model (noise_models/pcm.hpp, the single source of
// the physics), a time t, a chip, a round and per-layer drift compensation into the fixed-point
// tables, back-conversion scales and RNG stream states that the NIU consumes.  A program has
// a word image (to_words/from_words) that is what the RTL is loaded with.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "niu/niu_rng.hpp"
#include "niu_constants.hpp"

namespace aimcemu::noise {
class NoiseModel;
}

namespace aimcemu::niu {

inline constexpr int kCodeTable = gen::NIU_CODE_TABLE;
inline constexpr int kReadSegments = gen::NIU_RT_SEGMENTS;

// Device parameters of one clean-code magnitude a (docs section 3): target, programming sigma,
// drift-exponent mean and sigma.
struct CodeEntry {
    std::int32_t gt = 0, sp = 0, mu = 0, sn = 0;
    bool operator==(const CodeEntry&) const = default;
};

// Everything the NIU needs for one layer.
struct NiuLayerProgram {
    std::uint64_t src_addr = 0;   // clean weights (32-byte aligned)
    std::uint64_t dst_addr = 0;   // PU weight region of the layer (32-byte aligned)
    std::uint32_t count = 0;      // weights N*M
    int out_bits = 8;             // output code width B (2..8)
    std::uint32_t back_k = 0;     // back-conversion scale K
    std::uint32_t drift_lt = 0;   // log2(t_total / t0), Q5.11
    std::array<CodeEntry, kCodeTable> code{};
    std::array<std::int32_t, kReadSegments> rt{};   // relative read sigma at segment start, Q2.14
    std::array<std::int32_t, kReadSegments> rd{};   // rt[j+1] - rt[j]
    std::array<RngState, kGens * kStreams> rng{};   // start state of generator g, stream k at [g*32 + k]

    bool operator==(const NiuLayerProgram&) const = default;
};

struct NiuProgram {
    std::vector<NiuLayerProgram> layers;

    std::vector<std::uint32_t> to_words() const;
    // Parses and validates a word image; FormatError names `source` and the bad field.
    static NiuProgram from_words(std::span<const std::uint32_t> words, const std::string& source = "<memory>");
    bool operator==(const NiuProgram&) const = default;
};

// How clean codes map to g/g_max: |c|/A with A the layer's abs-max (aihwkit) or 127.
enum class AbsMaxMode { Layer, Fixed127 };

// One AIMC layer to compile.
struct NiuLayerSpec {
    std::uint64_t layer_id = 0;   // part of the RNG key: unique per layer of the network
    std::uint32_t count = 0;      // weights N*M
    int absmax = 127;             // A, 1..127 (see clean_absmax)
    double alpha = 1.0;           // global drift compensation, folded into K
    std::uint64_t src_addr = 0;
    std::uint64_t dst_addr = 0;
};

// A for a layer's clean codes: min(max|c|, 127) (at least 1) or 127.
int clean_absmax(std::span<const std::int8_t> clean, AbsMaxMode mode);
// The A a layer program was compiled for, read back from its code table: compile_program maps
// every code |c| >= A to full scale and each smaller one below it (2^-NIU_G_FRAC steps resolve
// (A-1)/A from 1), so A is the first code whose target is full scale.  What lets a holder of the
// clean weights check a program against them without compiling it again.
int code_table_absmax(const NiuLayerProgram& layer);

struct NiuCompileOptions {
    std::uint64_t seed = 0;   // master seed of the study
    std::uint64_t chip = 0;   // chip instance
    std::uint64_t round = 0;  // inference round (read noise only)
    double t = 0.0;           // seconds since programming (aihwkit's t_inference), >= 0
    int out_bits = 8;         // PU weight code width (2..8)
};

// Throws FormatError unless the NIU datapath runs `model`: a PCM-family model on one
// differential pair with g_min = 0 and drift_reference Programmed (compile_program's first check).
void check_model(const noise::NoiseModel& model);

// Throws FormatError unless compile_program can make a program of `model` at `t` seconds for any
// layer: its checks of the model and t, and its tables at t (programming, drift and read noise)
// for every abs-max 1..127, each entry within its fixed-point field.  The tables depend on the
// weights only through the abs-max, so a run checks its models at its t values once, before any
// work, instead of failing at its first round at a t the drift field cannot hold.
// check_runs_at(model, t) is check_code_tables(model) and check_tables_at(model, t): a caller with
// several t values checks the code tables (127 of them, the bulk of the work) once.
void check_runs_at(const noise::NoiseModel& model, double t);
// The part that does not depend on t: the per-code tables (programming noise and drift exponent)
// for every abs-max 1..127.
void check_code_tables(const noise::NoiseModel& model);
// The part that does: t itself, the drift field log2((t + t0)/t0) and the read-noise table at t.
void check_tables_at(const noise::NoiseModel& model, double t);

// Throws FormatError for a model outside the PCM family, a converter other than a single pair
// with g_min = 0, negative or non-finite t, bad alpha, absmax or out_bits.
NiuProgram compile_program(const noise::NoiseModel& model, const std::vector<NiuLayerSpec>& layers,
                           const NiuCompileOptions& options);

// The largest drift-compensation alpha whose back-conversion scale K (NIU_K_BITS wide) holds
// for a layer of abs-max `absmax` with `out_bits`-bit codes (docs/niu_datapath.md section 3).
double max_alpha(int absmax, int out_bits = 8);

}  // namespace aimcemu::niu
