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

    // The same read in the background: start_pages() issues the reads and returns at once;
    // pages_done(k) waits until pages [0, k) are read and checked and returns how many leading pages
    // are (>= k; out[i] is final for those); finish_pages() waits for the rest, ends the batch and
    // returns the number of pages whose status is not ok. The pages are issued in batch order (the
    // first ones arrive first). batch, out and the buffers must stay valid until finish_pages() (or
    // the reader's destruction, which waits for the reads); read_pages() may not run in between.
    // abandon_pages() waits for the reads in flight and ends the batch without checking the pages not
    // handed over yet (their pages may have been freed since; their results are left unset).
    void start_pages(std::span<const page_read> batch, std::span<page_result> out);
    size_t pages_done(size_t at_least);
    size_t finish_pages();
    void abandon_pages();

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
    // The batch in flight (start_pages): its pages and results, and how many leading ones are final.
    std::span<const page_read> batch_;
    std::span<page_result> out_;
    size_t n_final_ = 0, n_bad_ = 0;
    // Submits batch_'s written pages (in order; sorted by offset when sort_by_offset).
    void issue(bool sort_by_offset);
    // Sets out_[i] from its read (or the page's absence) and zeroes a bad page's buffer.
    void settle(size_t i, int64_t io_result);
};

}  // namespace hill
