// HBM regions and the weight round fence (see hbm.hpp).
#include "pu_model/hbm.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "common/errors.hpp"

namespace aimcemu {

const char* to_string(HbmRegionKind kind) {
    switch (kind) {
        case HbmRegionKind::CleanWeights: return "clean_weights";
        case HbmRegionKind::Weights: return "weights";
        case HbmRegionKind::Activations: return "activations";
    }
    return "?";
}

namespace {
std::string region_label(HbmRegionKind kind, int layer, int buffer) {
    return std::string(to_string(kind)) + "[layer " + std::to_string(layer) + ", buffer " + std::to_string(buffer) + "]";
}
}  // namespace

const HbmRegion& HbmLayout::add(std::string name, HbmRegionKind kind, int layer, std::uint64_t bytes, int buffer) {
    if (find(kind, layer, buffer)) throw FormatError("<hbm layout>", region_label(kind, layer, buffer), "region defined twice");
    HbmRegion r{std::move(name), kind, layer, buffer, end_, bytes};
    end_ = (end_ + std::max<std::uint64_t>(bytes, 1) + kHbmAlign - 1) / kHbmAlign * kHbmAlign;
    regions_.push_back(std::move(r));
    return regions_.back();
}

const HbmRegion* HbmLayout::find(HbmRegionKind kind, int layer, int buffer) const {
    for (const HbmRegion& r : regions_)
        if (r.kind == kind && r.layer == layer && r.buffer == buffer) return &r;
    return nullptr;
}

const HbmRegion& HbmLayout::at(HbmRegionKind kind, int layer, int buffer) const {
    const HbmRegion* r = find(kind, layer, buffer);
    if (!r) throw FormatError("<hbm layout>", region_label(kind, layer, buffer), "no such region");
    return *r;
}

HbmLayout HbmLayout::for_network(const Network& net, const std::vector<int>& aimc_layers) {
    for (int l : aimc_layers) {
        if (l < 0 || l >= int(net.layers.size()))
            throw FormatError("<mapping>", "aimc_layers", "layer index " + std::to_string(l) + " out of range");
        if (!net.layers[std::size_t(l)].is_gemm())
            throw FormatError("<mapping>", "aimc_layers", "layer '" + net.layers[std::size_t(l)].name + "' has no weights");
    }
    auto is_aimc = [&](int l) { return std::find(aimc_layers.begin(), aimc_layers.end(), l) != aimc_layers.end(); };
    HbmLayout layout;
    layout.add("input", HbmRegionKind::Activations, kNetworkInput, std::uint64_t(net.input_shape.size()));
    for (int l = 0; l < int(net.layers.size()); ++l) {
        const Layer& layer = net.layers[std::size_t(l)];
        layout.add(layer.name + "/out", HbmRegionKind::Activations, l, std::uint64_t(layer.out_shape.size()));
        if (!layer.is_gemm()) continue;
        const auto weights = std::uint64_t(layer.weights.size());
        layout.add(layer.name + "/weights0", HbmRegionKind::Weights, l, weights, 0);
        if (is_aimc(l)) {
            layout.add(layer.name + "/weights1", HbmRegionKind::Weights, l, weights, 1);
            layout.add(layer.name + "/clean", HbmRegionKind::CleanWeights, l, weights);
        }
    }
    return layout;
}

ZeroedBytes::ZeroedBytes(std::size_t size) : size_(size) {
    if (size == 0) return;
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::uint8_t*>(p);
}

ZeroedBytes::ZeroedBytes(ZeroedBytes&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
}

ZeroedBytes::~ZeroedBytes() {
    if (data_ != nullptr) ::munmap(data_, size_);
}

void ZeroedBytes::shrink_to(std::size_t size) {
    const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
    const std::size_t kept = (size + page - 1) / page * page;
    if (data_ == nullptr || kept >= size_) return;
    if (kept == 0) {
        ::munmap(data_, size_);
        data_ = nullptr;
        size_ = 0;
        return;
    }
    ::munmap(data_ + kept, size_ - kept);
    size_ = kept;
}

namespace {
ZeroedBytes memory_for(ZeroedBytes recycled, std::size_t size) {
    if (recycled.size() < size || size == 0)
        return ZeroedBytes(size);   // `recycled`, too small, is unmapped on the way out
    // A sweep's smaller network after a larger one: its pages past the layout would be kept (and
    // counted in kept_hbm_bytes) from emulator to emulator without ever being read.
    recycled.shrink_to(size);
    return recycled;
}
}  // namespace

Hbm::Hbm(HbmLayout layout, ZeroedBytes recycled, WrittenBeforeRead written_before_read)
    : layout_(std::move(layout)), bytes_(memory_for(std::move(recycled), std::size_t(layout_.size()))) {
    if (bytes_.size() == 0) return;
    // Fresh memory is zero already; recycled memory is zeroed wherever no owner's write comes
    // first: the gaps between regions and every region not named.  Whole pages go back to the
    // kernel (MADV_DONTNEED: they read as zero, and a page never touched costs nothing), the
    // partial pages at a range's ends are cleared.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> stale;   // [begin, end), in address order
    for (const HbmRegion& r : layout_.regions())
        if (r.bytes > 0 && written_before_read(r)) stale.emplace_back(r.base, r.base + r.bytes);
    std::sort(stale.begin(), stale.end());
    const std::uint64_t page = std::uint64_t(::sysconf(_SC_PAGESIZE));
    auto zero = [&](std::uint64_t begin, std::uint64_t end) {
        if (end <= begin) return;
        const std::uint64_t first_page = (begin + page - 1) / page * page, last_page = end / page * page;
        if (last_page <= first_page) {
            std::memset(bytes_.data() + begin, 0, end - begin);
            return;
        }
        std::memset(bytes_.data() + begin, 0, first_page - begin);
        std::memset(bytes_.data() + last_page, 0, end - last_page);
        if (::madvise(bytes_.data() + first_page, last_page - first_page, MADV_DONTNEED) != 0)
            std::memset(bytes_.data() + first_page, 0, last_page - first_page);
    };
    std::uint64_t at = 0;
    for (const auto& [begin, end] : stale) {
        zero(at, begin);
        at = std::max(at, end);
    }
    zero(at, std::uint64_t(bytes_.size()));   // past the layout: never read, its pages handed back
}

ZeroedBytes Hbm::take_memory() && {
    size_ = 0;
    return std::move(bytes_);
}

void Hbm::prefault(const HbmRegion& r) {
#ifdef MADV_POPULATE_WRITE
    const auto span = region(r);
    if (span.empty()) return;
    const std::uintptr_t page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(span.data()) / page * page;
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(span.data() + span.size());
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);   // a hint: result ignored
#else
    (void)r;
#endif
}

void Hbm::check(std::uint64_t addr, std::uint64_t count) const {
    if (addr > size_ || count > size_ - addr)
        throw FormatError("<hbm>", "address", "access [" + std::to_string(addr) + ", +" + std::to_string(count) +
                                                  ") outside the " + std::to_string(size_) + "-byte memory");
}

void Hbm::write(std::uint64_t addr, std::span<const std::uint8_t> data) {
    check(addr, data.size());
    if (!data.empty()) std::memcpy(bytes_.data() + addr, data.data(), data.size());
}

void Hbm::read(std::uint64_t addr, std::span<std::uint8_t> out) const {
    check(addr, out.size());
    if (!out.empty()) std::memcpy(out.data(), bytes_.data() + addr, out.size());
}

std::span<std::int8_t> Hbm::bytes(std::uint64_t addr, std::uint64_t count) {
    check(addr, count);
    return {reinterpret_cast<std::int8_t*>(bytes_.data() + addr), std::size_t(count)};
}

std::span<const std::int8_t> Hbm::bytes(std::uint64_t addr, std::uint64_t count) const {
    check(addr, count);
    return {reinterpret_cast<const std::int8_t*>(bytes_.data() + addr), std::size_t(count)};
}

std::span<std::int8_t> Hbm::region(const HbmRegion& r) { return bytes(r.base, r.bytes); }
std::span<const std::int8_t> Hbm::region(const HbmRegion& r) const { return bytes(r.base, r.bytes); }

// ---- round fence ----------------------------------------------------------------------------

WeightRoundFence::WeightRoundFence(const HbmLayout& layout, std::vector<int> aimc_layers)
    : layout_(layout), aimc_layers_(std::move(aimc_layers)) {
    for (int l : aimc_layers_) {
        layout_.at(HbmRegionKind::Weights, l, 0);
        layout_.at(HbmRegionKind::Weights, l, 1);
    }
}

const HbmRegion& WeightRoundFence::region(int layer, int buffer) const {
    if (std::find(aimc_layers_.begin(), aimc_layers_.end(), layer) == aimc_layers_.end())
        throw FormatError("<round fence>", "layer", "layer " + std::to_string(layer) + " is not an AIMC layer");
    return layout_.at(HbmRegionKind::Weights, layer, buffer);
}

WeightRoundFence::WriteTicket WeightRoundFence::begin_write() {
    std::unique_lock lock(mutex_);
    const int back = 1 - front_;
    changed_.wait(lock, [&] { return !writing_ && leases_[back] == 0; });
    writing_ = true;
    return {published_ + 1, back, this};
}

void WeightRoundFence::publish(const WriteTicket& ticket) {
    {
        std::lock_guard lock(mutex_);
        if (!writing_ || ticket.fence != this || ticket.round != published_ + 1 || ticket.buffer != 1 - front_)
            throw FormatError("<round fence>", "publish", "ticket does not belong to the write in progress");
        front_ = ticket.buffer;
        published_ = ticket.round;
        writing_ = false;
    }
    changed_.notify_all();
}

void WeightRoundFence::abandon(const WriteTicket& ticket) {
    {
        std::lock_guard lock(mutex_);
        if (!writing_ || ticket.fence != this || ticket.round != published_ + 1 || ticket.buffer != 1 - front_)
            throw FormatError("<round fence>", "abandon", "ticket does not belong to the write in progress");
        writing_ = false;
    }
    changed_.notify_all();
}

WeightRoundFence::ReadLease WeightRoundFence::acquire() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return published_ > 0; });
    ++leases_[front_];
    return ReadLease(this, published_, front_);
}

std::optional<WeightRoundFence::ReadLease> WeightRoundFence::try_acquire() {
    std::lock_guard lock(mutex_);
    if (published_ == 0) return std::nullopt;
    ++leases_[front_];
    return ReadLease(this, published_, front_);
}

std::uint64_t WeightRoundFence::published_round() const {
    std::lock_guard lock(mutex_);
    return published_;
}

void WeightRoundFence::release(int buffer) {
    {
        std::lock_guard lock(mutex_);
        --leases_[buffer];
    }
    changed_.notify_all();
}

WeightRoundFence::ReadLease::ReadLease(ReadLease&& other) noexcept
    : fence_(other.fence_), round_(other.round_), buffer_(other.buffer_) {
    other.fence_ = nullptr;
}

WeightRoundFence::ReadLease::~ReadLease() {
    if (fence_) fence_->release(buffer_);
}

const HbmRegion& WeightRoundFence::ReadLease::weights(int layer) const { return fence_->region(layer, buffer_); }

}  // namespace aimcemu
