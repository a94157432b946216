// Asynchronous block I/O for the cold pool (DESIGN.md §3 step 4, §5): a batch of reads and writes
// at file offsets, run with io_uring (liburing) or, where io_uring is unavailable, with
// pread/pwrite. The caller hands a batch, waits, and gets one result per request.
//
//   io_queue q(io_queue_params{.queue_depth = 128});
//   std::vector<io_completion> done(reqs.size());
//   if (q.run(reqs, done) != 0) { ... done[i].result < 0 is -errno for request i ... }
//
// What run() (and start() ... finish()) does with a batch:
// - Coalescing: requests on the same fd with the same op whose byte ranges follow each other
//   (after sorting by offset) are merged into one readv/writev (IORING_OP_READV/WRITEV) of at most
//   max_coalesce_bytes and UIO_MAXIOV (1024) buffers. Results are still reported per request.
// - Short transfers are finished: the remainder is resubmitted at the right file offset into the
//   right buffer position. The resume point is rounded down to a 4096-byte file offset when that
//   still makes progress, so that O_DIRECT remainders stay aligned (re-reading or re-writing the
//   same bytes is harmless). Every attempt moves forward, so this always ends.
// - End of file: a read that returns 0 bytes before the request is complete fails with -ENODATA
//   ("the file ended inside the requested range"); a write that returns 0 fails with -EIO.
// - Errors: when a coalesced op fails, its requests are retried one by one, so that one bad block
//   fails only the request that covers it. -EAGAIN / -EINTR are retried.
// - Requests of one batch run concurrently and in no particular order: they must not overlap when
//   one of them is a write.
//
// Thread-safety: an io_queue belongs to one thread (it holds a kernel ring); different threads use
// different queues. run() never throws; errors are the per-request results.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

struct io_uring;  // liburing, kept out of this header

namespace hill {

// ---- Opening files for block I/O ---------------------------------------------------------------

// Replaces ::open for fault injection in tests: returns an fd or -errno.
using io_open_hook = std::function<int(const char * path, int flags, mode_t mode)>;

struct io_open_result {
    int fd = -1;          // the open fd, or -errno when the open failed
    bool direct = false;  // O_DIRECT is in effect (the page cache is bypassed)
};

// Opens `path` with `flags` | O_CLOEXEC, with O_DIRECT when `want_direct`. When the file system
// refuses O_DIRECT (EINVAL, e.g. tmpfs on kernels before 6.6, some FUSE and network file systems)
// the file is opened without it, and that is logged once per process (warning). `hook`, when set,
// is called instead of ::open (tests use it to refuse O_DIRECT).
io_open_result io_open_file(const std::string & path, int flags, mode_t mode = 0644, bool want_direct = true,
                            const io_open_hook & hook = {});

// ---- The queue -----------------------------------------------------------------------------------

enum class io_op : uint8_t { read, write };

struct io_request {
    io_op op = io_op::read;
    int fd = -1;
    uint64_t offset = 0;      // bytes from the start of the file
    uint64_t size_bytes = 0;  // bytes to transfer
    void * buffer = nullptr;  // size_bytes bytes; with O_DIRECT, buffer, offset and size are multiples of 4096
    uint64_t user_data = 0;   // returned unchanged in the completion
};

struct io_completion {
    uint64_t user_data = 0;
    int64_t result = 0;  // size_bytes on success, else -errno (-ENODATA: the file ended inside the range)
};

// One operation as issued to the kernel (what the fault hook sees): the attempt's byte range of the
// file, its buffers, and how many requests it carries (> 1 when coalesced).
struct io_issue {
    io_op op = io_op::read;
    int fd = -1;
    uint64_t offset = 0;      // file offset of this attempt (a remainder starts past the op's start)
    uint64_t size_bytes = 0;  // bytes asked in this attempt
    const iovec * iov = nullptr;
    int n_iov = 0;
    uint32_t n_requests = 0;  // requests with bytes in this attempt
};

// Fault injection: called on every completed attempt with the kernel's result (bytes or -errno);
// returns the result to act on. Tests turn results into -EIO, -ENOSPC or a short count (the bytes
// past a short count may be scribbled over by the hook: the remainder path must refill them).
// The hook must return a value <= issued.size_bytes.
using io_fault_hook = std::function<int64_t(const io_issue & issued, int64_t result)>;

enum class io_backend { uring, sync };

struct io_queue_params {
    // Operations in flight at once (io_uring submission queue entries). A decode step's gather is a
    // batch of thousands of 4 KiB random reads, and what counts is when the whole batch is done, so the
    // depth is set for throughput: bench_cold_pool on the test VM's virtio disk gathered 155,000 pages/s
    // at depth 32 and 253,000 at 128 (docs/kv.md), and NVMe SSDs reach their random-read rate only at
    // depths of 64-256. Sequential scans are coalesced into large ops anyway.
    uint32_t queue_depth = 128;
    // Largest coalesced op. 1 MiB: beyond it an SSD is at its streaming bandwidth already, and larger
    // ops only delay the first completions. 0 disables coalescing.
    uint64_t max_coalesce_bytes = 1u << 20;
    // Use the synchronous pread/pwrite backend even when io_uring works (tests run both).
    bool force_sync = false;
    io_fault_hook fault_hook;
};

struct io_queue_stats {
    uint64_t n_requests = 0;     // requests passed to run()
    uint64_t n_ops = 0;          // operations issued to the kernel: coalesced ops, remainders, retries
    uint64_t n_coalesced = 0;    // requests that rode in another request's op (merged away)
    uint64_t n_remainders = 0;   // resubmissions after a short transfer
    uint64_t n_splits = 0;       // coalesced ops retried one request at a time after an error
    uint64_t n_failed = 0;       // requests that completed with an error
    uint64_t bytes_read = 0;     // bytes of successful read requests
    uint64_t bytes_written = 0;  // bytes of successful write requests
};

class io_queue {
public:
    // Sets up io_uring with queue_depth entries (1..4096, asserted); when io_uring_queue_init fails
    // (ENOSYS: old kernel; EPERM: seccomp or io_uring_disabled; ENOMEM: locked-memory limit) it uses
    // the synchronous backend and logs that once per process. Never throws.
    explicit io_queue(io_queue_params params = {});
    ~io_queue();
    io_queue(const io_queue &) = delete;
    io_queue & operator=(const io_queue &) = delete;

    io_backend backend() const { return backend_; }
    const io_queue_params & params() const { return params_; }
    const io_queue_stats & stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }

    // Runs every request of the batch and waits for all of them. out.size() == reqs.size()
    // (asserted); out[i] is request i's completion. Returns the number of failed requests.
    // Allocates only when a batch is larger than every earlier one. = start(reqs, true) + finish(out).
    size_t run(std::span<const io_request> reqs, std::span<io_completion> out);

    // A batch in the background, for a caller that uses its first requests while the rest are read
    // (csd/plain_ssd.h: attention runs behind the reads). start() issues the first queue_depth
    // operations and returns at once; the kernel works on them while the caller computes, and every
    // later call refills the queue. `reqs` must stay valid and unchanged until finish().
    // sort_by_offset: coalesce after sorting by (fd, op, offset), as run() does; false issues the
    // requests in the order given and coalesces only neighbours in it, so that the first ones arrive
    // first. One batch at a time (asserted); with the synchronous backend the reads run inside wait().
    void start(std::span<const io_request> reqs, bool sort_by_offset);
    // Waits until requests [0, at_least) have their results (at_least <= the batch's size), takes
    // the completions that are there without waiting, refills the queue, and returns n >= at_least:
    // requests [0, n) have their results (result(i)).
    size_t wait(size_t at_least);
    // Request i's result once wait() has returned more than i: bytes, or -errno.
    int64_t result(size_t i) const;
    // Waits for every request of the batch and ends it; out (empty, or one per request) gets the
    // completions. Returns the number of failed requests. Does nothing without a batch.
    size_t finish(std::span<io_completion> out = {});
    // A batch is started and not finished.
    bool busy() const { return busy_; }

private:
    struct op;

    // Issues the ready operations the queue has room for; with io_uring, submits them and takes the
    // completions there are, waiting for one first when `block`.
    void pump(bool block);

    void issue(uint32_t op_index);
    void on_result(uint32_t op_index, int64_t result);
    void fail_from(op & o, int64_t result);  // fails the parts not complete yet
    uint32_t build_iov(op & o, uint64_t from);

    io_queue_params params_;
    io_backend backend_ = io_backend::sync;
    std::unique_ptr<::io_uring> ring_;
    io_queue_stats stats_;

    // Per-batch state, kept to reuse its capacity.
    std::span<const io_request> reqs_;
    std::vector<uint32_t> order_;   // request indices sorted by (fd, op, offset): parts of ops
    std::vector<int64_t> results_;  // per request: result, or pending_result
    std::vector<op> ops_;
    std::vector<iovec> iov_;       // iov_[k]: part k's buffer (op o uses slots [o.p0, o.p1))
    std::vector<uint32_t> ready_;  // FIFO of ops to issue, from ready_head_
    size_t ready_head_ = 0;
    uint32_t n_inflight_ = 0;
    size_t n_pending_ = 0;  // requests without a result yet
    size_t n_done_prefix_ = 0;  // requests [0, this) have their results
    uint64_t n_failed_at_start_ = 0;
    bool busy_ = false;
};

}  // namespace hill
