#include "core/thread_pool.h"

#include "core/error.h"
#include "core/trace.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <utility>

namespace hill {

thread_pool::thread_pool(int n_threads, const thread_start_hook & on_start) : n_threads_(n_threads) {
    HILL_ASSERT(n_threads >= 1);
    workers_.reserve(size_t(n_threads - 1));
    for (int i = 1; i < n_threads; ++i) {
        try {
            if (on_start) on_start(i);
            workers_.emplace_back([this, i] { worker(i); });
        } catch (const std::system_error & e) {
            // Without this, the joinable threads already started would call std::terminate as the
            // vector is destroyed. Numbered from 1, the caller being thread 1.
            stop_workers();
            throw error(exit_code::bad_input,
                        fmt::format("cannot start compute thread {} of {} (-t {}): {}; only {} started: lower -t, or "
                                    "raise the limit on processes and threads (ulimit -u)",
                                    i + 1, n_threads, n_threads, e.code().message(), i));
        }
    }
}

thread_pool::~thread_pool() { stop_workers(); }

void thread_pool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true);
    }
    cv_start_.notify_all();
    for (auto & t : workers_) t.join();
    workers_.clear();
}

namespace {

// How long a waiting thread polls before it blocks: longer than the gaps between the run() calls
// of one decode step, short enough not to burn a core when the pool is idle.
constexpr auto spin_time = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// Polls done() until it is true (returns true) or spin_time has passed (returns false).
template <class F>
bool spin_until(F done) {
    const auto deadline = std::chrono::steady_clock::now() + spin_time;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (done()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() >= deadline) return done();
    }
}

}  // namespace

void thread_pool::worker(int ith) {
    char name[32];
    *fmt::format_to_n(name, sizeof(name) - 1, "pool worker {}", ith).out = '\0';
    trace_set_thread_name(name);
    uint64_t seen = 0;
    for (;;) {
        const auto started = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(started)) {
            std::unique_lock<std::mutex> lock(mutex_);
            n_sleeping_.fetch_add(1);  // seq_cst: ordered before the predicate's loads
            cv_start_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
            n_sleeping_.fetch_sub(1);
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = generation_.load(std::memory_order_acquire);
        {
            const char * job_name = job_name_.load(std::memory_order_relaxed);
            trace_scope span(job_name != nullptr ? job_name : "pool job", "pool");
            (*job_.load(std::memory_order_relaxed))(ith, n_threads_);
        }
        // seq_cst RMW, ordered before the load of caller_waiting_ (see run()).
        if (n_pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
            std::lock_guard<std::mutex> lock(mutex_);
            cv_done_.notify_one();
        }
    }
}

void thread_pool::run(const std::function<void(int, int)> & fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    HILL_ASSERT(job_.load(std::memory_order_relaxed) == nullptr);  // no nested run()
    job_.store(&fn, std::memory_order_relaxed);
    job_name_.store(trace_enabled() ? trace_current_name() : nullptr, std::memory_order_relaxed);
    n_pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1);  // seq_cst: publishes job_ and n_pending_; ordered before n_sleeping_
    if (n_sleeping_.load() > 0) {
        // A worker that registered has either blocked (so it gets the notify) or not yet
        // checked its predicate (which it does under mutex_, and will see the new generation).
        { std::lock_guard<std::mutex> lock(mutex_); }
        cv_start_.notify_all();
    }
    fn(0, n_threads_);
    if (!spin_until([&] { return n_pending_.load(std::memory_order_acquire) == 0; })) {
        std::unique_lock<std::mutex> lock(mutex_);
        caller_waiting_.store(true);  // seq_cst: ordered before the predicate's load
        cv_done_.wait(lock, [&] { return n_pending_.load() == 0; });
        caller_waiting_.store(false);
    }
    job_.store(nullptr, std::memory_order_relaxed);
}

void thread_pool::run(const std::function<void(int, int)> & fn, int64_t work) {
    if (work < min_parallel_work) {
        fn(0, 1);
        return;
    }
    run(fn);
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> & fn, int64_t grain,
                               int64_t work_per_item) {
    if (n <= 0) return;
    HILL_ASSERT(grain >= 1 && work_per_item >= 0);
    // n · work_per_item < min_parallel_work, without overflow.
    const bool small = n <= (min_parallel_work - 1) / std::max<int64_t>(work_per_item, 1);
    if (n <= grain || small) {
        fn(0, n);
        return;
    }
    const int64_t n_grains = (n + grain - 1) / grain;
    run([&](int ith, int nth) {
        const int64_t g0 = n_grains * ith / nth;
        const int64_t g1 = n_grains * (ith + 1) / nth;
        const int64_t i0 = g0 * grain;
        const int64_t i1 = std::min(n, g1 * grain);
        if (i0 < i1) fn(i0, i1);
    });
}

int physical_core_count() {
    // Count distinct (physical id, core id) pairs; fall back to the logical count.
    std::ifstream in("/proc/cpuinfo");
    std::set<std::pair<std::string, std::string>> cores;
    std::string line, phys = "0";
    while (std::getline(in, line)) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
        const std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
        if (key == "physical id") phys = val;
        if (key == "core id") cores.emplace(phys, val);
    }
    const int logical = int(std::thread::hardware_concurrency());
    if (!cores.empty() && int(cores.size()) <= logical) return int(cores.size());
    return logical > 0 ? logical : 1;
}

}  // namespace hill
