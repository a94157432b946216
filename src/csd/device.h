// The storage device that holds the cold pool (DESIGN.md §5; HillInfer paper §4.2 "Hierarchical
// Importance Evaluation", §4.4 "CSD-based Evaluation Configuration").
//
// A decode step of policy hillinfer asks the device to score the keys of a layer's written cold pages
// against the query, and the device streams back score blocks (csd/score_block.h) while the host
// scores its own tokens; the host merges both into a running top-k (score/selector.h). The step then
// asks the device for the selected cold tokens' FP16 K and V, and attends to its hot winners while
// they come. Dense policies read every cold token through the device the same way. Implementations:
//   plain     (plain_ssd.h) no near-data compute: the host reads the key pages and scores them itself,
//             on the calling thread (the baselines' situation: every cold key crosses the link);
//   emulator  (emulator.h) a software SmartSSD: its own threads and io_uring read the pages, its HLS
//             kernel (csd/hls) scores them, and only score blocks and selected KV cross the "link".
// Both obey a device profile (device_profile.h). Writes and moves go through the device (append, move):
// the KV store (kv/kv_store.h) places the KV and writes the cold pages, and the device counts what
// its flash and link carried; prefill reads the tiers through the store.
//
// One pass at a time: begin, then drain (which returns when the pass is complete), or cancel(). When
// storage_params::stop_requested turns true during a drain, the pass is cancelled and the drain throws
// exit_code::interrupted. A device error (a failed or corrupt page read) fails the pass: drain throws hill::error naming the
// layer, page and file, and the device is ready for the next pass. The store must not change between
// begin and the end of the drain (the owner thread is busy in the step).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "compute/attention.h"
#include "core/thread_pool.h"
#include "csd/device_profile.h"
#include "csd/score_block.h"
#include "kv/kv_store.h"
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
    io_fault_hook io_faults;       // tests: injected results of the emulator's own reads
    // Polled while the host waits on the device (every 20 ms at most): true abandons the pass, and the
    // drain throws hill::error(exit_code::interrupted). The CLI passes its Ctrl-C flag.
    std::function<bool()> stop_requested;
};

// Largest score block: 65536 tuples (384 KiB at one score per token); the emulator keeps 8 in flight.
constexpr int32_t max_block_tokens = 65536;

// Counters of a device, summed over its passes. Link = the device's host interface.
struct device_counters {
    uint64_t n_score_passes = 0;
    uint64_t n_read_passes = 0;
    uint64_t n_cancelled = 0;         // passes abandoned by cancel()
    uint64_t n_errors = 0;            // passes failed by a device error
    uint64_t tokens_scored = 0;       // cold tokens scored
    uint64_t tokens_read = 0;         // cold tokens whose K and V were returned
    uint64_t score_blocks = 0;        // score blocks sent
    uint64_t internal_read_bytes = 0; // bytes read from flash inside the device
    uint64_t link_score_bytes = 0;    // link bytes of scoring: query in, score blocks out (plain: the key pages)
    uint64_t link_kv_bytes = 0;       // link bytes of K and V returned (plain: the pages read; promotions: their pages)
    uint64_t internal_write_bytes = 0; // bytes written to flash (cold pages of demoted tokens)
    uint64_t link_write_bytes = 0;    // link bytes of KV sent to be written (the same pages)
    uint64_t t_read_us = 0;           // device time reading flash (plain: the host's page reads)
    uint64_t t_kernel_us = 0;         // device time scoring and packing (plain: the host scoring cold keys)
    uint64_t t_throttle_us = 0;       // time waited on the profile's token buckets
    uint64_t t_backpressure_us = 0;   // time the device waited for room in the host queue
    uint64_t t_host_wait_us = 0;      // time the host waited for the device's blocks and KV (emulator)
};

// A score block handed to the host, valid during the call.
using block_fn = std::function<void(const score_block_view & block)>;

class device {
public:
    virtual ~device() = default;
    virtual storage_kind kind() const = 0;

    // Writes K, V rows of n new tokens of layer il (kv_store::append: the store places them; tokens it
    // demotes are written to the cold pool in whole pages). Errors: as kv_store::append.
    void append(int il, int64_t n, const void * k, const void * v);
    // Moves token t of layer il to tier `to` (kv_store::move: promotion reads its page back, demotion
    // writes a page when one fills); false when `to` is full or absent.
    bool move(int il, int64_t t, kv_tier to);

    // Starts scoring every token of layer il in written cold pages (kv_scope::on_disk) against the
    // query prepared in `scorer` (host_scorer::prepare_query; scorer's params decide precision,
    // aggregation and granularity). emulator: returns at once, the device works meanwhile.
    virtual void score_begin(int il, host_scorer & scorer) = 0;
    // Calls on_block for each score block of the pass, on this thread, as blocks arrive; returns when
    // the device has scored every token. Every scored token appears in exactly one block.
    virtual void score_drain(const block_fn & on_block) = 0;

    // Starts reading the K and V of `tokens` of layer il (each on disk, no repeats; copied).
    virtual void read_begin(int il, std::span<const int32_t> tokens) = 0;
    // Starts reading the K and V of every token of layer il in written cold pages (dense attention).
    virtual void read_all_begin(int il) = 0;
    // Calls fn(view, rows, tokens) (as kv_store::for_each_segment) for batches that together cover the
    // tokens once each, on this thread, as they arrive.
    virtual void read_drain(const kv_store::segment_fn & fn) = 0;

    // Abandons the pass in flight, if any: returns once the device is idle and ready for a new pass.
    virtual void cancel() = 0;

    // The pass counters of the implementation plus the writes and moves.
    device_counters counters() const;
    const device_profile & profile() const { return profile_; }

protected:
    device(kv_store & kv, const device_profile & p) : kv_(kv), profile_(p) {}
    virtual device_counters pass_counters() const = 0;

    kv_store & kv_;
    device_profile profile_;

private:
    // Counts the store's cold-pool bytes since `before` (a write or a move).
    void count_store_io(const kv_store_stats & before);
    uint64_t write_bytes_ = 0;         // cold pages written by appends and moves
    uint64_t promote_read_bytes_ = 0;  // cold pages read back by promotions
};

// A plain SSD or the emulator over kv's cold pool. pool: the host threads (plain scores on them).
// Errors: block_tokens outside [1, max_block_tokens], the emulator's kernel bounds (head_dim <= 256,
// n_head <= 128, n_head_kv <= 64; exit_code::usage); the emulator cannot open the cold pool files
// (bad_input).
std::unique_ptr<device> make_device(const storage_params & p, kv_store & kv, const attention_shape & s,
                                    thread_pool & pool);

// Usage errors when the scoring parameters do not suit the device: the emulator's kernel scores INT8
// or INT4 keys against an INT8 query.
void check_scoring(storage_kind k, const score_params & p);

}  // namespace hill::csd
