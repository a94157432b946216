#include "core/thread_pool.h"

#include "core/error.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace hill {

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads) {
    HILL_ASSERT(n_threads >= 1);
    workers_.reserve(size_t(n_threads - 1));
    for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    cv_start_.notify_all();
    for (auto & t : workers_) t.join();
}

void thread_pool::worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int, int)> * job = nullptr;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            cv_start_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
        }
        (*job)(ith, n_threads_);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--n_pending_ == 0) cv_done_.notify_one();
        }
    }
}

void thread_pool::run(const std::function<void(int, int)> & fn) {
    if (n_threads_ == 1) {
        fn(0, 1);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        HILL_ASSERT(job_ == nullptr);  // no nested run()
        job_ = &fn;
        n_pending_ = n_threads_ - 1;
        ++generation_;
    }
    cv_start_.notify_all();
    fn(0, n_threads_);
    std::unique_lock<std::mutex> lock(mutex_);
    cv_done_.wait(lock, [&] { return n_pending_ == 0; });
    job_ = nullptr;
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)> & fn, int64_t grain) {
    if (n <= 0) return;
    HILL_ASSERT(grain >= 1);
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
