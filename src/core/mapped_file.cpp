#include "core/mapped_file.h"

#include "core/error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace hill {

void require_regular_file(const std::string & path, const char * what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        fail_usage("cannot open {} '{}': {}", what, path, std::strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) fail_usage("{} '{}' is a directory, expected a file", what, path);
    if (!S_ISREG(st.st_mode)) fail_usage("{} '{}' is not a regular file", what, path);
    // stat() needs no read permission: open the file to find out (as the effective user).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_usage("cannot read {} '{}': {}", what, path, std::strerror(errno));
    ::close(fd);
}

mapped_file::mapped_file(const std::string & path, file_access access) : path_(path) {
    require_regular_file(path, "file");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_usage("cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail_input("cannot stat '{}': {}", path, std::strerror(e));
    }
    size_ = size_t(st.st_size);
    if (size_ > 0 && access == file_access::map) {
        void * p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            fail_input("cannot map '{}' ({} bytes): {}", path, size_, std::strerror(e));
        }
        data_ = static_cast<const uint8_t *>(p);
    } else if (size_ > 0) {
        void * p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            fail_input("cannot allocate {} bytes to read '{}' into: {}", size_, path, std::strerror(e));
        }
        ::madvise(p, size_, MADV_HUGEPAGE);  // a hint: without transparent huge pages, 4 KiB pages
        auto * bytes = static_cast<char *>(p);
        for (size_t done = 0; done < size_;) {
            const ssize_t n = ::pread(fd, bytes + done, size_ - done, off_t(done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                const int e = errno;
                ::munmap(p, size_);
                ::close(fd);
                if (n == 0) fail_input("'{}' ended at byte {} while reading it: expected {} bytes", path, done, size_);
                fail_input("cannot read '{}' at byte {}: {}", path, done, std::strerror(e));
            }
            done += size_t(n);
        }
        // Left writable (data() is const): an mprotect to read-only here cost the 0.43 B F16 model
        // a fifth of its decode rate on the test VM (37.7 vs 43.8-47.3 tokens/s), as if it split the
        // huge pages.
        data_ = static_cast<const uint8_t *>(p);
    }
    ::close(fd);
}

mapped_file::~mapped_file() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t *>(data_), size_);
}

mapped_file::mapped_file(mapped_file && o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

mapped_file & mapped_file::operator=(mapped_file && o) noexcept {
    if (this != &o) {
        if (data_ != nullptr) ::munmap(const_cast<uint8_t *>(data_), size_);
        path_ = std::move(o.path_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

}  // namespace hill
