#include "kv/cold_prefetch.h"

#include "core/error.h"
#include "core/trace.h"
#include "kv/cold_gather.h"

#include <algorithm>
#include <cstring>

namespace hill {

cold_prefetch::cold_prefetch(const cold_pool & pool, const kv_layout & layout, int n_slots, size_t slot_bytes,
                             const io_queue_params & io, const char * thread_name)
    : layout_(layout), slots_(size_t(n_slots)) {
    HILL_ASSERT(n_slots >= 1);
    max_rows_ = std::max<int64_t>(1, int64_t(slot_bytes / layout.token_layer_bytes()));
    reader_ = std::make_unique<cold_reader>(pool, io);  // used by the worker only
    gather_ = std::make_unique<cold_gather>(*reader_, layout, true);
    worker_ = std::thread([this, thread_name] { worker_main(thread_name); });
}

cold_prefetch::~cold_prefetch() {
    drop_all();
    {
        std::lock_guard lock(m_);
        quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
}

cold_prefetch::slot * cold_prefetch::find(uint64_t key) {
    for (slot & s : slots_) {
        if (s.st != state::free && s.key == key) return &s;
    }
    return nullptr;
}

int64_t cold_prefetch::start(uint64_t key, std::span<const std::pair<uint32_t, uint32_t>> groups,
                             std::span<const int32_t> positions, bool next_step) {
    if (positions.empty()) return 0;
    slot * s = nullptr;
    {
        std::lock_guard lock(m_);
        if (find(key) != nullptr) return 0;
        for (slot & c : slots_) {
            if (c.st == state::free) {
                s = &c;
                break;
            }
        }
        if (s == nullptr) return 0;
    }
    // A free slot is the owner's alone: fill it, then hand it to the worker.
    const int64_t n = std::min<int64_t>(int64_t(positions.size()), max_rows_);
    if (s->capacity < n) {
        const int64_t cap = std::min(max_rows_, std::max(n, 2 * s->capacity));
        s->k = aligned_buffer(size_t(cap) * layout_.row_bytes(), aligned_buffer::uninitialized);
        s->v = aligned_buffer(size_t(cap) * layout_.row_bytes(), aligned_buffer::uninitialized);
        s->capacity = cap;
    }
    s->key = key;
    s->next_step = next_step;
    s->groups.assign(groups.begin(), groups.end());
    s->result.positions.assign(positions.begin(), positions.begin() + n);
    s->result.view = kv_view{layout_.type, s->k.data(), s->v.data(), n, layout_.n_embd_kv};
    s->result.bytes_read = 0;
    s->failed = false;
    s->ready = 0;
    {
        std::lock_guard lock(m_);
        s->order = next_order_++;
        s->st = state::queued;
    }
    cv_.notify_all();
    return n;
}

std::span<const int32_t> cold_prefetch::planned(uint64_t key) {
    std::lock_guard lock(m_);
    const slot * s = find(key);
    return s != nullptr ? std::span<const int32_t>(s->result.positions) : std::span<const int32_t>{};
}

const prefetched * cold_prefetch::wait(uint64_t key) {
    std::unique_lock lock(m_);
    slot * s = find(key);
    if (s == nullptr) return nullptr;
    cv_.wait(lock, [&] { return s->st == state::done; });
    return s->failed ? nullptr : &s->result;
}

const prefetched * cold_prefetch::wait_rows(uint64_t key, int64_t n, int64_t & ready) {
    std::unique_lock lock(m_);
    slot * s = find(key);
    ready = 0;
    if (s == nullptr) return nullptr;
    HILL_ASSERT(n <= int64_t(s->result.positions.size()));
    cv_.wait(lock, [&] { return s->ready >= n || s->st == state::done; });
    ready = s->ready;
    return ready >= n ? &s->result : nullptr;
}

uint64_t cold_prefetch::release(uint64_t key) {
    std::unique_lock lock(m_);
    slot * s = find(key);
    if (s == nullptr) return 0;
    if (s->st == state::queued) {
        s->st = state::free;
        return 0;
    }
    cv_.wait(lock, [&] { return s->st == state::done; });
    s->st = state::free;
    return s->result.bytes_read;
}

template <typename Pred>
uint64_t cold_prefetch::drop_if(Pred drop) {
    std::unique_lock lock(m_);
    for (slot & s : slots_) {
        if (s.st == state::queued && drop(s)) s.st = state::free;
    }
    cv_.wait(lock, [&] {
        return std::none_of(slots_.begin(), slots_.end(), [&](const slot & s) { return s.st == state::running && drop(s); });
    });
    uint64_t untaken = 0;
    for (slot & s : slots_) {
        if (s.st == state::free || !drop(s)) continue;
        untaken += s.result.bytes_read;  // done
        s.st = state::free;
    }
    return untaken;
}

uint64_t cold_prefetch::end_step() {
    const uint64_t untaken = drop_if([](const slot & s) { return !s.next_step; });
    std::lock_guard lock(m_);
    for (slot & s : slots_) s.next_step = false;
    return untaken;
}

uint64_t cold_prefetch::drop_all() {
    return drop_if([](const slot &) { return true; });
}

void cold_prefetch::worker_main(const char * thread_name) {
    trace_set_thread_name(thread_name);
    std::unique_lock lock(m_);
    while (true) {
        slot * next = nullptr;
        cv_.wait(lock, [&] {
            if (quit_) return true;
            next = nullptr;
            for (slot & s : slots_) {
                if (s.st == state::queued && (next == nullptr || s.order < next->order)) next = &s;
            }
            return next != nullptr;
        });
        if (quit_) return;
        next->st = state::running;
        lock.unlock();
        read_job(*next);
        lock.lock();
        next->st = state::done;
        cv_.notify_all();
    }
}

void cold_prefetch::read_job(slot & s) {
    trace_scope span("prefetch", "io", {{"tokens", int64_t(s.result.positions.size())}});
    const size_t rb = layout_.row_bytes();
    const uint64_t before = gather_->read_bytes();
    try {
        gather_->begin(s.groups, s.result.positions, true);
        kv_batch b;
        int64_t j = 0;  // positions come back in order: row j of the slot
        while (gather_->next(b)) {
            for (int64_t i = 0; i < b.view.n_kv; ++i, ++j) {
                const size_t src = size_t(b.rows != nullptr ? b.rows[i] : i) * rb;
                std::memcpy(s.k.data() + size_t(j) * rb, static_cast<const uint8_t *>(b.view.k) + src, rb);
                std::memcpy(s.v.data() + size_t(j) * rb, static_cast<const uint8_t *>(b.view.v) + src, rb);
            }
            {
                std::lock_guard lock(m_);
                s.ready = j;
            }
            cv_.notify_all();
        }
    } catch (const error &) {
        s.failed = true;  // a hint lost: the read pass reads these tokens itself and reports the fault
    }
    s.result.bytes_read = gather_->read_bytes() - before;
    span.arg("bytes", int64_t(s.result.bytes_read));
}

}  // namespace hill
