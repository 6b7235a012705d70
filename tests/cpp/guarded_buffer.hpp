// A byte buffer that ends exactly where an inaccessible page begins, so that a kernel reading or
// writing even one byte past its end dies with SIGSEGV instead of passing silently (a vector
// kernel's over-long loads and stores are bugs only at the end of an allocation, where ordinary
// heap buffers usually have slack behind them).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

namespace aimcemu::test_data {

class GuardedBuffer {
public:
    // `bytes` bytes, every one set to `fill`, followed by a PROT_NONE page.
    explicit GuardedBuffer(std::size_t bytes, std::uint8_t fill = 0) : bytes_(bytes) {
        const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
        const std::size_t data_pages = (bytes + page - 1) / page;
        mapped_ = (data_pages + 1) * page;
        void* base = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) throw std::bad_alloc();
        base_ = static_cast<std::uint8_t*>(base);
        if (mprotect(base_ + data_pages * page, page, PROT_NONE) != 0) {
            munmap(base_, mapped_);
            throw std::runtime_error("GuardedBuffer: mprotect failed");
        }
        data_ = base_ + data_pages * page - bytes;
        std::memset(data_, fill, bytes);
    }
    ~GuardedBuffer() { munmap(base_, mapped_); }
    GuardedBuffer(const GuardedBuffer&) = delete;
    GuardedBuffer& operator=(const GuardedBuffer&) = delete;

    std::uint8_t* data() { return data_; }
    std::int8_t* int8() { return reinterpret_cast<std::int8_t*>(data_); }
    std::size_t size() const { return bytes_; }

private:
    std::size_t bytes_, mapped_ = 0;
    std::uint8_t* base_ = nullptr;
    std::uint8_t* data_ = nullptr;
};

}  // namespace aimcemu::test_data
