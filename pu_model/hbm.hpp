// HBM regions of the PU model: where clean weights (read by the NIU), the PU's weight regions
// (written by the NIU, read by the PU) and activations live, and the round fence that keeps a
// PU from ever running on half-written weights.
//
// Layout rules (docs/niu_datapath.md section 1): every region starts 32-byte aligned (one
// 256-bit beat); a weight region holds one layer's N x M int8 weights row-major, contiguous, in
// the order the PU reads them.  An AIMC layer has one clean region and two weight buffers: the NIU
// writes round r+1 into the back buffer while the PU reads round r from the front one, and
// WeightRoundFence::publish() swaps them for all AIMC layers at once.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/network.hpp"

namespace aimcemu {

inline constexpr std::uint64_t kHbmAlign = 32;  // one 256-bit AXI beat

enum class HbmRegionKind : std::uint8_t { CleanWeights, Weights, Activations };
const char* to_string(HbmRegionKind kind);

struct HbmRegion {
    std::string name;
    HbmRegionKind kind = HbmRegionKind::Weights;
    int layer = kNetworkInput;   // layer index (activations of the network input: kNetworkInput)
    int buffer = 0;              // weight buffer 0 or 1 (double-buffered AIMC layers)
    std::uint64_t base = 0;      // byte address, kHbmAlign aligned
    std::uint64_t bytes = 0;
};

class HbmLayout {
public:
    // Appends a region at the next aligned address; (kind, layer, buffer) must be new.
    const HbmRegion& add(std::string name, HbmRegionKind kind, int layer, std::uint64_t bytes, int buffer = 0);
    const HbmRegion* find(HbmRegionKind kind, int layer, int buffer = 0) const;
    // Like find() but throws FormatError naming the missing region.
    const HbmRegion& at(HbmRegionKind kind, int layer, int buffer = 0) const;
    const std::vector<HbmRegion>& regions() const { return regions_; }
    std::uint64_t size() const { return end_; }

    // Regions of a resolved network: activations of the input and of every layer, a weight
    // region per GEMM layer, and for each layer in `aimc_layers` a clean region plus a second
    // weight buffer.  Throws FormatError for an AIMC layer that is not a GEMM or out of range.
    static HbmLayout for_network(const Network& net, const std::vector<int>& aimc_layers);

private:
    std::vector<HbmRegion> regions_;
    std::uint64_t end_ = 0;
};

// Zero-filled bytes from a private anonymous mapping: the kernel hands out zeroed pages on first
// touch, so nothing is zero-filled twice and a page never written (a back buffer before its
// first round) costs nothing.  std::vector<uint8_t>(n, 0) wrote every byte once more on top of
// the kernel's zeroing.  No MADV_HUGEPAGE: with the kernel's defrag=madvise setting a first
// fault may compact memory synchronously (measured once at 0.4 s against 0.03 s).
class ZeroedBytes {
public:
    explicit ZeroedBytes(std::size_t size);
    ZeroedBytes(const ZeroedBytes&) = delete;
    ZeroedBytes& operator=(const ZeroedBytes&) = delete;
    ZeroedBytes(ZeroedBytes&& other) noexcept;
    ZeroedBytes& operator=(ZeroedBytes&&) = delete;
    ~ZeroedBytes();
    std::uint8_t* data() { return data_; }
    const std::uint8_t* data() const { return data_; }
    std::size_t size() const { return size_; }
    // Unmaps the whole pages past the first `size` bytes (a larger memory reused for a smaller
    // layout then holds, and reports, no more than that layout needs).
    void shrink_to(std::size_t size);

private:
    std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
};

// Byte-addressed HBM contents for a layout, zero until written.  Accesses outside the memory
// throw FormatError.
class Hbm {
public:
    explicit Hbm(HbmLayout layout) : layout_(std::move(layout)), bytes_(std::size_t(layout_.size())) {}
    // Whether a region may start with stale bytes in recycled memory: only a region its owner
    // writes in full before anything reads it.
    using WrittenBeforeRead = bool (*)(const HbmRegion&);
    // In `recycled`, an earlier Hbm's memory (take_memory), when it holds the layout; else in
    // fresh memory as above.  Every byte outside the regions `written_before_read` names is zero
    // as in fresh memory (whole pages handed back to the kernel, which maps them zeroed, the
    // partial ones cleared); those regions hold unspecified bytes until their owner writes them.
    // Why: a sweep's later runs would otherwise fault in every page of the round buffers again.
    Hbm(HbmLayout layout, ZeroedBytes recycled, WrittenBeforeRead written_before_read);
    // Gives up the memory for a later Hbm (the Hbm is then empty: every access throws).
    ZeroedBytes take_memory() &&;
    const HbmLayout& layout() const { return layout_; }
    void write(std::uint64_t addr, std::span<const std::uint8_t> data);
    void read(std::uint64_t addr, std::span<std::uint8_t> out) const;
    std::span<std::int8_t> region(const HbmRegion& r);
    std::span<const std::int8_t> region(const HbmRegion& r) const;
    // Maps region r's pages in one call, before a writer fills all of it (the emulator's clean
    // and digital regions at construction): one page fault per 4 KiB page costs more than the
    // copy that follows.  Only a hint: where the kernel refuses, the pages fault in as written.
    void prefault(const HbmRegion& r);
    // The int8 bytes [addr, addr + count) (checked).
    std::span<std::int8_t> bytes(std::uint64_t addr, std::uint64_t count);
    std::span<const std::int8_t> bytes(std::uint64_t addr, std::uint64_t count) const;

private:
    void check(std::uint64_t addr, std::uint64_t count) const;
    HbmLayout layout_;
    ZeroedBytes bytes_;
    std::size_t size_ = std::size_t(layout_.size());   // the layout's bytes (the memory may hold more)
};

// Double-buffered weights of the AIMC layers with an explicit publish per round.
//
//   writer:  auto w = fence.begin_write();  ... write every AIMC layer at w.weights(layer) ...
//            fence.publish(w);
//   reader:  auto lease = fence.acquire();  ... run round lease.round() from lease.weights(l) ...
//
// begin_write() waits until no reader still holds the back buffer; acquire() pins the buffer of
// the latest published round (waiting for the first publish).  A reader therefore always sees
// every layer of exactly one round.
class WeightRoundFence {
public:
    WeightRoundFence(const HbmLayout& layout, std::vector<int> aimc_layers);

    class ReadLease {
    public:
        ReadLease(ReadLease&& other) noexcept;
        ReadLease& operator=(ReadLease&&) = delete;
        ~ReadLease();
        std::uint64_t round() const { return round_; }
        int buffer() const { return buffer_; }
        const HbmRegion& weights(int layer) const;

    private:
        friend class WeightRoundFence;
        ReadLease(WeightRoundFence* fence, std::uint64_t round, int buffer) : fence_(fence), round_(round), buffer_(buffer) {}
        WeightRoundFence* fence_;
        std::uint64_t round_;
        int buffer_;
    };

    struct WriteTicket {
        std::uint64_t round = 0;  // the round being written (last published + 1)
        int buffer = 0;
        const WeightRoundFence* fence = nullptr;
        const HbmRegion& weights(int layer) const { return fence->region(layer, buffer); }
    };

    WriteTicket begin_write();
    void publish(const WriteTicket& ticket);
    // Ends a write that failed without publishing it: readers keep the front buffer, and the
    // next begin_write() gets the same back buffer and round id again.
    void abandon(const WriteTicket& ticket);
    ReadLease acquire();
    // The lease acquire() gives when a round has been published; none (without waiting) before the
    // first publish, for a reader that no writer will ever wake (the emulator's run_published).
    std::optional<ReadLease> try_acquire();
    std::uint64_t published_round() const;
    const std::vector<int>& aimc_layers() const { return aimc_layers_; }

private:
    const HbmRegion& region(int layer, int buffer) const;
    void release(int buffer);

    const HbmLayout& layout_;
    std::vector<int> aimc_layers_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::uint64_t published_ = 0;  // 0: nothing published yet
    int front_ = 1;                // the first write goes to buffer 0
    int leases_[2] = {0, 0};
    bool writing_ = false;
};

}  // namespace aimcemu
