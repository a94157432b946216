// The read-only side of the cold pool (kv/cold_pool.h): reads batches of pages through its own
// io_queue and its own read-only file descriptors, and checks every page against the checksum the
// pool committed at its last write. The one implementation of page reads and checksums: the host
// (gathers, prefill over the tiers, truncation) and the storage device emulator (csd/emulator.h, on
// its own thread) each own a cold_reader over the same pool.
//
// A page whose read failed, that was never written, or whose bytes do not match its checksum comes
// back with a non-ok page_result (cold_pool::describe names page, file, offset and cause) and a
// zeroed buffer: bad bytes are never returned as data.
//
// Thread-safety: a reader belongs to one thread (its io_queue may hold a kernel ring). It reads the
// pool's committed checksums of the pages it is asked for, which the pool's owner does not change
// while they are referenced (cold_pool.h "Thread-safety").
#pragma once

#include "kv/cold_pool.h"
#include "kv/io_queue.h"

#include <span>
#include <vector>

namespace hill {

class cold_reader {
public:
    // Opens every file of `pool` read-only (O_DIRECT when the pool has it). io: queue depth,
    // coalescing, backend and fault hook of this reader's queue. Errors (hill::error, bad_input): a
    // file that cannot be opened, naming it and the reason.
    cold_reader(const cold_pool & pool, const io_queue_params & io = {});
    ~cold_reader();
    cold_reader(const cold_reader &) = delete;
    cold_reader & operator=(const cold_reader &) = delete;

    // Reads a batch of written pages (duplicates allowed) into their 4096-aligned buffers of
    // page_bytes() each and checks their checksums; out.size() == batch.size() (asserted). A page
    // whose status is not ok has its buffer zeroed. Returns the number of such pages.
    size_t read_pages(std::span<const page_read> batch, std::span<page_result> out);

    // Throws hill::error(bad_input) "<what> failed: <describe(first failed page)>" when any result of
    // a batch is not ok; for callers that cannot go on without every page.
    void check(std::span<const page_result> results, const char * what) const;

    const cold_pool & pool() const { return pool_; }
    const io_queue & io() const { return io_; }

private:
    const cold_pool & pool_;
    io_queue io_;
    std::vector<int> fds_;  // [n_files] read-only descriptors
    // Per-batch scratch, kept to reuse its capacity.
    std::vector<io_request> reqs_;
    std::vector<io_completion> done_;
    std::vector<uint32_t> req_of_;  // batch index -> request index, or cold_pool::no_page when not issued
};

}  // namespace hill
