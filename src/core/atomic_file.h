// Writes a file so that readers see either the old content or the whole new one: the bytes go to
// `<path>.tmp.<pid>`, are fsync'ed, then renamed over `path` (and the directory fsync'ed).
// A writer destroyed without commit() removes its temporary file: no partial file is ever left
// under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

    // The temporary name of a writer of `path` in process `pid`: `<path>.tmp.<pid>`.
    static std::string temp_path(const std::string & path, long pid);

    // Removes what writers of `path` killed before commit() or their destructor left behind: the
    // files in path's directory named `<file name of path>.tmp.<pid>`, pid being decimal digits only
    // (the pattern of temp_path), whose process no longer exists (kill(pid, 0) fails with ESRCH), other
    // than this process's own. A live writer's file, a name with anything after the digits, and any
    // other file are left alone. Returns the paths removed; never throws (a file that cannot be
    // listed or removed stays).
    static std::vector<std::string> remove_stale_temps(const std::string & path);

private:
    std::string path_;
    std::string tmp_path_;
    int fd_ = -1;
    uint64_t offset_ = 0;
};

// A scratch file removed (errors ignored) when this goes out of scope: a benchmark's generated model.
struct remove_on_exit {
    std::string path;
    ~remove_on_exit();
};

}  // namespace hill
