// The emulation loop of one hybrid system: a PU running a resolved network from the modelled HBM
// while an NIU rewrites the AIMC layers' weights there, one round at a time: the system is PUs,
// NIUs, HBM and a mapping, and it runs rounds (docs/architecture.md).
//
// A round flows through HBM as the hardware's does (docs/hybrid_runs.md, "A round through HBM"):
//
//   clean region --NIU--> back weight buffer --publish--> front buffer --lease--> PU
//
// The HBM is laid out by HbmLayout::for_network: every AIMC layer has a clean region (filled once
// from the network's weights) and two weight buffers; every digital GEMM layer one weight region,
// filled once and never written again.  WeightRoundFence swaps the buffers of all AIMC layers at
// once, so the PU never runs on a mix of two rounds.  The NIU program's layer k is the AIMC layer
// aimc_layers()[k]; it reads the clean region and writes the back buffer of the round being
// written, whatever addresses the program was compiled with.  Each AIMC layer's chip half (its
// programmed devices, 8 bytes per weight) is kept from the first round of a chip to the next
// chip (write_round).
//
// The HBM holds the only copy of the weights the emulator keeps: once the regions are filled the
// emulator's network keeps its layers' shapes and biases but not their weights, and the digital
// layers are packed for the fast kernel from their HBM regions.  The clean abs-max of each AIMC
// layer (the A of its code table) is taken once, while its clean region is filled, for callers
// compiling many programs (clean_absmax) and to check every program written (write_round).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "niu/niu_model.hpp"
#include "niu/program.hpp"
#include "pu_model/hbm.hpp"
#include "pu_model/inference.hpp"
#include "formats/network.hpp"

namespace aimcemu::niu {

struct RoundOutputs {
    std::uint64_t round = 0;                    // the fence's round id the PU ran (1, 2, ...)
    std::vector<std::vector<Tensor8>> outputs;  // [image][layer], as run_network_batch returns
};

class Emulator {
public:
    // `net` must pass Network::resolve's checks (FormatError with resolve's message otherwise);
    // every AIMC layer must be a distinct GEMM layer (FormatError otherwise).  `net` is read
    // during the constructor only (its weights are copied into the HBM); a resolved network is
    // checked in place, one whose shapes are not filled in yet is resolved in a copy.
    Emulator(const Network& net, std::vector<int> aimc_layers);
    // Hands the chip states' memory to the next emulator of the process (kept_chip_state_bytes).
    ~Emulator();
    Emulator(const Emulator&) = delete;
    Emulator& operator=(const Emulator&) = delete;

    // One whole round: the NIU writes every AIMC layer (write_round), then the PU runs `images` on
    // the round it just published (run_published).  Rounds of one emulator run one after another.
    // options.threads serves both the NIU and the PU; options.weights is ignored (the HBM is the
    // source).  Results never depend on the thread count.
    RoundOutputs run_round(const NiuProgram& program, const std::vector<Tensor8>& images, const RunOptions& options);

    // The NIU half: takes the fence's back buffers, writes every AIMC layer there from its clean
    // region and publishes them.  The bytes are the full NIU model's; a layer's chip state is
    // recomputed (in its own memory) only when the program's chip half (seed, chip, layer, noise
    // model) changes.  Returns the round id published.  The program must have one layer per AIMC
    // layer with that layer's weight count, compiled for the layer's clean abs-max or for 127
    // (absmax "fixed"); FormatError naming the layer otherwise.
    std::uint64_t write_round(const NiuProgram& program, int threads);

    // The PU half: leases the latest published round and runs `images` on it.  With
    // expected_round != 0, throws FormatError unless the lease holds that round.
    RoundOutputs run_published(const std::vector<Tensor8>& images, const RunOptions& options,
                               std::uint64_t expected_round = 0);

    // The weights the PU reads for layer `index` now: an AIMC layer's latest published noisy
    // weights (FormatError before the first round), a digital GEMM layer's clean ones.
    std::vector<std::int8_t> weights(int index);

    // The network's layers, shapes and biases; its weights are in the HBM only (weights()).
    const Network& network() const { return net_; }
    // Layer aimc_layers()[k]'s clean weights, as the NIU reads them (valid for the emulator's life).
    std::span<const std::int8_t> clean_weights(std::size_t k) const;
    // clean_absmax(clean_weights(k), Layer) for every AIMC layer k, computed once.
    const std::vector<int>& clean_absmax() const { return clean_absmax_; }
    const std::vector<int>& aimc_layers() const { return aimc_layers_; }
    const Hbm& hbm() const { return hbm_; }
    std::uint64_t published_round() const { return fence_.published_round(); }

private:
    struct FromResolved {};
    // `source` resolved, with its weights: they are copied into the HBM; source is not kept.
    Emulator(const Network& source, std::vector<int> aimc_layers, FromResolved);
    bool is_aimc(int index) const;
    const HbmRegion& gemm_weight_region(int index) const;

    Network net_;                      // without weights once the HBM holds them
    std::vector<int> aimc_layers_;
    Hbm hbm_;
    WeightRoundFence fence_;  // refers to hbm_'s layout: declared after it
    std::vector<std::size_t> weight_count_;   // per network layer
    std::vector<int> clean_absmax_;           // per AIMC layer
    std::mutex round_mutex_;  // run_round: one write + run at a time
    std::mutex chip_states_mutex_;            // write_round: one NIU writer at a time
    std::vector<NiuChipState> chip_states_;   // per AIMC layer, of the last chip written
    // The digital GEMM layers' weights packed for the fast kernel once, on the first round that
    // uses that kernel (their HBM regions are never rewritten, so every round reads the same
    // bytes); AIMC layers change every round and are packed by each run.
    const PackedNetwork& digital_packed(FastKernel kernel, int threads);
    std::mutex packed_mutex_;
    std::map<FastKernel, std::unique_ptr<PackedNetwork>> digital_packed_;   // one per kernel used
    // The PU passes' buffers (activations, IM2COL operands, the AIMC layers' packed weights),
    // kept from round to round so that a pass reuses the previous one's memory instead of
    // page-faulting it in again (pu_model/pass_buffers.hpp); used unless the caller's RunOptions
    // name their own.  Taken from the previous emulator of the process where it left them
    // (kept_pass_buffer_bytes), so a sweep's later run starts with the last run's buffers; taken
    // at the first pass, after the run's reference pass has handed the same pool back.
    PassBuffers& pass_buffers();
    std::mutex pass_buffers_mutex_;
    std::unique_ptr<PassBuffers> pass_buffers_;
};

// The chip states (8 bytes per AIMC weight, 200 MB for ResNet-50) of the last emulator destroyed
// are kept for the next emulator of the process, which writes its own chip states into that
// memory instead of faulting in fresh pages: a sweep worker's later runs.  What is kept is only
// memory: every state is marked stale, so the next emulator recomputes each layer's chip half
// (whatever network, seed or chip it has) and the bytes never depend on what was kept.
// Bounded: at most one emulator's states, and none larger than the limit; the kept pages are
// advised MADV_FREE, so under memory pressure the kernel takes them back without swapping (a
// reused page it took comes back zeroed, and every word is rewritten anyway).
// Bytes held for the next emulator now.
std::size_t kept_chip_state_bytes();
// Frees what is kept now; returns the bytes freed.
std::size_t release_kept_chip_states();
// The most bytes kept (default kDefaultKeptChipStateLimit; 0 keeps nothing); returns the previous limit.
// The same limit bounds the kept pass buffers below.
inline constexpr std::size_t kDefaultKeptChipStateLimit = std::size_t(1) << 30;
std::size_t set_kept_chip_state_limit(std::size_t bytes);
// Likewise the PU pass buffers of the last emulator destroyed (pu_model/pass_buffers.hpp: the
// buffers its last pass used, idle): the next emulator's first pass reuses them instead of
// faulting in fresh pages, and its own passes free what they no longer use.  Bytes held now;
// freeing them now.
std::size_t kept_pass_buffer_bytes();
std::size_t release_kept_pass_buffers();
// The kept pass buffers, or a new PassBuffers where none are kept (or another holder has them:
// two passes at once never share a pool), and handing a pool back when its passes are done (one
// is kept, within the limit; a pool displaced by a later hand-back is freed).  Emulators and
// _core.run_network (the reference pass, a digital run) share this one pool, so a run's reference
// pass and its rounds reuse the same memory instead of holding two pools.  Every pass writes
// each byte it reads (pass_buffers.hpp), so what a kept buffer held never reaches a result.
std::unique_ptr<PassBuffers> take_kept_pass_buffers();
void keep_pass_buffers(std::unique_ptr<PassBuffers> buffers) noexcept;
// Likewise the HBM's memory of the last emulator destroyed (pu_model/hbm.hpp: its clean, weight
// and round-buffer regions, about 3 bytes per AIMC weight): the next emulator whose HBM fits in it
// writes its regions there, and every byte it does not write first reads as zero (Hbm's recycling
// constructor), so nothing of the kept contents reaches a run.  Bytes held now; freeing them now.
std::size_t kept_hbm_bytes();
std::size_t release_kept_hbm();

}  // namespace aimcemu::niu
