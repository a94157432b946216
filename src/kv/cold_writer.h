// The write side of the cold pool (kv/cold_pool.h): batches of page writes through the writer's own
// io_queue on the pool's read-write descriptors, all or nothing, and the commit of each written page's
// checksum to the pool. The cold logs (kv/cold_logs.h) write every group of KV rows through it.
//
// Thread-safety: one owner thread — the pool's.
#pragma once

#include "kv/cold_pool.h"
#include "kv/io_queue.h"

#include <span>
#include <vector>

namespace hill {

class cold_writer {
public:
    cold_writer(cold_pool & pool, const io_queue_params & io = {});

    // Writes a batch of pages (distinct ids; allocated: asserted). All or nothing: when every write
    // succeeded the pages hold the new bytes and the pool their checksums; when any failed, every page
    // of the batch is left `unwritten` (readers report so) and the results say which failed (io_error,
    // with -errno) and which were rolled back (batch_failed). Callers write to fresh pages and switch
    // their maps only after success, so no half-written state is ever visible. out.size() ==
    // batch.size() (asserted). Returns the number of pages whose status is not ok (0: committed).
    size_t write_pages(std::span<const page_write> batch, std::span<page_result> out);

    cold_pool & pool() { return pool_; }
    const io_queue & io() const { return io_; }
    io_queue & io() { return io_; }
    // Bytes of pages committed since construction.
    uint64_t write_bytes() const { return write_bytes_; }

private:
    cold_pool & pool_;
    io_queue io_;
    uint64_t write_bytes_ = 0;
    // Per-batch scratch, kept to reuse its capacity.
    std::vector<io_request> reqs_;
    std::vector<io_completion> done_;
    std::vector<uint64_t> sums_;
};

}  // namespace hill
