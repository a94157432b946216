// The plain SSD (csd/device.h): a storage device without near-data compute, as the baselines have it.
// A scoring pass reads the key pages that hold the pass's positions into host memory through its own
// cold_reader (a cold_gather) and scores them with the host scorer on the calling thread; a read pass
// returns the pages that hold the wanted tokens. Everything read crosses the link, so the link
// counters equal the internal ones. A profile caps the reads at min(internal read, link) bandwidth
// (the same bytes cross both). Nothing runs between begin and next(): next() does the work.
#pragma once

#include "csd/device.h"

#include <memory>
#include <optional>
#include <vector>

namespace hill::csd {

class plain_ssd final : public device {
public:
    plain_ssd(const storage_params & p, const cold_pool * pool, const kv_layout & layout, const attention_shape & s,
              thread_pool & threads);
    storage_kind kind() const override { return storage_kind::plain; }
    void score_begin(const device_pass & pass, host_scorer & scorer) override;
    const score_block_view * score_next() override;
    void read_begin(const device_pass & pass) override;
    bool read_next(kv_batch & out) override;
    void cancel() override;
    device_counters counters() const override { return counters_; }

private:
    // Reads the gather's next batch, counts its bytes into link_bytes and waits on the bucket for them.
    // Errors: exit_code::interrupted when stop_requested() turns true.
    bool next_batch(kv_batch & out, uint64_t & link_bytes);

    storage_params params_;
    thread_pool & threads_;
    token_bucket bucket_;
    device_counters counters_;
    std::unique_ptr<cold_reader> reader_;  // nullptr without a cold pool
    std::unique_ptr<cold_gather> gather_;
    int il_ = 0;
    host_scorer * scorer_ = nullptr;       // a scoring pass is in flight
    bool reading_ = false;                 // a read pass is in flight
    kv_batch batch_;                       // scoring: the batch being packed into blocks
    int64_t cursor_ = 0;                   // its next token
    std::vector<float> seg_scores_;        // f32 [n_group, batch tokens]: the batch's scores
    std::vector<uint8_t> block_;           // one score block
    std::optional<score_block_view> view_; // of block_
};

}  // namespace hill::csd
