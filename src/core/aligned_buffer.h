// A heap byte buffer whose start address is a multiple of a given alignment (default 4096), for
// O_DIRECT I/O: Linux requires the user buffer, the file offset and the length of a direct
// transfer to be multiples of the device's logical block size (512 or 4096 bytes), and 4096
// satisfies every device. One owner: movable, not copyable. The bytes are zeroed at allocation, unless
// it is made with aligned_buffer::uninitialized: a buffer that is always written before it is read (the
// staging of reads) then costs no memory until it is used — a context's read buffers come to ~100 MiB,
// which zeroing would fault in page by page when the context is made (on a VM, ~0.1 s per context).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>

#include "core/error.h"

namespace hill {

class aligned_buffer {
public:
    static constexpr size_t default_alignment = 4096;

    aligned_buffer() = default;

    // size_bytes may be 0 (no allocation). alignment: a power of two >= sizeof(void *) (asserted).
    // Errors (hill::error, exit_code::bad_input): allocation failure, naming the size.
    explicit aligned_buffer(size_t size_bytes, size_t alignment = default_alignment)
        : aligned_buffer(size_bytes, uninitialized, alignment) {
        if (data_ != nullptr) std::memset(data_, 0, size_bytes);
    }

    // Tag of the constructor that leaves the bytes unspecified.
    struct uninitialized_t {};
    static constexpr uninitialized_t uninitialized{};

    // As above, the bytes left unspecified (the caller writes each before reading it).
    aligned_buffer(size_t size_bytes, uninitialized_t, size_t alignment = default_alignment)
        : size_bytes_(size_bytes), alignment_(alignment) {
        HILL_ASSERT(alignment >= sizeof(void *) && (alignment & (alignment - 1)) == 0);
        if (size_bytes == 0) return;
        void * p = nullptr;
        if (::posix_memalign(&p, alignment, size_bytes) != 0) {
            fail_input("cannot allocate an aligned buffer of {} bytes (alignment {})", size_bytes, alignment);
        }
        data_ = static_cast<uint8_t *>(p);
    }

    ~aligned_buffer() { std::free(data_); }

    aligned_buffer(const aligned_buffer &) = delete;
    aligned_buffer & operator=(const aligned_buffer &) = delete;

    aligned_buffer(aligned_buffer && o) noexcept
        : data_(std::exchange(o.data_, nullptr)),
          size_bytes_(std::exchange(o.size_bytes_, 0)),
          alignment_(o.alignment_) {}

    aligned_buffer & operator=(aligned_buffer && o) noexcept {
        if (this != &o) {
            std::free(data_);
            data_ = std::exchange(o.data_, nullptr);
            size_bytes_ = std::exchange(o.size_bytes_, 0);
            alignment_ = o.alignment_;
        }
        return *this;
    }

    uint8_t * data() { return data_; }
    const uint8_t * data() const { return data_; }
    size_t size() const { return size_bytes_; }
    size_t alignment() const { return alignment_; }
    bool empty() const { return size_bytes_ == 0; }

    std::span<uint8_t> span() { return {data_, size_bytes_}; }
    std::span<const uint8_t> span() const { return {data_, size_bytes_}; }

private:
    uint8_t * data_ = nullptr;
    size_t size_bytes_ = 0;
    size_t alignment_ = default_alignment;
};

}  // namespace hill
