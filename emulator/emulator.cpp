// The emulation loop of one hybrid system (see emulator.hpp).
#include "emulator/emulator.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "niu/niu_model.hpp"
#include "common/errors.hpp"

namespace aimcemu::niu {

namespace {

const char* const kSource = "<emulator>";

// The network the emulator is built from: `net` itself when resolve's checks pass in place and
// its shapes are filled in (a loaded or zoo network: no copy of its weights), otherwise a
// resolved copy made in `copy` (the caller's temporary, alive until the constructor returns).
// An invalid network throws resolve's FormatError from the in-place check.
const Network& resolved_source(const Network& net, std::optional<Network>&& copy) {
    return resolved_in_place_or_copy(net, copy, kSource);
}

// What the emulator keeps of a network: everything but the weights (the HBM holds those).
Network structure_with_biases(const Network& net) {
    Network structure = net.without_operands();
    for (std::size_t l = 0; l < net.layers.size(); ++l) structure.layers[l].bias = net.layers[l].bias;
    return structure;
}

// The bytes each kind of kept object holds.
std::size_t held_bytes(const std::vector<NiuChipState>& states) {
    std::size_t bytes = 0;
    for (const NiuChipState& s : states) bytes += s.words.capacity() * sizeof(std::uint16_t);
    return bytes;
}
std::size_t held_bytes(const PassBuffers& buffers) { return buffers.stats().held_bytes; }
std::size_t held_bytes(const ZeroedBytes& memory) { return memory.size(); }

// One object kept for the next emulator of the process (its chip states, pass buffers or HBM
// memory; emulator.hpp), behind an atomic pointer rather than a mutex, so that a child forked
// while another thread hands something over inherits no held lock.  Never destroyed: an emulator
// may be destroyed during the process's exit, after static destructors ran.
template <class T>
class KeptSlot {
public:
    static KeptSlot& instance() {
        static auto* slot = new KeptSlot;
        return *slot;
    }
    // Keeps `object`, freeing what was kept before.
    void keep(std::unique_ptr<T> object) noexcept { delete slot_.exchange(object.release()); }
    // What is kept (nullptr if nothing), the slot left empty.
    std::unique_ptr<T> take() noexcept { return std::unique_ptr<T>(slot_.exchange(nullptr)); }
    // held_bytes of what is kept, measured while this thread holds it: a load() and a dereference
    // could read an object that a keep or take on another thread exchanged and deleted in between.
    // Put back unless another was kept meanwhile (then this one is freed: the newer one stays); a
    // take meanwhile finds the slot empty and allocates afresh, as with nothing kept.
    std::size_t bytes() {
        std::unique_ptr<T> held = take();
        if (!held) return 0;
        const std::size_t bytes = held_bytes(*held);
        T* empty = nullptr;
        if (slot_.compare_exchange_strong(empty, held.get())) held.release();
        return bytes;
    }
    // Frees what is kept; returns its bytes.
    std::size_t release() {
        const std::unique_ptr<T> held = take();
        return held ? held_bytes(*held) : 0;
    }

private:
    std::atomic<T*> slot_{nullptr};
};

using KeptChipStates = KeptSlot<std::vector<NiuChipState>>;
using KeptPassBuffers = KeptSlot<PassBuffers>;
using KeptHbmMemory = KeptSlot<ZeroedBytes>;

std::atomic<std::size_t> g_kept_limit{kDefaultKeptChipStateLimit};

// Lets the kernel take back the whole pages of a kept state's words under memory pressure
// without writing them anywhere; until it does, they stay mapped and cost no fault when rewritten.
void advise_free(NiuChipState& state) noexcept {
#ifdef MADV_FREE
    const auto page = std::uintptr_t(sysconf(_SC_PAGESIZE));
    const auto begin = (std::uintptr_t(state.words.data()) + page - 1) / page * page;
    const auto end = (std::uintptr_t(state.words.data() + state.words.capacity())) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_FREE);
#else
    (void)state;
#endif
}

// The same for the kept HBM memory (a page the kernel took reads as zero again; every byte the
// next emulator reads it writes or zeroes).
void advise_free(ZeroedBytes& memory) noexcept {
#ifdef MADV_FREE
    if (memory.size() > 0) madvise(memory.data(), memory.size(), MADV_FREE);
#else
    (void)memory;
#endif
}

void keep_chip_states(std::vector<NiuChipState>&& states) noexcept {
    try {
        const std::size_t bytes = held_bytes(states);
        if (bytes == 0 || bytes > g_kept_limit.load()) return;
        for (NiuChipState& s : states) {  // stale: the next emulator recomputes every layer's chip half
            s.count = 0;
            s.code = {};
            s.chip_streams = {};
            advise_free(s);
        }
        KeptChipStates::instance().keep(std::make_unique<std::vector<NiuChipState>>(std::move(states)));
    } catch (...) {  // no memory for the holder: the states are freed instead
    }
}

std::vector<NiuChipState> take_kept_chip_states() {
    const std::unique_ptr<std::vector<NiuChipState>> kept = KeptChipStates::instance().take();
    return kept ? std::move(*kept) : std::vector<NiuChipState>{};
}

// The HBM's memory kept for the next emulator, as the chip states: its round buffers are the
// pages a later run would fault in again (6,000-odd per buffer for ResNet-50).
void keep_hbm_memory(ZeroedBytes memory) noexcept {
    if (memory.size() == 0 || memory.size() > g_kept_limit.load()) return;
    try {
        advise_free(memory);
        KeptHbmMemory::instance().keep(std::make_unique<ZeroedBytes>(std::move(memory)));
    } catch (...) {  // no memory for the holder: the mapping is unmapped instead
    }
}

ZeroedBytes take_kept_hbm_memory() {
    const std::unique_ptr<ZeroedBytes> kept = KeptHbmMemory::instance().take();
    return kept ? std::move(*kept) : ZeroedBytes(0);
}

// Every weight region of the emulator's HBM is written in full before anything reads it: the
// clean and digital ones at construction, an AIMC layer's round buffer by the NIU before the fence
// publishes it.  The activation regions are never written and must read as zero.
bool written_before_read(const HbmRegion& region) { return region.kind != HbmRegionKind::Activations; }

std::vector<int> checked_aimc_layers(const Network& net, std::vector<int> aimc_layers) {
    for (std::size_t i = 0; i < aimc_layers.size(); ++i)
        if (std::find(aimc_layers.begin(), aimc_layers.begin() + std::ptrdiff_t(i), aimc_layers[i]) !=
            aimc_layers.begin() + std::ptrdiff_t(i))
            throw FormatError(kSource, "aimc_layers", "layer index " + std::to_string(aimc_layers[i]) + " given twice");
    HbmLayout::for_network(net, aimc_layers);  // range and "has weights" checks, with their messages
    return aimc_layers;
}


// The PU's weight source during one round: AIMC layers from the leased buffer, digital GEMM
// layers from their own (never rewritten) region.
class HbmWeightView : public WeightView {
public:
    explicit HbmWeightView(std::vector<const std::int8_t*> table) : table_(std::move(table)) {}
    const std::int8_t* weights(int layer_index) const override { return table_[std::size_t(layer_index)]; }

private:
    std::vector<const std::int8_t*> table_;
};

}  // namespace

void keep_pass_buffers(std::unique_ptr<PassBuffers> buffers) noexcept {
    if (!buffers || held_bytes(*buffers) > g_kept_limit.load()) return;
    KeptPassBuffers::instance().keep(std::move(buffers));
}

std::unique_ptr<PassBuffers> take_kept_pass_buffers() {
    std::unique_ptr<PassBuffers> kept = KeptPassBuffers::instance().take();
    return kept ? std::move(kept) : std::make_unique<PassBuffers>();
}

std::size_t kept_chip_state_bytes() { return KeptChipStates::instance().bytes(); }
std::size_t release_kept_chip_states() { return KeptChipStates::instance().release(); }
std::size_t kept_pass_buffer_bytes() { return KeptPassBuffers::instance().bytes(); }
std::size_t release_kept_pass_buffers() { return KeptPassBuffers::instance().release(); }
std::size_t kept_hbm_bytes() { return KeptHbmMemory::instance().bytes(); }
std::size_t release_kept_hbm() { return KeptHbmMemory::instance().release(); }

std::size_t set_kept_chip_state_limit(std::size_t bytes) {
    const std::size_t previous = g_kept_limit.exchange(bytes);
    if (kept_chip_state_bytes() > bytes) release_kept_chip_states();
    if (kept_pass_buffer_bytes() > bytes) release_kept_pass_buffers();
    if (kept_hbm_bytes() > bytes) release_kept_hbm();
    return previous;
}

Emulator::Emulator(const Network& net, std::vector<int> aimc_layers)
    : Emulator(resolved_source(net, std::optional<Network>{}), std::move(aimc_layers), FromResolved{}) {}

Emulator::~Emulator() {
    keep_chip_states(std::move(chip_states_));
    keep_pass_buffers(std::move(pass_buffers_));
    keep_hbm_memory(std::move(hbm_).take_memory());
}

Emulator::Emulator(const Network& source, std::vector<int> aimc_layers, FromResolved)
    : net_(structure_with_biases(source)),
      aimc_layers_(checked_aimc_layers(source, std::move(aimc_layers))),
      hbm_(HbmLayout::for_network(source, aimc_layers_), take_kept_hbm_memory(), written_before_read),
      fence_(hbm_.layout(), aimc_layers_),
      weight_count_(net_.layers.size(), 0) {
    // Each GEMM layer's weights are copied into its HBM region, the one place the emulator keeps
    // them.  An AIMC layer's clean abs-max is taken on the way, chunk by chunk while each chunk is in
    // cache (the clamp to 1..127 of the maximum equals the clamp of the chunks' clamped maxima).
    clean_absmax_.assign(aimc_layers_.size(), 1);
    for (int l = 0; l < int(net_.layers.size()); ++l) {
        const Layer& layer = source.layers[std::size_t(l)];
        if (!layer.is_gemm()) continue;
        const auto aimc = std::find(aimc_layers_.begin(), aimc_layers_.end(), l);
        const HbmRegion& region = hbm_.layout().at(aimc != aimc_layers_.end() ? HbmRegionKind::CleanWeights
                                                                              : HbmRegionKind::Weights, l);
        hbm_.prefault(region);
        const std::span<std::int8_t> to = hbm_.region(region);
        constexpr std::size_t kChunk = std::size_t(64) << 10;   // well inside L2
        for (std::size_t at = 0; at < layer.weights.size(); at += kChunk) {
            const std::size_t count = std::min(kChunk, layer.weights.size() - at);
            std::copy_n(layer.weights.begin() + std::ptrdiff_t(at), count, to.begin() + std::ptrdiff_t(at));
            if (aimc != aimc_layers_.end()) {
                int& absmax = clean_absmax_[std::size_t(aimc - aimc_layers_.begin())];
                absmax = std::max(absmax, niu::clean_absmax(to.subspan(at, count), AbsMaxMode::Layer));
            }
        }
        weight_count_[std::size_t(l)] = layer.weights.size();
    }
    // A previous emulator's chip states: their memory, not their contents (all stale).
    chip_states_ = take_kept_chip_states();
    // The pass buffers are taken at the first pass (pass_buffers()), not here: a run builds its
    // emulator before its reference pass, which uses the same kept pool and hands it back.
}

PassBuffers& Emulator::pass_buffers() {
    std::lock_guard lock(pass_buffers_mutex_);
    if (!pass_buffers_) pass_buffers_ = take_kept_pass_buffers();
    return *pass_buffers_;
}

std::span<const std::int8_t> Emulator::clean_weights(std::size_t k) const {
    if (k >= aimc_layers_.size())
        throw FormatError(kSource, "aimc layer", "index " + std::to_string(k) + " out of range (" +
                                                     std::to_string(aimc_layers_.size()) + " AIMC layers)");
    const int l = aimc_layers_[k];
    return hbm_.region(hbm_.layout().at(HbmRegionKind::CleanWeights, l)).first(weight_count_[std::size_t(l)]);
}

bool Emulator::is_aimc(int index) const {
    return std::find(aimc_layers_.begin(), aimc_layers_.end(), index) != aimc_layers_.end();
}

const HbmRegion& Emulator::gemm_weight_region(int index) const {
    if (index < 0 || index >= int(net_.layers.size()) || !net_.layers[std::size_t(index)].is_gemm())
        throw FormatError(kSource, "layer", "layer index " + std::to_string(index) + " has no weights");
    return hbm_.layout().at(HbmRegionKind::Weights, index, 0);
}

std::uint64_t Emulator::write_round(const NiuProgram& program, int threads) {
    check_threads(threads, "threads");
    if (program.layers.size() != aimc_layers_.size())
        throw FormatError(kSource, "program", "has " + std::to_string(program.layers.size()) + " layers, the system " +
                                                  std::to_string(aimc_layers_.size()) + " AIMC layers");
    for (std::size_t k = 0; k < aimc_layers_.size(); ++k) {
        const Layer& layer = net_.layers[std::size_t(aimc_layers_[k])];
        const std::size_t count = weight_count_[std::size_t(aimc_layers_[k])];
        const std::string field = "program.layers[" + std::to_string(k) + "]";
        if (program.layers[k].count != count)
            throw FormatError(kSource, field + ".count",
                              std::to_string(program.layers[k].count) + " weights, layer '" + layer.name + "' has " +
                                  std::to_string(count));
        // A program compiled for another clean abs-max would map this layer's codes to other
        // conductances: wrong noise, silently.  127 is absmax "fixed", right for any weights.
        const int absmax = code_table_absmax(program.layers[k]);
        if (absmax != clean_absmax_[k] && absmax != 127)
            throw FormatError(kSource, field + ".absmax",
                              "compiled for a clean abs-max of " + std::to_string(absmax) + ", layer '" + layer.name +
                                  "' has " + std::to_string(clean_absmax_[k]) + " (or 127 for absmax \"fixed\")");
    }
    // The NIU reads each layer's clean region and writes the back buffer of this round (the
    // host's SRC_ADDR/DST_ADDR; the program's own addresses are not used).  The chip half of a
    // layer (programmed devices) depends on the seed, chip and layer but not on the round or t:
    // it is computed in the first round of a chip and kept, and every round runs only the round
    // half -- the same bytes as the full model (niu_model.hpp apply_kept).  The round half of all
    // layers is one job (apply_kept_network): the threads wake once per round and each streams
    // one contiguous range of the layers' chip states.
    auto ticket = fence_.begin_write();
    try {
        std::lock_guard lock(chip_states_mutex_);
        chip_states_.resize(aimc_layers_.size());
        std::vector<KeptLayer> round;
        for (std::size_t k = 0; k < aimc_layers_.size(); ++k) {
            const int l = aimc_layers_[k];
            const NiuLayerProgram& layer = program.layers[k];
            if (!is_chip_state_of(chip_states_[k], layer))
                recompute_chip_state(layer, clean_weights(k), chip_states_[k], threads);
            round.push_back({&layer, &chip_states_[k], hbm_.region(ticket.weights(l)).first(layer.count)});
        }
        apply_kept_network(round, threads);
    } catch (...) {
        fence_.abandon(ticket);  // never publish a half-written round
        throw;
    }
    fence_.publish(ticket);
    return ticket.round;
}

RoundOutputs Emulator::run_published(const std::vector<Tensor8>& images, const RunOptions& options,
                                     std::uint64_t expected_round) {
    check_threads(options.threads, "threads");
    // Not acquire(), which waits for the first publish: with no write_round under way in another
    // thread the caller would wait forever, with the GIL released and Ctrl-C unheard.
    auto leased = fence_.try_acquire();
    if (!leased) throw FormatError(kSource, "round", "no round published yet: call write_round (or run_round) first");
    auto& lease = *leased;
    if (expected_round != 0 && lease.round() != expected_round)
        throw FormatError(kSource, "round", "the PU leased round " + std::to_string(lease.round()) + ", expected " +
                                                std::to_string(expected_round));
    // With the fast backend, digital layers come packed from digital_packed(): their HBM region
    // holds the network's own weights, unchanged since construction, so the view leaves them out.
    const bool fast = options.backend == GemmBackend::Fast;
    RunOptions pu_options = options;
    if (fast) pu_options.packed = &digital_packed(options.kernel, options.threads);
    if (!pu_options.buffers) pu_options.buffers = &pass_buffers();
    std::vector<const std::int8_t*> table(net_.layers.size(), nullptr);
    for (int l = 0; l < int(net_.layers.size()); ++l) {
        if (!net_.layers[std::size_t(l)].is_gemm() || (fast && !is_aimc(l))) continue;
        const HbmRegion& region = is_aimc(l) ? lease.weights(l) : gemm_weight_region(l);
        table[std::size_t(l)] = std::as_const(hbm_).region(region).data();
    }
    const HbmWeightView view(std::move(table));
    pu_options.weights = &view;
    return {lease.round(), run_network_batch(net_, images, pu_options)};
}

const PackedNetwork& Emulator::digital_packed(FastKernel kernel, int threads) {
    std::lock_guard lock(packed_mutex_);
    const FastKernel resolved_kernel = resolve_fast_kernel(kernel);
    auto& packed = digital_packed_[resolved_kernel];
    if (!packed) {
        std::vector<const std::int8_t*> table(net_.layers.size(), nullptr);
        for (int l = 0; l < int(net_.layers.size()); ++l)
            if (net_.layers[std::size_t(l)].is_gemm() && !is_aimc(l))
                table[std::size_t(l)] = std::as_const(hbm_).region(gemm_weight_region(l)).data();
        const HbmWeightView digital(std::move(table));
        packed = std::make_unique<PackedNetwork>(net_, resolved_kernel, threads, aimc_layers_, &digital);
    }
    return *packed;
}

RoundOutputs Emulator::run_round(const NiuProgram& program, const std::vector<Tensor8>& images,
                                 const RunOptions& options) {
    std::lock_guard lock(round_mutex_);
    const std::uint64_t round = write_round(program, options.threads);
    return run_published(images, options, round);
}

std::vector<std::int8_t> Emulator::weights(int index) {
    const HbmRegion* region = &gemm_weight_region(index);
    if (!is_aimc(index)) {
        const auto bytes = std::as_const(hbm_).region(*region);
        return {bytes.begin(), bytes.end()};
    }
    if (fence_.published_round() == 0)
        throw FormatError(kSource, "weights", "layer '" + net_.layers[std::size_t(index)].name +
                                                  "': no round has been written yet");
    auto lease = fence_.acquire();
    const auto bytes = std::as_const(hbm_).region(lease.weights(index));
    return {bytes.begin(), bytes.end()};
}

}  // namespace aimcemu::niu
