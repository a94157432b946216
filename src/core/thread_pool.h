// The process's one pool of compute threads (`-t N`). OpenBLAS runs single-threaded inside it
// (see compute/blas.h), so there is never more than one busy thread per pool slot.
//
// run(fn) calls fn(ith, nth) on every thread, the caller being thread 0, and returns when all
// are done. Calls must not nest.
//
// Waking: decode calls run() ~40 times per token, so a futex wake-up per call and thread was ~8% of
// decode time. Idle workers and the caller waiting for them spin for up to spin_us on the atomic
// generation / pending count before blocking on the condition variables; the blocking path is kept
// for long idle periods, and a notify is only issued when someone is (about to be) asleep. Exceptions must not escape fn (STYLE.md: no exception crosses a
// thread): a throwing fn aborts the process.
//
// Tracing (core/trace.h): the workers' tracks are named "pool worker <ith>"; while tracing is on,
// each worker records its share of a job as a span (category "pool") named after the caller's
// innermost open scope (trace_current_name(): "qkv", "score host", ...), or "pool job".
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hill {

// Called before each worker thread is started, with its index ith in [1, n_threads); it may throw
// std::system_error as std::thread does when the system refuses a thread (tests inject that failure).
using thread_start_hook = std::function<void(int ith)>;

class thread_pool {
public:
    // n_threads >= 1 (asserted). Errors: the system refuses to start a thread (a process limit such
    // as RLIMIT_NPROC, memory): the threads already started are stopped and joined, and hill::error
    // (exit_code::bad_input) names the thread, how many were asked for (-t) and started, and why.
    explicit thread_pool(int n_threads, const thread_start_hook & on_start = {});
    ~thread_pool();
    thread_pool(const thread_pool &) = delete;
    thread_pool & operator=(const thread_pool &) = delete;

    int n_threads() const { return n_threads_; }

    void run(const std::function<void(int ith, int nth)> & fn);

    // Work, in multiply-adds (or bytes moved, for a copy), below which a job runs on the calling
    // thread alone. Handing a job to the pool costs the caller ~1 µs while the workers spin and
    // ~15 µs once they sleep (the 2-vCPU test VM: a futex wake-up and the wait for it), and a job
    // this small takes one thread some 20 µs at most, so a second thread saves less than the
    // hand-off risks. A tiny model's decode is all such jobs: with every job sent to the pool,
    // stories260K (dim 64) decoded 2–5× slower with -t 2 than with -t 1. Measured over model
    // widths: docs/benchmarks.md, "Small jobs and the thread pool".
    static constexpr int64_t min_parallel_work = int64_t(1) << 18;

    // run(fn), or fn(0, 1) on the calling thread when `work` (the whole job's) is below
    // min_parallel_work. For jobs whose result does not depend on the thread count.
    void run(const std::function<void(int ith, int nth)> & fn, int64_t work);

    // Splits [0, n) into n_threads contiguous ranges of whole `grain`s and calls fn(i0, i1) for
    // each non-empty one — or fn(0, n) on the calling thread where that is one grain, or where
    // n · work_per_item (the work of one item, as in min_parallel_work) is below min_parallel_work.
    // The default work_per_item counts every job as large.
    void parallel_for(int64_t n, const std::function<void(int64_t i0, int64_t i1)> & fn, int64_t grain = 1,
                      int64_t work_per_item = min_parallel_work);

private:
    void worker(int ith);
    void stop_workers();  // wakes every worker to return, and joins them

    int n_threads_;
    std::vector<std::thread> workers_;
    // The atomics below are read lock-free by spinning threads; a thread blocks on a condition
    // variable only after registering itself (n_sleeping_, caller_waiting_) under mutex_, and the
    // other side notifies under mutex_ when it sees that registration (seq_cst on both sides).
    std::mutex mutex_;
    std::condition_variable cv_start_;
    std::condition_variable cv_done_;
    std::atomic<const std::function<void(int, int)> *> job_{nullptr};  // published by generation_
    std::atomic<const char *> job_name_{nullptr};  // tracing: the caller's scope, published by generation_
    std::atomic<uint64_t> generation_{0};   // bumped by run() after job_ is set
    std::atomic<int> n_pending_{0};         // workers still running the current job
    std::atomic<int> n_sleeping_{0};        // workers blocked (or about to block) on cv_start_
    std::atomic<bool> caller_waiting_{false};  // run() blocked (or about to block) on cv_done_
    std::atomic<bool> stop_{false};
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_core_count();

}  // namespace hill
