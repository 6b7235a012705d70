// The buffers of the PU's inference passes, recycled: activations, IM2COL operands, accumulator
// scratch and the fast-kernel weights a pass packs itself (layers a WeightView replaces).
//
// Why: a pass used to take each of these fresh and free it after its last reader.  glibc maps
// a large allocation fresh and unmaps it on free (or trims its heap), so every pass page-faulted
// and zeroed them again: 25,000-60,000 minor faults and 0.05-0.28 s of system time per ResNet-50
// pass of 16 images (docs/performance.md, section 3).  A PassBuffers keeps what a pass gives
// back and hands it out again: inside one pass (a layer's output freed after its last reader
// becomes a later layer's), and round after round when its owner keeps it between passes (the
// emulator keeps one, emulator/emulator.hpp).
//
//   PassBuffers buffers;                       // or RunOptions::buffers = &kept_between_passes
//   buffers.begin_pass();
//   PassBuffers::Buffer y = buffers.take(n);   // n bytes, contents unspecified
//   ...                                        // y's destructor gives the memory back
//
// Policy.  take() hands out the smallest idle buffer that holds the request (best fit, whatever
// its size: the large early layers' buffers serve the smaller late ones, so a pass holds about
// its largest set of live buffers, not one set per size).  begin_pass() frees every idle buffer
// that no one took during the whole previous pass, so the pool keeps what the last pass used and
// no more: a network with smaller layers, or fewer images, lets the rest go.  A buffer of at
// least 2 MiB asks for 2 MiB pages (common/huge_pages.hpp).  Requests under min_pooled bytes are
// ordinary allocations (glibc's heap reuses those without faults).
//
// Contents: a buffer handed out holds whatever its last user wrote.  Every user in pu_model
// writes all it reads (as with the uninitialised buffers before); `poison` fills every buffer
// handed out with 0xA5 so that tests can show that nothing reads a byte it did not write.
//
// Threads: every function is thread-safe (the micro-batches of a pass take and give back on
// several workers; two passes may share one PassBuffers).  A buffer may outlive its PassBuffers:
// it is then freed when it goes.  Not kept across fork(): a child must not use a PassBuffers its
// parent's other threads may have held locked (a new one is fine).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace aimcemu {

class PassBuffers {
    struct Shelf;

public:
    // Below this, take() is an ordinary allocation (glibc reuses small blocks without faults).
    static constexpr std::size_t kDefaultMinPooled = std::size_t(64) << 10;

    // Bytes from take(), given back when destroyed (or freed, when not pooled).  Move-only; a
    // default-constructed Buffer holds nothing.
    class Buffer {
    public:
        Buffer() = default;
        Buffer(Buffer&& other) noexcept;
        Buffer& operator=(Buffer&& other) noexcept;
        Buffer(const Buffer&) = delete;
        Buffer& operator=(const Buffer&) = delete;
        ~Buffer() { reset(); }

        template <class T = std::uint8_t>
        T* data() const {
            return static_cast<T*>(data_);
        }
        std::size_t size() const { return size_; }   // bytes asked for
        void reset() noexcept;                         // gives the memory back now

    private:
        friend class PassBuffers;
        std::shared_ptr<Shelf> shelf_;   // null: an ordinary allocation, freed here
        void* data_ = nullptr;
        std::size_t size_ = 0, capacity_ = 0;
    };

    explicit PassBuffers(std::size_t min_pooled = kDefaultMinPooled, bool poison = false);
    ~PassBuffers();
    PassBuffers(const PassBuffers&) = delete;
    PassBuffers& operator=(const PassBuffers&) = delete;

    // `bytes` bytes, contents unspecified (0xA5 each with poison).
    Buffer take(std::size_t bytes);
    // A buffer that no PassBuffers recycles (for callers without one).
    static Buffer allocate(std::size_t bytes);
    // Starts a pass: frees the idle buffers no one took during the previous pass.
    void begin_pass();

    struct Stats {
        std::size_t held_bytes = 0;   // pooled bytes allocated and not freed (idle or handed out)
        std::size_t idle_bytes = 0;   // of which idle
        std::int64_t fresh = 0;       // pooled takes that allocated new memory
        std::int64_t reused = 0;      // pooled takes served from an idle buffer
    };
    Stats stats() const;

private:
    std::shared_ptr<Shelf> shelf_;
    std::size_t min_pooled_;
    bool poison_;
};

// take() on `buffers`, or an ordinary allocation when it is null.
PassBuffers::Buffer take_buffer(PassBuffers* buffers, std::size_t bytes);

}  // namespace aimcemu
