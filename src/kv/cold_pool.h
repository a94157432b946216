// The cold pool (DESIGN.md §1, §3 step 4): fixed-size pages of KV bytes in preallocated files on
// SSD. The pool owns the files, the page allocation and each page's committed checksum; the bytes
// move through a cold_writer (kv/cold_writer.h, the owner thread's page writes) and cold_readers
// (kv/cold_reader.h: the host's reads, and the storage device emulator's own). It knows nothing of
// tokens or layers: the cold writer above it maps (sequence, layer, position) to page ids.
//
// Page layout on disk. Page p (0 <= p < n_pages) lives in file p / pages_per_file at byte offset
// (p % pages_per_file) * page_bytes; pages_per_file = max_file_bytes / page_bytes (files of at most
// 1 GiB by default, so that no single file is unwieldy to preallocate, copy or inspect). A page is
// raw bytes, nothing else: no header, no padding, no checksum on disk.
//
// Why page_bytes is a multiple of 4096: the files are opened with O_DIRECT (the page cache is
// bypassed: the pool is there because RAM is short, and a cached copy would double the memory and
// hide the SSD's real speed). Linux requires a direct transfer's file offset, length and buffer
// address to be multiples of the device's logical block size (512 or 4096 bytes); 4096 suits every
// device, so every page boundary is aligned and buffers passed in must be 4096-aligned
// (core/aligned_buffer.h). Where the file system refuses O_DIRECT the pool works through the page
// cache (logged once per process; see direct()).
//
// What is in memory per page: its XXH3-64 checksum (8 bytes) and a state byte (free / allocated and
// unwritten / written), plus 4 bytes in the free list while the page is free. A page's checksum is
// computed by the writer from the caller's bytes and committed here when the write succeeded; every
// reader checks it: a mismatch is reported as page_status::checksum_mismatch (with page, file,
// offset, expected and actual checksum via describe()) and the buffer is zeroed: bad bytes are never
// returned as data.
//
// Files and locking. Files are named `hillinfer-cold-<pid>-<instance>-<index>.kv` and hold an
// flock(LOCK_EX) for as long as the pool lives; the destructor removes them. At start, files of
// that name pattern in kv_dir whose lock can be taken and whose owner pid is not running belong to
// a process that died without cleaning up: they are removed (logged). A file whose lock is held is
// in use by a live process and is left alone; so is an unlocked one whose pid is alive (its owner
// may be between creating and locking it).
//
// Thread-safety: a cold_pool has one owner thread (the KV cache metadata thread, STYLE.md
// "Concurrency"), which allocates, frees and commits. A cold_reader on another thread (the storage
// device emulator) only reads the checksums of written pages that the owner does not free or
// rewrite while a pass is in flight (the owner does not change the cache during a device pass).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/io_queue.h"

namespace hill {

struct cold_pool_params {
    std::string kv_dir;           // created (with its parents) if missing
    uint64_t page_bytes = 65536;  // a multiple of 4096 (see above); the KV store sets it from its layout
    uint32_t n_pages = 0;         // capacity, >= 1
    uint64_t max_file_bytes = uint64_t(1) << 30;  // pages per file = max(1, max_file_bytes / page_bytes)
    bool want_direct = true;                      // open the files with O_DIRECT when the file system allows it
    io_open_hook open_hook;                       // tests: replaces ::open (e.g. to refuse O_DIRECT)
};

enum class page_status : uint8_t {
    ok,
    io_error,           // the read or write failed: io_result holds -errno (-ENODATA: file ended early)
    checksum_mismatch,  // read: the bytes on disk do not match the checksum of the last write
    unwritten,          // read: the page was never written, or its last write batch failed
    batch_failed,       // write: this page's own I/O succeeded but another page of its batch failed
};

const char * page_status_name(page_status s);

struct page_result {
    uint32_t page = 0;
    page_status status = page_status::ok;
    int64_t io_result = 0;           // bytes transferred or -errno, as the io_queue reported it
    uint64_t checksum_expected = 0;  // checksum_mismatch: from the last write
    uint64_t checksum_actual = 0;    // checksum_mismatch: of the bytes read
};

struct page_read {
    uint32_t page = 0;
    void * buffer = nullptr;  // page_bytes, 4096-aligned (asserted)
};

struct page_write {
    uint32_t page = 0;
    const void * data = nullptr;  // page_bytes, 4096-aligned (asserted); unchanged during the call
};

// XXH3-64 of n bytes: the page checksum the writer computes and the readers check.
uint64_t page_checksum(const void * data, size_t n);

// Makes dir usable as a kv directory: creates it if missing and checks that it is a writable directory on
// a file system with storage (a virtual one such as /proc or /sys has none). Returns its free bytes
// (statvfs). Errors (hill::error, bad_input): naming the directory and what is wrong with it. The
// commands call it before long work (a benchmark's calibration), and the cold pool at construction.
uint64_t prepare_kv_dir(const std::string & dir);

class cold_pool {
public:
    static constexpr uint32_t no_page = 0xffffffffu;

    // Prepares kv_dir (prepare_kv_dir), removes stale files of dead processes there, checks free space
    // and preallocates the files (posix_fallocate).
    // Errors (hill::error): page_bytes not a positive multiple of 4096 or n_pages == 0 (usage);
    // kv_dir unusable (prepare_kv_dir); not enough free
    // space, giving the bytes needed and free and the directory; preallocation failure (ENOSPC
    // included), after removing the files already made (bad_input).
    explicit cold_pool(const cold_pool_params & params);
    // Removes the pool's files.
    ~cold_pool();
    cold_pool(const cold_pool &) = delete;
    cold_pool & operator=(const cold_pool &) = delete;

    // A free page id, or no_page when the pool is full (an expected outcome). A fresh pool hands out
    // ids in ascending order (sequential in the files); later, the most recently freed first.
    uint32_t alloc();
    // Returns an allocated page to the free list (asserted: allocated). Its content is forgotten.
    void free(uint32_t page);

    // The writer's commit of a page (allocated: asserted) whose bytes with this XXH3-64 checksum are on
    // disk now; mark_unwritten: its write failed (reads report page_status::unwritten).
    void mark_written(uint32_t page, uint64_t checksum);
    void mark_unwritten(uint32_t page);
    bool is_written(uint32_t page) const { return page < n_pages_ && state_[page] == state_written; }

    // One line for a failed page: page id, file, offset, the status and (checksum) expected vs actual.
    std::string describe(const page_result & r) const;

    uint64_t page_bytes() const { return page_bytes_; }
    uint32_t n_pages() const { return n_pages_; }
    uint32_t n_free() const { return uint32_t(free_.size()); }
    uint32_t pages_per_file() const { return pages_per_file_; }
    size_t n_files() const { return files_.size(); }
    bool direct() const { return direct_; }  // O_DIRECT in effect (false: the file system refused it)
    const std::string & kv_dir() const { return kv_dir_; }
    const std::string & file_path(uint32_t page) const { return files_[page / pages_per_file_].path; }
    // The pool's read-write descriptor of the file holding `page` (the writer's).
    int fd_of(uint32_t page) const { return files_[page / pages_per_file_].fd; }
    uint64_t file_offset(uint32_t page) const { return uint64_t(page % pages_per_file_) * page_bytes_; }
    // XXH3-64 of the page's bytes at its last committed write (a written page; asserted): what a
    // reader checks.
    uint64_t checksum(uint32_t page) const;
    // XXH3-64 of page_bytes() bytes, as the pool computes it.
    uint64_t checksum_of(const void * data) const;

    // Removes the cold-pool files of dead processes from `dir` (see above). Returns how many were
    // removed. Called by the constructor; never throws (failures are logged).
    static size_t remove_stale_files(const std::string & dir);

    // The file-name prefix and suffix of cold-pool files.
    static constexpr const char * file_prefix = "hillinfer-cold-";
    static constexpr const char * file_suffix = ".kv";

private:
    struct file {
        std::string path;
        int fd = -1;
    };
    enum : uint8_t { state_free = 0, state_unwritten = 1, state_written = 2 };

    void remove_files();

    std::string kv_dir_;
    uint64_t page_bytes_ = 0;
    uint32_t n_pages_ = 0;
    uint32_t pages_per_file_ = 0;
    bool direct_ = false;
    std::vector<file> files_;
    std::vector<uint64_t> checksum_;  // per page: XXH3-64 of its bytes at the last committed write
    std::vector<uint8_t> state_;      // per page: state_free / state_unwritten / state_written
    std::vector<uint32_t> free_;      // free page ids, highest first (alloc pops the lowest)
};

}  // namespace hill
