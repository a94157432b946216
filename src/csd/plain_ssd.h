// The plain SSD (csd/device.h): a storage device without near-data compute, as the baselines have it.
// Scoring reads every key page of the layer's written cold pages into host memory through the KV
// store's own queue and scores it with the host scorer on the calling thread; reads return the pages
// that hold the wanted tokens. Everything read crosses the link, so the link counters equal the
// internal ones. A profile caps the reads at min(internal read, link) bandwidth (the same bytes cross
// both); begin() records the pass and drain() does the work.
#pragma once

#include "csd/device.h"

#include <vector>

namespace hill::csd {

class plain_ssd final : public device {
public:
    plain_ssd(const storage_params & p, kv_store & kv, const attention_shape & s, thread_pool & pool);
    storage_kind kind() const override { return storage_kind::plain; }
    void score_begin(int il, host_scorer & scorer) override;
    void score_drain(const block_fn & on_block) override;
    void read_begin(int il, std::span<const int32_t> tokens) override;
    void read_all_begin(int il) override;
    void read_drain(const kv_store::segment_fn & fn) override;
    void cancel() override;


private:
    device_counters pass_counters() const override { return counters_; }
    // Counts the cold bytes the store read since `before` and waits on the bucket for them. Errors:
    // exit_code::interrupted when stop_requested() turns true.
    void account(uint64_t before, uint64_t & link_bytes);

    storage_params params_;
    attention_shape shape_;
    thread_pool & pool_;
    token_bucket bucket_;
    device_counters counters_;
    int il_ = -1;
    host_scorer * scorer_ = nullptr;
    std::vector<int32_t> tokens_;      // the read pass's tokens
    bool read_pending_ = false;        // a read pass is begun and not drained
    bool read_all_ = false;            // ... of every token on disk (tokens_ unused)
    std::vector<float> seg_scores_;    // f32 [n_group, n]: one segment's scores
    std::vector<uint8_t> block_;       // one score block
};

}  // namespace hill::csd
