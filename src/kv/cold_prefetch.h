// Reads of cold tokens ahead of need, on a thread of its own: the pipeline of HillInfer paper §4.3
// (APP: the transfers of layer il + 1 overlap the work of layer il). The decode step asks for the
// tokens a layer's read pass will probably want — the previous step's selection of that layer, since
// consecutive steps select about 90% of the same tokens (docs/benchmarks.md) — while the host scores
// and attends the layer before; the read pass then takes the rows it finds here and reads only the
// rest (csd/plain_ssd.h). A prefetch is a hint and never wrong: rows it read but nobody asks for are
// dropped, rows asked for but not here are read then, and a failed prefetch read only loses the hint
// (the read pass reads those tokens itself and reports a real fault).
//
//   cold_prefetch p(pool, layout, 2, 32 << 20);
//   p.start(key, log.groups, predicted);         // returns at once
//   ... host work ...
//   if (const prefetched * r = p.wait(key)) { ... rows of r->positions in r->view ... }
//   p.release(key);
//
// A job's rows become available in position order as its pages arrive (wait_rows), so that a reader
// can use the first ones while the rest are read: the plain SSD's read pass runs its misses as a job
// of a second cold_prefetch and attends rows as they come (csd/plain_ssd.h).
//
// Jobs run in the order they were started, one at a time, through the prefetcher's own cold_reader
// (own io_uring and descriptors). Memory: n_slots buffers of at most slot_bytes of K and V rows each,
// grown to what their jobs need; a job longer than its slot reads only its first positions.
//
// Thread-safety: start, wait, release, end_step and drop_all are called by one owner thread (the decode
// step's). The cold pool must not free or rewrite the pages of a job's groups until the job is released
// or dropped: a job for the next step outlives its step, so the owner drops every job before a page
// leaves a cold log (cold_logs::set_before_free).
#pragma once

#include "compute/attention.h"
#include "core/aligned_buffer.h"
#include "kv/cold_reader.h"
#include "kv/kv_layout.h"

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

namespace hill {

class cold_gather;

// What a job read: position positions[j] is row j of view (K and V).
struct prefetched {
    std::vector<int32_t> positions;  // ascending
    kv_view view;
    uint64_t bytes_read = 0;         // pages read for it (final once the job has ended: wait(), release())
};

class cold_prefetch {
public:
    // Errors (hill::error, bad_input): the pool's files cannot be opened for reading (cold_reader).
    // thread_name: the worker's name in traces.
    cold_prefetch(const cold_pool & pool, const kv_layout & layout, int n_slots, size_t slot_bytes,
                  const io_queue_params & io = {}, const char * thread_name = "cold prefetch");
    // Drops every job (waits for the one being read).
    ~cold_prefetch();
    cold_prefetch(const cold_prefetch &) = delete;
    cold_prefetch & operator=(const cold_prefetch &) = delete;

    // Queues a read of the K and V of `positions` (ascending, each in a written group of `groups`,
    // cold_log_view::groups; both copied; beyond a slot's rows, the first ones) under `key`. Returns
    // the rows queued: 0 (nothing queued) when positions is empty, every slot is taken or key has a
    // job already. next_step: the job survives the next end_step() (a hint for the next decode step).
    int64_t start(uint64_t key, std::span<const std::pair<uint32_t, uint32_t>> groups,
                  std::span<const int32_t> positions, bool next_step = false);
    // The positions queued under key (ascending: what wait() returns the rows of, unless the reads
    // fail), without waiting for the job; empty when key has no job. Valid until release(key),
    // end_step() or drop_all(). Lets the owner read the tokens the job lacks while the job runs.
    std::span<const int32_t> planned(uint64_t key);
    // Waits for key's job and returns what it read (valid until release(key), end_step() or drop_all()); nullptr
    // when key has no job, or its reads failed.
    const prefetched * wait(uint64_t key);
    // Waits until key's job has read its first n rows (n <= its positions), or has ended, and returns
    // the job with `ready` set to the rows read so far (>= n; rows [0, ready) of its view are final
    // and the worker writes none of them again) — the rows arrive in position order, so a reader
    // uses the first ones while the rest are read. nullptr when key has no job or its reads failed
    // before row n. Valid as wait()'s result; its bytes_read is final only once the job has ended.
    const prefetched * wait_rows(uint64_t key, int64_t n, int64_t & ready);
    // Frees key's slot (waits for its job when it is being read) and returns the bytes its job read.
    // No job: nothing happens (0).
    uint64_t release(uint64_t key);
    // The decode step is over: forgets its jobs as drop_all does, but those started with next_step,
    // which become jobs like the others (the next end_step forgets them unless they are released before).
    // Returns the bytes read for the jobs forgotten that nobody took.
    uint64_t end_step();
    // Forgets every job: queued ones are not read, the one being read is waited for. Returns the bytes
    // read for jobs nobody took (done, not released).
    uint64_t drop_all();

private:
    enum class state : uint8_t { free, queued, running, done };
    struct slot {
        state st = state::free;
        uint64_t key = 0;
        uint64_t order = 0;      // start order: jobs run first come first served
        bool next_step = false;  // kept by end_step() once
        std::vector<std::pair<uint32_t, uint32_t>> groups;
        prefetched result;
        bool failed = false;
        int64_t ready = 0;       // rows read so far (in position order)
        aligned_buffer k, v;  // layout type [capacity, n_embd_kv]
        int64_t capacity = 0;
    };
    slot * find(uint64_t key);
    // Frees the slots `drop` picks (waiting for those being read); returns the bytes read for the
    // done ones.
    template <typename Pred>
    uint64_t drop_if(Pred drop);
    void worker_main(const char * thread_name);
    void read_job(slot & s);  // on the worker, without the lock (but to publish rows read)

    kv_layout layout_;
    int64_t max_rows_ = 0;  // rows per slot
    std::unique_ptr<cold_reader> reader_;
    std::unique_ptr<cold_gather> gather_;
    std::vector<slot> slots_;
    uint64_t next_order_ = 0;
    std::mutex m_;
    std::condition_variable cv_;
    bool quit_ = false;
    std::thread worker_;
};

}  // namespace hill
