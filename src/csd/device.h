// The storage device that holds the cold pool (DESIGN.md §5; HillInfer paper §4.2 "Hierarchical
// Importance Evaluation", §4.4 "CSD-based Evaluation Configuration").
//
// A decode step (sched/decode_step.h) asks the device to score one sequence's tokens in written cold
// pages against the query, and the device streams back score blocks (csd/score_block.h) while the host
// scores what is in DRAM. The step then asks the device for the selected cold tokens' K and V, and
// attends to its hot winners while they come. What a pass covers is plain data: a device_pass built
// from the step's page table — the sequence's cold-log groups (page ids) and the positions wanted.
// Implementations:
//   plain     (plain_ssd.h) no near-data compute: the host reads the key pages and scores them itself,
//             on the calling thread (the baselines' situation: every cold key crosses the link);
//   emulator  (emulator.h) a software SmartSSD: its own threads and io_uring read the pages through
//             its own cold_reader, its HLS kernel (csd/hls) scores them, and only score blocks and
//             selected KV cross the "link".
// Both obey a device profile (device_profile.h).
//
// One pass at a time: begin, then next() until it says the pass is complete, or cancel(). Results come
// by pull: score_next() / read_next() return the next block or batch (valid until the next call). When
// storage_params::stop_requested turns true while the host waits, the pass is cancelled and next()
// throws exit_code::interrupted. A device error (a failed or corrupt page read) fails the pass: next()
// throws hill::error naming the layer, page and file, and the device is ready for the next pass. The
// cold pool must not change between begin and the end of the pass (the owner thread is in the step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "compute/attention.h"
#include "core/thread_pool.h"
#include "csd/device_profile.h"
#include "csd/score_block.h"
#include "kv/cold_gather.h"
#include "kv/cold_pool.h"
#include "score/host_scorer.h"

namespace hill::csd {

enum class storage_kind { plain, emulator };

std::string_view name(storage_kind k);
// "plain" or "emulator"; anything else is a usage error listing them.
storage_kind parse_storage(std::string_view s);

struct storage_params {
    storage_kind kind = storage_kind::plain;
    device_profile profile;        // caps (device_profile.h); default: uncapped
    int32_t block_tokens = 1024;   // n: tokens per score block (6 KiB + 8 B at one score per token)
    bool prefetch = true;          // plain: read the hinted tokens ahead (the pipeline; false ignores the hints)
    // plain: the most K and V bytes of a read pass's misses that its fetcher thread reads (the misses'
    // rows are attended as they arrive); misses beyond it are read on the calling thread as reached.
    size_t fetch_bytes = size_t(32) << 20;
    io_fault_hook io_faults;       // tests: injected results of the device's own reads
    // Polled while the host waits on the device (every 20 ms at most): true abandons the pass, and
    // next() throws hill::error(exit_code::interrupted). The CLI passes its Ctrl-C flag.
    std::function<bool()> stop_requested;
};

// Largest score block: 65536 tuples (384 KiB at one score per token); the emulator keeps 8 in flight.
constexpr int32_t max_block_tokens = 65536;

// What one pass covers: positions of one sequence's layer in written cold pages. Position t is row
// t % page_tokens of group t / page_tokens, whose pages are groups[t / page_tokens] (kv/cold_writer.h).
struct device_pass {
    int il = 0;
    int seq = 0;  // the sequence (keys prefetches)
    int64_t page_tokens = 0;
    std::span<const std::pair<uint32_t, uint32_t>> groups;  // [n_groups] (K page, V page)
    std::span<const int32_t> positions;                     // ascending, each < n_groups · page_tokens
};

// Counters of a device, summed over its passes. Link = the device's host interface.
struct device_counters {
    uint64_t n_score_passes = 0;
    uint64_t n_read_passes = 0;
    uint64_t n_cancelled = 0;         // passes abandoned by cancel()
    uint64_t n_errors = 0;            // passes failed by a device error
    uint64_t tokens_scored = 0;       // cold tokens scored
    uint64_t tokens_read = 0;         // cold tokens whose K and V were returned
    uint64_t tokens_prefetched = 0;   // cold tokens read ahead of their read pass (plain: cold_prefetch)
    uint64_t prefetch_hits = 0;       // of the tokens returned, those found read ahead
    uint64_t score_blocks = 0;        // score blocks sent
    uint64_t internal_read_bytes = 0; // bytes read from flash inside the device
    uint64_t link_score_bytes = 0;    // link bytes of scoring: query in, score blocks out (plain: the key pages)
    uint64_t link_kv_bytes = 0;       // link bytes of K and V returned (plain: the pages read)
    uint64_t t_read_us = 0;           // device time reading flash (plain: the host's page reads)
    uint64_t t_kernel_us = 0;         // device time scoring and packing (plain: the host scoring cold keys)
    uint64_t t_throttle_us = 0;       // time waited on the profile's token buckets
    uint64_t t_backpressure_us = 0;   // time the device waited for room in the host queue
    uint64_t t_host_wait_us = 0;      // time the host waited for the device's blocks and KV (emulator)
    uint64_t t_pass_us = 0;           // emulator: wall time of its passes, from begin until it posted the pass's end,
                                      // less its back-pressure: the device path's time (the planner's T_csd,
                                      // sched/planner.h); plain: 0 (its passes run on the host's thread)
};

class device {
public:
    virtual ~device() = default;
    virtual storage_kind kind() const = 0;

    // Starts scoring pass.positions against the query prepared in `scorer` (host_scorer::prepare_query;
    // the scorer's params decide precision, aggregation and granularity; it must outlive the pass).
    // emulator: returns at once, the device works meanwhile.
    virtual void score_begin(const device_pass & pass, host_scorer & scorer) = 0;
    // The next score block of the pass, or nullptr when every position has been scored (each in
    // exactly one block). Valid until the next call.
    virtual const score_block_view * score_next() = 0;

    // Starts reading the K and V of pass.positions (copied).
    virtual void read_begin(const device_pass & pass) = 0;
    // The next batch of the pass's tokens (their K and V rows), false when all were returned (each once).
    // Valid until the next call.
    virtual bool read_next(kv_batch & out) = 0;

    // Abandons the pass in flight, if any: returns once the device is idle and ready for a new pass.
    virtual void cancel() = 0;

    // A hint (the pipeline, HillInfer paper §4.3): a read pass of (pass.seq, pass.il) later in this
    // step — or, with next_step, in the next step — will probably want pass.positions (the previous
    // step's selection there). The device may read them ahead while the host works; what a read pass
    // returns does not depend on it. A hint for the next step outlives end_step(): the owner must
    // drop_prefetches() before any hinted page is freed (cold_logs::set_before_free). Returns at once,
    // with the number of positions queued (0: the hint was not taken — no room, or one for the same
    // sequence and layer is queued already). Default: ignored, 0.
    virtual int64_t prefetch(const device_pass & pass, bool next_step) {
        (void)pass;
        (void)next_step;
        return 0;
    }
    // Whether prefetch() can read anything ahead (plain: unless storage_params::prefetch is off). Default:
    // false.
    virtual bool reads_ahead() const { return false; }
    // The step is over: forgets its prefetches, but those for the next step.
    virtual void end_step() {}
    // Forgets every prefetch, the next step's too: a failed step, a change of policy, and before any
    // cold page is freed (cold_logs::set_before_free).
    virtual void drop_prefetches() {}

    virtual device_counters counters() const = 0;
    const device_profile & profile() const { return profile_; }

protected:
    explicit device(const device_profile & p) : profile_(p) {}
    device_profile profile_;
};

// Cancels the device's pass unless done() was called: a step that throws between a begin and the end
// of its pass leaves the device idle.
class device_pass_guard {
public:
    explicit device_pass_guard(device & d) : d_(d) {}
    ~device_pass_guard() {
        if (armed_) d_.cancel();
    }
    device_pass_guard(const device_pass_guard &) = delete;
    device_pass_guard & operator=(const device_pass_guard &) = delete;
    void done() { armed_ = false; }

private:
    device & d_;
    bool armed_ = true;
};

// What a device can score: the emulator's kernel scores INT8 or INT4 keys against an INT8 query; the
// plain SSD scores at any precision on the host.
bool scores_at(storage_kind k, const score_params & p);
// Usage error when !scores_at(k, p), naming the flags.
void check_scoring(storage_kind k, const score_params & p);

// A plain SSD or the emulator over `pool` (nullptr: no cold tier; the device then never has a pass).
// s: the layer shape; layout: the KV rows; pool: the host threads (plain scores on them).
// Errors: block_tokens outside [1, max_block_tokens], the emulator's kernel bounds (head_dim <= 256,
// n_head <= 128, n_head_kv <= 64; exit_code::usage); the device cannot open the cold pool's files
// (bad_input).
std::unique_ptr<device> make_device(const storage_params & p, const cold_pool * pool, const kv_layout & layout,
                                    const attention_shape & s, thread_pool & threads);

}  // namespace hill::csd
