// The process's one pool of compute threads (`-t N`). OpenBLAS runs single-threaded inside it
// (see compute/blas.h), so there is never more than one busy thread per pool slot.
//
// run(fn) calls fn(ith, nth) on every thread, the caller being thread 0, and returns when all
// are done. Calls must not nest. Exceptions must not escape fn (STYLE.md: no exception crosses a
// thread): a throwing fn aborts the process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hill {

class thread_pool {
public:
    // n_threads >= 1 (asserted).
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool &) = delete;
    thread_pool & operator=(const thread_pool &) = delete;

    int n_threads() const { return n_threads_; }

    void run(const std::function<void(int ith, int nth)> & fn);

    // Splits [0, n) into n_threads contiguous ranges of whole `grain`s and calls fn(i0, i1) for
    // each non-empty one.
    void parallel_for(int64_t n, const std::function<void(int64_t i0, int64_t i1)> & fn, int64_t grain = 1);

private:
    void worker(int ith);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable cv_start_;
    std::condition_variable cv_done_;
    const std::function<void(int, int)> * job_ = nullptr;  // guarded by mutex_
    uint64_t generation_ = 0;                                // guarded by mutex_
    int n_pending_ = 0;                                      // guarded by mutex_
    bool stop_ = false;                                      // guarded by mutex_
};

// Physical cores of this machine (hyper-threads not counted), at least 1.
int physical_core_count();

}  // namespace hill
