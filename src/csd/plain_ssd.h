// The plain SSD (csd/device.h): a storage device without near-data compute, as the baselines have it.
// A scoring pass reads the key pages that hold the pass's positions into host memory through its own
// cold_reader (a cold_gather) and scores them with the host scorer on the calling thread; a read pass
// returns the pages that hold the wanted tokens. Everything read crosses the link, so the link
// counters equal the internal ones. A profile caps the reads at min(internal read, link) bandwidth
// (the same bytes cross both; a read pass's jobs are charged at its end). Between begin and next()
// reads run in the background (the jobs' threads, the gather's io_uring); cancel() stops them.
//
// Prefetch (the pipeline, HillInfer paper §4.3): prefetch() hands the hinted positions to a
// cold_prefetch (kv/cold_prefetch.h: its own thread and io_uring), which reads them while the host
// works. 4 jobs of at most 32 MiB each: two layers in flight for up to two sequences of a batch, or
// for one sequence with the next step's first layer (further hints are dropped). A hint for the next
// step outlives end_step() (dropped by drop_prefetches()).
//
// A read pass takes the hint's rows and has the misses (the tokens the hint lacks) read by a second
// cold_prefetch, the fetcher (thread "cold fetch"; up to storage_params::fetch_bytes per pass, the
// rest on the calling thread once the pass reaches them), from read_begin on, beside the prefetch:
// two queues keep a disk busier than one. Both jobs publish their rows as they arrive, and
// read_next() returns the rows in position order as far as they are read, so the host attends the
// first ones while the rest are read. A job that fails only loses its reads: the rest of the pass is
// read on the calling thread, which reports a real fault.
#pragma once

#include "csd/device.h"
#include "kv/cold_prefetch.h"

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
    int64_t prefetch(const device_pass & pass, bool next_step) override;
    bool reads_ahead() const override { return prefetch_ != nullptr; }
    void end_step() override;
    void drop_prefetches() override;
    device_counters counters() const override { return counters_; }

private:
    // Reads the gather's next batch, counts its bytes into link_bytes and waits on the bucket for them.
    // Errors: exit_code::interrupted when stop_requested() turns true.
    bool next_batch(kv_batch & out, uint64_t & link_bytes);
    // Counts bytes read elsewhere (a prefetch) as this pass's and waits on the bucket for them.
    void charge(uint64_t bytes, uint64_t & link_bytes);
    // Ends the pass in flight (releasing its prefetch job): the device is idle.
    void forget_pass();
    // The read pass's next rows in position order (at least one; fewer than chunk_rows_ when the next
    // one is not read yet).
    bool merged_next(kv_batch & out);
    // Ends the read pass: frees its jobs and returns the bytes they read.
    uint64_t release_jobs();
    static uint64_t key_of(const device_pass & p) { return uint64_t(uint32_t(p.seq)) << 32 | uint32_t(p.il); }
    // Counts the bytes of prefetches dropped unread as read (they were).
    void count_untaken(uint64_t bytes);

    storage_params params_;
    thread_pool & threads_;
    token_bucket bucket_;
    device_counters counters_;
    std::unique_ptr<cold_reader> reader_;  // nullptr without a cold pool
    std::unique_ptr<cold_gather> gather_;
    std::unique_ptr<cold_prefetch> prefetch_;  // the hints; nullptr without a cold pool or prefetch
    std::unique_ptr<cold_prefetch> fetch_;     // the read passes' misses; nullptr without a cold pool
    int il_ = 0;
    host_scorer * scorer_ = nullptr;       // a scoring pass is in flight
    bool reading_ = false;                 // a read pass is in flight
    // A read pass: its positions and the next one. Its rows come from up to three sources, each in
    // position order: the prefetch's job (the hint), the fetcher's job (the misses, read on the
    // fetcher's thread while the host attends the rows already here) and, for misses beyond the
    // fetcher's slot or after a job failed, gather_ on this thread.
    struct job_cursor {
        cold_prefetch * from = nullptr;
        uint64_t key = 0;
        std::span<const int32_t> pos;  // the job's positions (cold_prefetch::planned)
        size_t j = 0;                  // the next row
        int64_t ready = 0;             // rows read so far
        kv_view view;                  // the job's rows, once one was waited for
    };
    // Takes a row at position t from a job that has it (false: neither has it).
    bool from_job(job_cursor & c, int32_t t, bool can_wait, const uint8_t *& k, const uint8_t *& v, bool & stop);
    std::vector<std::pair<uint32_t, uint32_t>> groups_;
    std::vector<int32_t> read_pos_, misses_;
    size_t read_i_ = 0;
    job_cursor hint_, fetched_;
    bool all_gathered_ = false;            // a job failed: the rest of the pass comes from gather_
    kv_batch miss_batch_;                  // gather_'s batch being consumed
    int64_t miss_j_ = 0;                   // its next row
    int64_t chunk_rows_ = 1;
    aligned_buffer merge_k_, merge_v_;     // layout type [chunk_rows, n_embd_kv]
    kv_layout layout_;
    kv_batch batch_;                       // scoring: the batch being packed into blocks
    int64_t cursor_ = 0;                   // its next token
    std::vector<float> seg_scores_;        // f32 [n_group, batch tokens]: the batch's scores
    std::vector<uint8_t> block_;           // one score block
    std::optional<score_block_view> view_; // of block_
};

}  // namespace hill::csd
