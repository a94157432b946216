#include "kv/io_queue.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/log.h"

namespace hill {

namespace {

constexpr int64_t pending_result = std::numeric_limits<int64_t>::min();
constexpr uint32_t max_iov_per_op = 1024;    // UIO_MAXIOV: the kernel refuses longer iovec arrays
constexpr uint64_t direct_align = 4096;      // see the header: remainders stay aligned for O_DIRECT
constexpr uint64_t max_plain_rw = 1u << 30;  // IORING_OP_READ/WRITE take a u32 length; longer: readv

std::atomic<bool> g_logged_no_direct{false};
std::atomic<bool> g_logged_no_uring{false};

#if defined(__SANITIZE_THREAD__)
#define HILL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HILL_TSAN 1
#endif
#endif
// liburing maps and unmaps a ring with raw system calls, which ThreadSanitizer does not see: a ring
// mapped where another thread's closed ring was keeps that ring's access history, and the two threads'
// accesses are reported as a race (test_cold_pool's one-pool-per-thread test: one CI run in four this
// session, 1 of 120 runs of the test alone).
// ThreadSanitizer builds therefore unmap a ring through libc's munmap, which it intercepts and after
// which it forgets the range (AnnotateNewMemory on the new ring, tried before, did not stop the reports);
// other builds let liburing close it.
void close_ring(::io_uring & ring) {
#ifdef HILL_TSAN
    munmap(ring.sq.sqes, size_t(ring.sq.ring_entries) * sizeof(io_uring_sqe));
    munmap(ring.sq.ring_ptr, ring.sq.ring_sz);
    if (ring.cq.ring_ptr != ring.sq.ring_ptr) munmap(ring.cq.ring_ptr, ring.cq.ring_sz);
    close(ring.ring_fd);
#else
    io_uring_queue_exit(&ring);
#endif
}
}  // namespace

io_open_result io_open_file(const std::string & path, int flags, mode_t mode, bool want_direct,
                            const io_open_hook & hook) {
    const auto do_open = [&](int f) -> int {
        if (hook) return hook(path.c_str(), f, mode);
        int fd;
        do {
            fd = ::open(path.c_str(), f, mode);
        } while (fd < 0 && errno == EINTR);
        return fd < 0 ? -errno : fd;
    };
    const int base = flags | O_CLOEXEC;
    if (want_direct) {
        const int fd = do_open(base | O_DIRECT);
        if (fd >= 0) return {fd, true};
        if (fd != -EINVAL) return {fd, false};
        if (!g_logged_no_direct.exchange(true)) {
            log_warn(
                "the file system of '{}' refuses O_DIRECT: cold-pool I/O goes through the page cache "
                "(logged once per process)",
                path);
        }
    }
    return {do_open(base), false};
}

// One operation: the requests order_[p0..p1) merged into a contiguous byte range of one file.
struct io_queue::op {
    io_op kind = io_op::read;
    int fd = -1;
    uint64_t offset = 0;          // file offset of the op's byte 0
    uint64_t size_bytes = 0;      // total bytes of its parts
    uint32_t p0 = 0, p1 = 0;      // parts [p0, p1): positions in order_ (and iovec slots in iov_)
    uint32_t part_cur = 0;        // first part not complete yet
    uint64_t part_cur_start = 0;  // op-relative byte where part_cur starts
    uint64_t done = 0;            // op-relative: bytes [0, done) are transferred
    uint64_t from = 0;            // op-relative start of the current attempt
    uint32_t iov_first = 0;       // current attempt's iovecs: iov_[iov_first .. p1)

    // An op of the one request at position k of order_.
    static op of_request(const io_request & r, uint32_t k) {
        op o;
        o.kind = r.op;
        o.fd = r.fd;
        o.offset = r.offset;
        o.size_bytes = r.size_bytes;
        o.p0 = k;
        o.p1 = k + 1;
        o.part_cur = k;
        return o;
    }
};

io_queue::io_queue(io_queue_params params) : params_(std::move(params)) {
    HILL_ASSERT(params_.queue_depth >= 1 && params_.queue_depth <= 4096);
    if (params_.force_sync) return;
    auto ring = std::make_unique<::io_uring>();
    const int rc = io_uring_queue_init(params_.queue_depth, ring.get(), 0);
    if (rc < 0) {
        if (!g_logged_no_uring.exchange(true)) {
            log_warn(
                "io_uring is unavailable ({}): block I/O falls back to synchronous pread/pwrite "
                "(logged once per process)",
                std::strerror(-rc));
        }
        return;
    }
    ring_ = std::move(ring);
    backend_ = io_backend::uring;
}

io_queue::~io_queue() {
    finish();  // no read may land in a buffer after its owner is gone
    if (ring_) close_ring(*ring_);
}

uint32_t io_queue::build_iov(op & o, uint64_t from) {
    uint64_t start = 0;
    uint32_t k = o.p0;
    for (;; ++k) {
        HILL_ASSERT(k < o.p1);
        const uint64_t sz = reqs_[order_[k]].size_bytes;
        if (from < start + sz) break;
        start += sz;
    }
    o.iov_first = k;
    for (uint32_t j = k; j < o.p1; ++j) {
        const io_request & r = reqs_[order_[j]];
        const uint64_t skip = j == k ? from - start : 0;
        iov_[j].iov_base = static_cast<uint8_t *>(r.buffer) + skip;
        iov_[j].iov_len = r.size_bytes - skip;
    }
    return o.p1 - k;
}

void io_queue::issue(uint32_t op_index) {
    op & o = ops_[op_index];
    const uint32_t n_iov = build_iov(o, o.from);
    const iovec * iov = &iov_[o.iov_first];
    const uint64_t off = o.offset + o.from;
    ++stats_.n_ops;
    const bool plain = n_iov == 1 && iov[0].iov_len <= max_plain_rw;
    if (backend_ == io_backend::sync) {
        ssize_t r;
        if (o.kind == io_op::read) {
            r = plain ? ::pread(o.fd, iov[0].iov_base, iov[0].iov_len, off_t(off))
                      : ::preadv(o.fd, iov, int(n_iov), off_t(off));
        } else {
            r = plain ? ::pwrite(o.fd, iov[0].iov_base, iov[0].iov_len, off_t(off))
                      : ::pwritev(o.fd, iov, int(n_iov), off_t(off));
        }
        on_result(op_index, r < 0 ? -int64_t(errno) : int64_t(r));
        return;
    }
    io_uring_sqe * sqe = io_uring_get_sqe(ring_.get());
    HILL_ASSERT(sqe != nullptr);  // never more in flight than queue_depth entries
    if (o.kind == io_op::read) {
        if (plain) {
            io_uring_prep_read(sqe, o.fd, iov[0].iov_base, unsigned(iov[0].iov_len), off);
        } else {
            io_uring_prep_readv(sqe, o.fd, iov, n_iov, off);
        }
    } else {
        if (plain) {
            io_uring_prep_write(sqe, o.fd, iov[0].iov_base, unsigned(iov[0].iov_len), off);
        } else {
            io_uring_prep_writev(sqe, o.fd, iov, n_iov, off);
        }
    }
    io_uring_sqe_set_data64(sqe, op_index);
    ++n_inflight_;
}

void io_queue::fail_from(op & o, int64_t result) {
    for (; o.part_cur < o.p1; ++o.part_cur) {
        results_[order_[o.part_cur]] = result;
        --n_pending_;
        ++stats_.n_failed;
    }
}

void io_queue::on_result(uint32_t op_index, int64_t result) {
    op & o = ops_[op_index];
    const uint64_t asked = o.size_bytes - o.from;
    if (params_.fault_hook) {
        const io_issue is{
            o.kind, o.fd, o.offset + o.from, asked, &iov_[o.iov_first], int(o.p1 - o.iov_first), o.p1 - o.iov_first};
        result = params_.fault_hook(is, result);
    }
    if (result == -EINTR || result == -EAGAIN) {
        ready_.push_back(op_index);
        return;
    }
    if (result < 0) {
        if (o.p1 - o.part_cur > 1) {
            // Retry the parts one by one: only the request that covers the bad range should fail.
            ++stats_.n_splits;
            const op parent = o;  // ops_.push_back below may move `o`
            for (uint32_t k = parent.part_cur; k < parent.p1; ++k) {
                ready_.push_back(uint32_t(ops_.size()));
                ops_.push_back(op::of_request(reqs_[order_[k]], k));
            }
            return;
        }
        fail_from(o, result);
        return;
    }
    if (result == 0) {
        // Nothing moved: a read hit the end of the file inside the range; a write made no progress.
        fail_from(o, o.kind == io_op::read ? -ENODATA : -EIO);
        return;
    }
    HILL_ASSERT(uint64_t(result) <= asked);
    o.done = std::max(o.done, o.from + uint64_t(result));
    while (o.part_cur < o.p1) {
        const io_request & r = reqs_[order_[o.part_cur]];
        if (o.part_cur_start + r.size_bytes > o.done) break;
        results_[order_[o.part_cur]] = int64_t(r.size_bytes);
        (r.op == io_op::read ? stats_.bytes_read : stats_.bytes_written) += r.size_bytes;
        --n_pending_;
        o.part_cur_start += r.size_bytes;
        ++o.part_cur;
    }
    if (o.done == o.size_bytes) return;
    // Short transfer: resubmit the remainder, from a 4096-aligned file offset when that moves forward.
    const uint64_t abs_aligned = (o.offset + o.done) / direct_align * direct_align;
    uint64_t resume = o.done;
    if (abs_aligned >= o.offset && abs_aligned - o.offset > o.from) resume = abs_aligned - o.offset;
    o.from = resume;
    ++stats_.n_remainders;
    ready_.push_back(op_index);
}

size_t io_queue::run(std::span<const io_request> reqs, std::span<io_completion> out) {
    HILL_ASSERT(out.size() == reqs.size());
    start(reqs, true);
    return finish(out);
}

void io_queue::start(std::span<const io_request> reqs, bool sort_by_offset) {
    HILL_ASSERT(!busy_);
    const size_t n = reqs.size();
    HILL_ASSERT(n < std::numeric_limits<uint32_t>::max() / 2);
    reqs_ = reqs;
    busy_ = true;
    stats_.n_requests += n;
    n_failed_at_start_ = stats_.n_failed;

    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0u);
    const bool coalesce = params_.max_coalesce_bytes > 0;
    if (coalesce && sort_by_offset) {
        std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
            const io_request & x = reqs[a];
            const io_request & y = reqs[b];
            if (x.fd != y.fd) return x.fd < y.fd;
            if (x.op != y.op) return x.op < y.op;
            return x.offset < y.offset;
        });
    }
    results_.assign(n, pending_result);
    iov_.resize(n);
    ops_.clear();
    ops_.reserve(2 * n);  // initial ops + one per request after splits: no reallocation while running
    ready_.clear();
    ready_head_ = 0;
    n_pending_ = 0;
    n_inflight_ = 0;
    n_done_prefix_ = 0;

    bool can_extend = false;  // the last op ends at position k - 1 and may take part k
    for (uint32_t k = 0; k < n; ++k) {
        const io_request & r = reqs[order_[k]];
        if (r.size_bytes == 0) {
            results_[order_[k]] = 0;
            can_extend = false;
            continue;
        }
        ++n_pending_;
        if (can_extend && coalesce) {
            op & last = ops_.back();
            if (last.fd == r.fd && last.kind == r.op && last.offset + last.size_bytes == r.offset &&
                last.size_bytes + r.size_bytes <= params_.max_coalesce_bytes && last.p1 - last.p0 < max_iov_per_op) {
                last.size_bytes += r.size_bytes;
                last.p1 = k + 1;
                ++stats_.n_coalesced;
                continue;
            }
        }
        ops_.push_back(op::of_request(r, k));
        ready_.push_back(uint32_t(ops_.size() - 1));
        can_extend = true;
    }
    if (backend_ == io_backend::uring) pump(false);
}

void io_queue::pump(bool block) {
    if (backend_ == io_backend::sync) {
        // Runs the next ready operation: it completes inside issue().
        if (ready_head_ < ready_.size()) issue(ready_[ready_head_++]);
        return;
    }
    for (;;) {
        while (ready_head_ < ready_.size() && n_inflight_ < params_.queue_depth) issue(ready_[ready_head_++]);
        if (ready_head_ == ready_.size()) {
            ready_.clear();
            ready_head_ = 0;
        }
        HILL_ASSERT(n_inflight_ > 0 || n_pending_ == 0);
        if (n_inflight_ == 0) return;
        const int rc = block ? io_uring_submit_and_wait(ring_.get(), 1) : io_uring_submit(ring_.get());
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            log_warn("io_uring_submit failed: {}", std::strerror(-rc));
            HILL_ASSERT(rc >= 0);
        }
        unsigned head;
        unsigned n_seen = 0;
        io_uring_cqe * cqe;
        io_uring_for_each_cqe(ring_.get(), head, cqe) {
            ++n_seen;
            --n_inflight_;
            on_result(uint32_t(io_uring_cqe_get_data64(cqe)), cqe->res);
        }
        io_uring_cq_advance(ring_.get(), n_seen);
        // Completions made room (and retries or remainders may have made work): go round to refill
        // and submit, so that the queue stays full while the caller computes.
        if (n_seen == 0 || ready_head_ == ready_.size()) return;
        block = false;
    }
}

size_t io_queue::wait(size_t at_least) {
    HILL_ASSERT(busy_ && at_least <= reqs_.size());
    const auto advance = [this] {
        while (n_done_prefix_ < reqs_.size() && results_[n_done_prefix_] != pending_result) ++n_done_prefix_;
    };
    advance();
    while (n_done_prefix_ < at_least) {
        pump(true);
        advance();
    }
    if (backend_ == io_backend::uring && n_pending_ > 0) {
        pump(false);
        advance();
    }
    return n_done_prefix_;
}

int64_t io_queue::result(size_t i) const {
    HILL_ASSERT(busy_ && i < n_done_prefix_);
    return results_[i];
}

size_t io_queue::finish(std::span<io_completion> out) {
    if (!busy_) return 0;
    const size_t n = reqs_.size();
    HILL_ASSERT(out.empty() || out.size() == n);
    wait(n);
    for (size_t i = 0; i < out.size(); ++i) out[i] = {reqs_[i].user_data, results_[i]};
    reqs_ = {};
    busy_ = false;
    return size_t(stats_.n_failed - n_failed_at_start_);
}

}  // namespace hill
