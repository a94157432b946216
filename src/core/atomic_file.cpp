#include "core/atomic_file.h"

#include "core/error.h"

#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <filesystem>
#include <unistd.h>
#include <vector>

namespace hill {

atomic_file::atomic_file(std::string path) : path_(std::move(path)) {
    // The final rename replaces whatever the path names: refuse anything but a regular file, so
    // that a device, a pipe or a symbolic link is never replaced by a file.
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        const char * kind = S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link"
                          : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : S_ISFIFO(st.st_mode) ? "a pipe"
                          : "not a regular file";
        fail_input("cannot write '{}': it is {}; files are written whole under a temporary name and renamed, so give "
                   "the path of a regular file (or of none)", path_, kind);
    }
    tmp_path_ = temp_path(path_, long(::getpid()));
    fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail_input("cannot create '{}' (written first as '{}'): {}", path_, tmp_path_, std::strerror(errno));
}

std::string atomic_file::temp_path(const std::string & path, long pid) { return path + ".tmp." + std::to_string(pid); }

std::vector<std::string> atomic_file::remove_stale_temps(const std::string & path) {
    namespace fs = std::filesystem;
    std::vector<std::string> removed;
    const fs::path p(path);
    const std::string prefix = p.filename().string() + ".tmp.";
    fs::path dir = p.parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.starts_with(prefix)) continue;
        // <prefix><pid>: decimal digits only, a pid_t as getpid() gives it.
        const std::string digits = name.substr(prefix.size());
        pid_t pid = 0;
        const auto [ptr, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid, 10);
        if (digits.empty() || ptr != digits.data() + digits.size() || err != std::errc() || pid <= 0) continue;
        if (pid == ::getpid()) continue;
        if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: another user's process)
        std::error_code e1, e2;
        if (!fs::is_regular_file(fs::symlink_status(it->path(), e1))) continue;
        if (fs::remove(it->path(), e2)) removed.push_back(it->path().string());
    }
    return removed;
}

atomic_file::~atomic_file() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(tmp_path_.c_str());
    }
}

void atomic_file::write(const void * data, size_t n) {
    const auto * p = static_cast<const uint8_t *>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            fail_input("cannot write '{}' (written first as '{}') after {} bytes: {}", path_, tmp_path_, offset_,
                       std::strerror(errno));
        }
        p += w;
        n -= size_t(w);
        offset_ += uint64_t(w);
    }
}

void atomic_file::write_zeros(size_t n) {
    static const std::vector<uint8_t> zeros(4096, 0);
    while (n > 0) {
        const size_t k = n < zeros.size() ? n : zeros.size();
        write(zeros.data(), k);
        n -= k;
    }
}

void atomic_file::commit() {
    HILL_ASSERT(fd_ >= 0);
    if (::fsync(fd_) != 0) fail_input("cannot sync '{}': {}", tmp_path_, std::strerror(errno));
    if (::close(fd_) != 0) {
        fd_ = -1;
        ::unlink(tmp_path_.c_str());
        fail_input("cannot close '{}': {}", tmp_path_, std::strerror(errno));
    }
    fd_ = -1;
    if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp_path_.c_str());
        fail_input("cannot rename '{}' to '{}': {}", tmp_path_, path_, std::strerror(e));
    }
    std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

remove_on_exit::~remove_on_exit() {
    std::error_code e;
    std::filesystem::remove(path, e);
}

}  // namespace hill
