// The device tier (DESIGN.md §1, §3 step 4-5): where attention runs, with a bounded working set of
// KV — the sinks, the recent window and the KV gathered for the current step. The engine hands it a
// query and then the KV to attend to, batch by batch, in host memory; the tier brings each batch
// in (an accelerator copies it into its own slots, at most capacity_tokens() per batch) and
// continues an online softmax (compute/attention.h) that it keeps itself; end() writes the result
// back to host memory. Nothing of the tier's own memory is ever visible to the caller, so an
// accelerator tier (CUDA) implements the same interface as the CPU one.
//
// The CPU build's tier (make_cpu_device_tier) aliases host memory: it attends to the hot pool's
// slots in place through their index list and to cold pages in the read staging buffers, so it
// copies nothing (DESIGN.md §3 step 4: "the device tier may alias the hot pool").
#pragma once

#include "compute/attention.h"
#include "core/thread_pool.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

namespace hill {

struct device_tier_stats {
    uint64_t kv_bytes_attended = 0;  // K and V bytes attention read (all steps)
    uint64_t kv_bytes_copied = 0;    // of those, bytes copied from host memory into the tier's own memory
};

class device_tier {
public:
    virtual ~device_tier() = default;

    virtual std::string_view name() const = 0;
    // The most tokens one batch brings into the tier (its staging slots); attend() splits larger ones.
    virtual int64_t capacity_tokens() const = 0;

    // Starts the attention of n_tok query tokens q f32 [n_tok, n_head, head_dim] (host memory,
    // valid until end()) under shape s. n_tok is at most max_tokens (given at construction).
    virtual void begin(const attention_shape & s, const float * q, int64_t n_tok) = 0;

    // Attends the started queries to the tokens of kv (host memory, valid during the call): token j
    // is row rows[j] (rows == nullptr: row j), j < kv.n_kv. causal_p0 = no_causal_mask: every
    // query sees every key; otherwise query token t sees the keys j <= causal_p0 + t (a prompt
    // chunk's own KV; see attention_prefill_accumulate), and with a window (attention_shape::window)
    // only those with j > causal_p0 + t - window. kv_head >= 0 (one query token only):
    // only the query heads that read KV head kv_head attend (a token set per KV head,
    // select_granularity::kv_head). Batches may come in any order (softmax does not depend on key
    // order).
    void attend(const kv_view & kv, const int32_t * rows, int64_t causal_p0 = no_causal_mask, int kv_head = -1);
    // attend(kv, rows, causal_p0) in parts of `part` keys (a multiple of attention_key_split, so that the
    // result is that of one call), between(keys attended so far) after each part but the last: a
    // prefill's progress and stop check, which may throw (the attention is then abandoned; the next
    // begin() starts afresh).
    void attend_in_parts(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int64_t part,
                         const std::function<void(int64_t)> & between);

    // Ends the attention: out f32 [n_tok, n_head, head_dim] (host memory) = softmax-weighted V of
    // every key attended since begin(); zeros for a query that saw no key. out may be the q given
    // to begin() (the queries are not read after the last attend()).
    virtual void end(float * out) = 0;

    const device_tier_stats & stats() const { return stats_; }

protected:
    // One batch of at most capacity_tokens() tokens (attend() has split it).
    virtual void attend_batch(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int kv_head) = 0;
    device_tier_stats stats_;

private:
    // attend() in parts of at most `part` keys (and of capacity_tokens()), between after each but the last.
    void attend_split(const kv_view & kv, const int32_t * rows, int64_t causal_p0, int kv_head, int64_t part,
                      const std::function<void(int64_t)> * between);
};

// The CPU build's device tier: attention on the thread pool, in place over host memory.
// max_tokens: the most query tokens of one begin() (the prefill chunk); n_embd_q = n_head * head_dim.
std::unique_ptr<device_tier> make_cpu_device_tier(thread_pool & pool, int64_t max_tokens, int64_t n_embd_q,
                                                  int n_head);

}  // namespace hill
