// A bounded blocking FIFO between threads (the storage device emulator's stages and the host): push
// waits while the queue is full (back-pressure), pop while it is empty. stop() wakes every waiter and
// makes push and pop fail until restart(), so that a pass can be abandoned (cancellation) without
// leaving a thread blocked. Items are small values (indices of preallocated buffers): the queue
// allocates only in its constructor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace hill::csd {

template <class T>
class bounded_queue {
public:
    explicit bounded_queue(size_t capacity) : ring_(capacity) {}

    size_t capacity() const { return ring_.size(); }

    // Appends x, waiting while the queue is full. Returns false when stopped (x is not queued).
    // waited_us, when given, receives the microseconds spent waiting for room.
    bool push(const T & x, uint64_t * waited_us = nullptr) {
        std::unique_lock lock(m_);
        if (n_ == ring_.size() && !stopped_) {
            const auto t0 = std::chrono::steady_clock::now();
            not_full_.wait(lock, [&] { return n_ < ring_.size() || stopped_; });
            if (waited_us != nullptr) {
                *waited_us = uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now() - t0).count());
            }
        }
        if (stopped_) return false;
        ring_[(head_ + n_) % ring_.size()] = x;
        ++n_;
        not_empty_.notify_one();
        return true;
    }

    // Takes the oldest item, waiting while the queue is empty. Returns false when stopped.
    bool pop(T & out) {
        std::unique_lock lock(m_);
        not_empty_.wait(lock, [&] { return n_ > 0 || stopped_; });
        if (stopped_) return false;
        out = ring_[head_];
        head_ = (head_ + 1) % ring_.size();
        --n_;
        not_full_.notify_one();
        return true;
    }

    // pop() that gives up after `timeout`: 1 when an item was taken, 0 on timeout, -1 when stopped.
    template <class Rep, class Period>
    int pop_for(T & out, std::chrono::duration<Rep, Period> timeout) {
        std::unique_lock lock(m_);
        if (!not_empty_.wait_for(lock, timeout, [&] { return n_ > 0 || stopped_; })) return 0;
        if (stopped_) return -1;
        out = ring_[head_];
        head_ = (head_ + 1) % ring_.size();
        --n_;
        not_full_.notify_one();
        return 1;
    }

    // Wakes every waiter; push and pop fail until restart().
    void stop() {
        std::lock_guard lock(m_);
        stopped_ = true;
        not_empty_.notify_all();
        not_full_.notify_all();
    }

    // Empties the queue and accepts pushes and pops again.
    void restart() {
        std::lock_guard lock(m_);
        head_ = n_ = 0;
        stopped_ = false;
    }

private:
    std::mutex m_;
    std::condition_variable not_empty_, not_full_;
    std::vector<T> ring_;
    size_t head_ = 0, n_ = 0;
    bool stopped_ = false;
};

}  // namespace hill::csd
