// A whole file's bytes in memory, read-only (RAII): mapped, or read into private memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hill {

// How mapped_file holds the bytes. `map`: a read-only mapping of the file (pages shared with the
// page cache, read on first touch). `read`: the whole file read at once into private anonymous
// memory advised for transparent huge pages (madvise MADV_HUGEPAGE), for data streamed over and
// over — model weights: the page cache's 4 KiB pages cost a TLB miss per page and stop the hardware
// prefetchers at each page boundary (F16 decode of a 0.43 B model streamed its weights at 25.5 GB/s
// from a file mapping, 42.0 GB/s from huge pages on the 2-core test VM; docs/benchmarks.md).
enum class file_access { map, read };

class mapped_file {
public:
    // Maps or reads `path` (file_access). Errors (hill::error): missing file, a directory,
    // unreadable file (exit_code::usage); memory that cannot be had, a failed or short read
    // (exit_code::input, naming the file). An empty file gives size() == 0 and data() == nullptr.
    explicit mapped_file(const std::string & path, file_access access = file_access::map);
    ~mapped_file();
    mapped_file(const mapped_file &) = delete;
    mapped_file & operator=(const mapped_file &) = delete;
    mapped_file(mapped_file && o) noexcept;
    mapped_file & operator=(mapped_file && o) noexcept;

    const uint8_t * data() const { return data_; }
    size_t size() const { return size_; }
    const std::string & path() const { return path_; }

private:
    std::string path_;
    const uint8_t * data_ = nullptr;
    size_t size_ = 0;
};

// Checks that `path` names a regular file this process can open for reading; throws
// hill::error(exit_code::usage) naming `what` (e.g. "model file"), the path and the reason
// (strerror: "No such file or directory", "Permission denied", ...) otherwise.
void require_regular_file(const std::string & path, const char * what);

}  // namespace hill
