#include "kv/cold_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"

namespace hill {

namespace {

constexpr uint64_t page_align = 4096;  // O_DIRECT alignment, see the header

std::atomic<uint32_t> g_instance{0};  // distinguishes the pools of one process in file names

// The owner pid of a cold-pool file name, or -1 when `name` is not one.
long owner_pid(const std::string & name) {
    const std::string prefix = cold_pool::file_prefix;
    const std::string suffix = cold_pool::file_suffix;
    if (name.size() <= prefix.size() + suffix.size()) return -1;
    if (name.compare(0, prefix.size(), prefix) != 0) return -1;
    if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
    long pid = -1;
    const char * p = name.data() + prefix.size();
    const auto [end, ec] = std::from_chars(p, name.data() + name.size(), pid);
    if (ec != std::errc() || *end != '-' || pid <= 0) return -1;
    return pid;
}

bool process_alive(long pid) {
    return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

}  // namespace

const char * page_status_name(page_status s) {
    switch (s) {
        case page_status::ok:
            return "ok";
        case page_status::io_error:
            return "I/O error";
        case page_status::checksum_mismatch:
            return "checksum mismatch";
        case page_status::unwritten:
            return "page not written";
        case page_status::batch_failed:
            return "write batch failed";
    }
    return "?";
}

size_t cold_pool::remove_stale_files(const std::string & dir) {
    size_t n_removed = 0;
    std::error_code ec;
    for (const auto & entry : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        const long pid = owner_pid(name);
        if (pid < 0) continue;
        const std::string path = entry.path().string();
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            log_warn("cannot open cold-pool file '{}' to check whether it is stale: {}", path, std::strerror(errno));
            continue;
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            log_debug("cold-pool file '{}' is in use by a live process: kept", path);
        } else if (process_alive(pid)) {
            log_debug("cold-pool file '{}' is unlocked but its owner pid {} is running: kept", path, pid);
        } else if (::unlink(path.c_str()) == 0) {
            log_info("removed stale cold-pool file '{}' (owner pid {} is gone)", path, pid);
            ++n_removed;
        } else if (errno != ENOENT) {
            log_warn("cannot remove stale cold-pool file '{}': {}", path, std::strerror(errno));
        }
        ::close(fd);
    }
    if (ec) log_warn("cannot list '{}' for stale cold-pool files: {}", dir, ec.message());
    return n_removed;
}

uint64_t prepare_kv_dir(const std::string & dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail_input("cannot create the kv directory '{}': {}", dir, ec.message());
    if (!std::filesystem::is_directory(dir, ec)) fail_input("the kv directory '{}' is not a directory", dir);
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        fail_input("the kv directory '{}' is not writable: {}", dir, std::strerror(errno));
    }
    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) != 0) {
        fail_input("cannot query the free space of the kv directory '{}': {}", dir, std::strerror(errno));
    }
    if (vfs.f_blocks == 0) {
        fail_input("the kv directory '{}' is on a file system without storage (a virtual one, such as /proc or /sys): "
                   "choose a directory on a disk with --kv-dir",
                   dir);
    }
    return uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
}

cold_pool::cold_pool(const cold_pool_params & params)
    : kv_dir_(params.kv_dir), page_bytes_(params.page_bytes), n_pages_(params.n_pages) {
    if (page_bytes_ == 0 || page_bytes_ % page_align != 0) {
        fail_usage("cold pool: page size {} bytes is not a positive multiple of {} (O_DIRECT alignment)", page_bytes_,
                   page_align);
    }
    if (n_pages_ == 0) fail_usage("cold pool: capacity of 0 pages");
    if (kv_dir_.empty()) fail_usage("cold pool: no kv directory given");
    pages_per_file_ = uint32_t(std::clamp<uint64_t>(params.max_file_bytes / page_bytes_, 1, n_pages_));

    const uint64_t free_bytes = prepare_kv_dir(kv_dir_);
    remove_stale_files(kv_dir_);

    // Free space, before preallocating anything.
    const uint64_t needed = uint64_t(n_pages_) * page_bytes_;
    if (needed > free_bytes) {
        fail_input(
            "the cold pool needs {} bytes ({} pages of {} bytes) in '{}' but only {} bytes are free there: "
            "free some space, choose another --kv-dir or lower the capacity",
            needed, n_pages_, page_bytes_, kv_dir_, free_bytes);
    }

    // The files: created, locked, preallocated. On any failure the files made so far are removed.
    const uint32_t instance = g_instance.fetch_add(1);
    const size_t n_files = (size_t(n_pages_) + pages_per_file_ - 1) / pages_per_file_;
    try {
        for (size_t i = 0; i < n_files; ++i) {
            file f;
            f.path = (std::filesystem::path(kv_dir_) /
                      fmt::format("{}{}-{}-{}{}", file_prefix, ::getpid(), instance, i, file_suffix))
                         .string();
            const io_open_result o =
                io_open_file(f.path, O_RDWR | O_CREAT | O_TRUNC, 0600, params.want_direct, params.open_hook);
            if (o.fd < 0) {
                fail_input("cannot create the cold-pool file '{}' in the kv directory '{}': {}", f.path, kv_dir_,
                           std::strerror(int(-o.fd)));
            }
            f.fd = o.fd;
            files_.push_back(f);
            if (i == 0) direct_ = o.direct;
            if (::flock(f.fd, LOCK_EX | LOCK_NB) != 0) {
                fail_input("cannot lock the cold-pool file '{}': {}", f.path, std::strerror(errno));
            }
            const uint64_t first_page = uint64_t(i) * pages_per_file_;
            const uint64_t pages_here = std::min<uint64_t>(pages_per_file_, n_pages_ - first_page);
            const int rc = ::posix_fallocate(f.fd, 0, off_t(pages_here * page_bytes_));
            if (rc != 0) {
                fail_input("cannot preallocate {} bytes for the cold-pool file '{}': {}{}", pages_here * page_bytes_,
                           f.path, std::strerror(rc),
                           rc == ENOSPC ? " (the disk is full: free space or lower the capacity)" : "");
            }
        }
    } catch (...) {
        remove_files();
        throw;
    }

    checksum_.assign(n_pages_, 0);
    state_.assign(n_pages_, state_free);
    free_.resize(n_pages_);
    for (uint32_t i = 0; i < n_pages_; ++i) free_[i] = n_pages_ - 1 - i;
    log_debug("cold pool: {} pages of {} bytes in {} file(s) under '{}' ({})", n_pages_, page_bytes_, files_.size(),
              kv_dir_, direct_ ? "O_DIRECT" : "page cache");
}

cold_pool::~cold_pool() {
    remove_files();
}

void cold_pool::remove_files() {
    // Unlink while still holding the lock, so that no other process sees an unlocked live file.
    for (file & f : files_) {
        if (::unlink(f.path.c_str()) != 0 && errno != ENOENT) {
            log_warn("cannot remove the cold-pool file '{}': {}", f.path, std::strerror(errno));
        }
        if (f.fd >= 0) ::close(f.fd);
        f.fd = -1;
    }
    files_.clear();
}

uint32_t cold_pool::alloc() {
    if (free_.empty()) return no_page;
    const uint32_t p = free_.back();
    free_.pop_back();
    HILL_ASSERT(state_[p] == state_free);
    state_[p] = state_unwritten;
    return p;
}

void cold_pool::free(uint32_t page) {
    HILL_ASSERT(page < n_pages_ && state_[page] != state_free);
    state_[page] = state_free;
    checksum_[page] = 0;
    free_.push_back(page);
}

void cold_pool::mark_written(uint32_t page, uint64_t checksum) {
    HILL_ASSERT(page < n_pages_ && state_[page] != state_free);
    checksum_[page] = checksum;
    state_[page] = state_written;
}

void cold_pool::mark_unwritten(uint32_t page) {
    HILL_ASSERT(page < n_pages_ && state_[page] != state_free);
    checksum_[page] = 0;
    state_[page] = state_unwritten;
}

uint64_t cold_pool::checksum(uint32_t page) const {
    HILL_ASSERT(page < n_pages_ && state_[page] == state_written);
    return checksum_[page];
}

uint64_t cold_pool::checksum_of(const void * data) const {
    return page_checksum(data, page_bytes_);
}

uint64_t page_checksum(const void * data, size_t n) {
    return XXH3_64bits(data, n);
}

std::string cold_pool::describe(const page_result & r) const {
    HILL_ASSERT(r.page < n_pages_);
    std::string s = fmt::format("cold page {} (file '{}', offset {}, {} bytes): {}", r.page, file_path(r.page),
                                file_offset(r.page), page_bytes_, page_status_name(r.status));
    switch (r.status) {
        case page_status::io_error:
            s += fmt::format(
                ": {}", r.io_result == -ENODATA ? "the file ended inside the page" : std::strerror(int(-r.io_result)));
            break;
        case page_status::checksum_mismatch:
            s += fmt::format(": expected xxh3 {:016x}, actual {:016x}", r.checksum_expected, r.checksum_actual);
            break;
        default:
            break;
    }
    return s;
}

}  // namespace hill
