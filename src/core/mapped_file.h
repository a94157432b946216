// Read-only memory mapping of a whole file (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hill {

class mapped_file {
public:
    // Maps `path` read-only. Errors (hill::error, exit_code::usage): missing file, a directory,
    // unreadable file. An empty file maps to size() == 0 and data() == nullptr.
    explicit mapped_file(const std::string & path);
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
