// The cold pool (DESIGN.md §1, §3 step 4): fixed-size pages of KV bytes in preallocated files on
// SSD, read and written in batches through an io_queue. It knows nothing of tokens or layers: the
// KV store above it maps (layer, token) slots to page ids and decides what a page holds.
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
// computed on write from the caller's bytes and checked on every read: a mismatch is reported as
// page_status::checksum_mismatch (with page, file, offset, expected and actual checksum via
// describe()) and the buffer is zeroed: bad bytes are never returned as data.
//
// Files and locking. Files are named `hillinfer-cold-<pid>-<instance>-<index>.kv` and hold an
// flock(LOCK_EX) for as long as the pool lives; the destructor removes them. At start, files of
// that name pattern in kv_dir whose lock can be taken and whose owner pid is not running belong to
// a process that died without cleaning up: they are removed (logged). A file whose lock is held is
// in use by a live process and is left alone; so is an unlocked one whose pid is alive (its owner
// may be between creating and locking it).
//
// Thread-safety: a cold_pool has one owner thread (the KV cache metadata thread, STYLE.md
// "Concurrency"); its io_queue may use a kernel ring (io_uring), which is not shared. Other threads
// (e.g. the CSD emulator) open their own pools or their own io_queue.
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
    io_queue_params io;                           // queue depth, coalescing, backend, fault hook
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

class cold_pool {
public:
    static constexpr uint32_t no_page = 0xffffffffu;

    // Creates kv_dir if missing, removes stale files of dead processes there, checks free space
    // (statvfs) and preallocates the files (posix_fallocate).
    // Errors (hill::error): page_bytes not a positive multiple of 4096 or n_pages == 0 (usage);
    // kv_dir impossible to create or not writable, naming it and the reason; not enough free
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

    // Writes a batch of pages (distinct ids, allocated: asserted). All or nothing: when every write
    // succeeded the pages hold the new bytes and checksums; when any failed, every page of the batch
    // is left `unwritten` (reads report so) and the results say which failed (io_error) and which
    // were rolled back (batch_failed). Callers write to fresh pages and switch their maps only after
    // success, so no half-written state is ever visible. out.size() == batch.size() (asserted).
    // Returns the number of pages whose status is not ok (0: the batch is committed).
    size_t write_pages(std::span<const page_write> batch, std::span<page_result> out);

    // Reads a batch of pages (allocated: asserted; duplicates allowed) and checks their checksums.
    // A page whose status is not ok has its buffer zeroed. Returns the number of such pages.
    size_t read_pages(std::span<const page_read> batch, std::span<page_result> out);

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
    uint64_t file_offset(uint32_t page) const { return uint64_t(page % pages_per_file_) * page_bytes_; }
    // XXH3-64 of the page's bytes at its last committed write (a written page; asserted), for a reader
    // with its own file descriptors (the storage device emulator) to check what it reads.
    uint64_t checksum(uint32_t page) const;
    // XXH3-64 of page_bytes() bytes, as the pool computes it.
    uint64_t checksum_of(const void * data) const;
    const io_queue & io() const { return io_; }
    io_queue & io() { return io_; }

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
    enum : uint8_t { state_free = 0, state_unwritten = 1, state_written = 2, state_in_batch = 0x80 };

    void remove_files();
    int fd_of(uint32_t page) const { return files_[page / pages_per_file_].fd; }

    std::string kv_dir_;
    uint64_t page_bytes_ = 0;
    uint32_t n_pages_ = 0;
    uint32_t pages_per_file_ = 0;
    bool direct_ = false;
    std::vector<file> files_;
    std::vector<uint64_t> checksum_;  // per page: XXH3-64 of its bytes at the last committed write
    std::vector<uint8_t> state_;      // per page: state_free / state_unwritten / state_written
    std::vector<uint32_t> free_;      // free page ids, highest first (alloc pops the lowest)
    io_queue io_;

    // Per-batch scratch, kept to reuse its capacity.
    std::vector<io_request> reqs_;
    std::vector<io_completion> done_;
    std::vector<uint32_t> req_of_;  // batch index -> request index, or no_page when not issued
    std::vector<uint64_t> new_sum_;
};

}  // namespace hill
