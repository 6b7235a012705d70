// Recycled pass buffers (pass_buffers.hpp): one best-fit list of idle buffers behind a mutex,
// taken once per layer-sized buffer (never per row or tile), stamped with the pass that gave
// each back so that begin_pass() can free what a whole pass left unused.  Memory is freed after
// the mutex is released.
#include "pu_model/pass_buffers.hpp"

#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "common/huge_pages.hpp"

namespace aimcemu {

namespace {
constexpr std::size_t kPage = 4096;
constexpr unsigned char kPoison = 0xA5;

struct Block {
    void* data;
    std::size_t capacity;
    std::uint64_t pass;   // the pass during which it was given back
};

void free_blocks(const std::vector<Block>& blocks) noexcept {
    for (const Block& b : blocks) free_maybe_huge(b.data, b.capacity);
}
}  // namespace

// Shared by the PassBuffers and every buffer it handed out, so a buffer may outlive its pool.
struct PassBuffers::Shelf {
    std::mutex mutex;
    std::vector<Block> idle;
    std::uint64_t pass = 0;
    bool open = true;   // false once the PassBuffers is gone: buffers given back are freed
    Stats stats;

    void give_back(void* data, std::size_t capacity) noexcept {
        {
            const std::lock_guard lock(mutex);
            if (open) {
                try {
                    idle.push_back({data, capacity, pass});
                    stats.idle_bytes += capacity;
                    return;
                } catch (...) {   // no room to keep it: free it instead
                }
            }
            stats.held_bytes -= capacity;
        }
        free_maybe_huge(data, capacity);
    }
};

PassBuffers::Buffer::Buffer(Buffer&& other) noexcept
    : shelf_(std::move(other.shelf_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

PassBuffers::Buffer& PassBuffers::Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        reset();
        shelf_ = std::move(other.shelf_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
}

void PassBuffers::Buffer::reset() noexcept {
    if (data_) {
        if (shelf_) shelf_->give_back(data_, capacity_);
        else ::operator delete(data_, std::align_val_t(kCacheLineBytes));
    }
    shelf_.reset();
    data_ = nullptr;
    size_ = capacity_ = 0;
}

PassBuffers::PassBuffers(std::size_t min_pooled, bool poison)
    : shelf_(std::make_shared<Shelf>()), min_pooled_(min_pooled), poison_(poison) {}

PassBuffers::~PassBuffers() {
    std::vector<Block> released;
    {
        const std::lock_guard lock(shelf_->mutex);
        shelf_->open = false;
        released.swap(shelf_->idle);
        for (const Block& b : released) shelf_->stats.held_bytes -= b.capacity;
        shelf_->stats.idle_bytes = 0;
    }
    free_blocks(released);
}

PassBuffers::Buffer PassBuffers::allocate(std::size_t bytes) {
    Buffer b;
    b.data_ = ::operator new(bytes, std::align_val_t(kCacheLineBytes));   // whole cache lines for the kernels' loads
    b.size_ = bytes;
    return b;
}

PassBuffers::Buffer PassBuffers::take(std::size_t bytes) {
    Buffer b;
    if (bytes < min_pooled_) {
        b = allocate(bytes);
    } else {
        b.size_ = bytes;
        {
            const std::lock_guard lock(shelf_->mutex);
            auto& idle = shelf_->idle;
            std::size_t best = idle.size();
            for (std::size_t i = 0; i < idle.size(); ++i)
                if (idle[i].capacity >= bytes && (best == idle.size() || idle[i].capacity < idle[best].capacity))
                    best = i;
            if (best < idle.size()) {
                b.data_ = idle[best].data;
                b.capacity_ = idle[best].capacity;
                idle[best] = idle.back();
                idle.pop_back();
                shelf_->stats.idle_bytes -= b.capacity_;
                ++shelf_->stats.reused;
            }
        }
        if (!b.data_) {
            const std::size_t capacity = (bytes + kPage - 1) / kPage * kPage;
            b.data_ = allocate_maybe_huge(capacity);
            b.capacity_ = capacity;
            const std::lock_guard lock(shelf_->mutex);
            shelf_->stats.held_bytes += capacity;
            ++shelf_->stats.fresh;
        }
        b.shelf_ = shelf_;
    }
    if (poison_) std::memset(b.data_, kPoison, bytes);
    return b;
}

void PassBuffers::begin_pass() {
    std::vector<Block> released;
    {
        const std::lock_guard lock(shelf_->mutex);
        const std::uint64_t previous = shelf_->pass++;
        auto& idle = shelf_->idle;
        std::vector<Block> kept;
        for (const Block& b : idle) {
            if (b.pass >= previous) {
                kept.push_back(b);
            } else {
                released.push_back(b);
                shelf_->stats.idle_bytes -= b.capacity;
                shelf_->stats.held_bytes -= b.capacity;
            }
        }
        idle.swap(kept);
    }
    free_blocks(released);
}

PassBuffers::Stats PassBuffers::stats() const {
    const std::lock_guard lock(shelf_->mutex);
    return shelf_->stats;
}

PassBuffers::Buffer take_buffer(PassBuffers* buffers, std::size_t bytes) {
    return buffers ? buffers->take(bytes) : PassBuffers::allocate(bytes);
}

}  // namespace aimcemu
