// Writes a file so that readers see either the old content or the whole new one: the bytes go to
// `<path>.tmp.<pid>`, are fsync'ed, then renamed over `path` (and the directory fsync'ed).
// A writer destroyed without commit() removes its temporary file: no partial file is ever left
// under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hill {

class atomic_file {
public:
    // Errors (hill::error, exit_code::bad_input): directory missing or unwritable; `path` exists
    // and is not a regular file (a directory, device, pipe or symbolic link is never replaced).
    explicit atomic_file(std::string path);
    ~atomic_file();
    atomic_file(const atomic_file &) = delete;
    atomic_file & operator=(const atomic_file &) = delete;

    // Appends bytes. Errors: write failure (e.g. ENOSPC), naming the file and bytes written so far.
    void write(const void * data, size_t n);
    void write_zeros(size_t n);
    uint64_t offset() const { return offset_; }

    // fsync + rename onto the final path. Errors as for write().
    void commit();

private:
    std::string path_;
    std::string tmp_path_;
    int fd_ = -1;
    uint64_t offset_ = 0;
};

}  // namespace hill
