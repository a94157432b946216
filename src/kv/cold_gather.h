// Host reads of chosen tokens from a cold log's written pages (kv/cold_logs.h) through a
// cold_reader, one batch of groups at a time: what the plain SSD's passes, prefill over the tiers,
// the prompt cache and the diagnostics read. Pages that hold none of the tokens are not read. With
// token records (kv_layout.h) a group is one page of K and V: keys alone cost the whole page.
//
//   cold_gather g(reader, layout);
//   g.begin(log.groups, positions, /*with_v=*/true);
//   kv_batch b;
//   while (g.next(b)) { ... b.view rows b.rows[j] hold position b.positions[j] ... }
//
// next() throws hill::error naming the page when a read fails or a checksum does not match; the
// batch's pointers are valid until the next call.
//
// Streaming (a gather made with stream = true, over a reader of its own): a batch's page reads are
// issued in position order and left running between calls, and next() returns as soon as the next
// page is in — every token of the pages read by then, at least one page's — so that the caller works
// on the first tokens while the later ones are read (csd/plain_ssd.h: attention behind the reads).
// The reads in flight end at end(), the next begin() or the gather's destruction (which wait for them
// and check nothing more: the pages may have been freed since).
#pragma once

#include "compute/attention.h"
#include "core/aligned_buffer.h"
#include "kv/cold_reader.h"
#include "kv/cold_logs.h"

#include <cstdint>
#include <span>
#include <vector>

namespace hill {

// A batch of tokens in memory: position positions[j] is row rows[j] of view (rows == nullptr: row j),
// j < view.n_kv. view.v is nullptr when only keys were read.
struct kv_batch {
    kv_view view;
    const int32_t * rows = nullptr;
    const int32_t * positions = nullptr;
};

class cold_gather {
public:
    // Batches of about 8 MiB of K rows (and as much V). stream: see above.
    cold_gather(cold_reader & reader, const kv_layout & layout, bool stream = false);
    ~cold_gather();
    cold_gather(const cold_gather &) = delete;
    cold_gather & operator=(const cold_gather &) = delete;

    // Starts reading `positions` (ascending, each < groups.size() · page_tokens; copied) of a cold log
    // whose written groups are `groups` (cold_log_view::groups; copied); K rows only unless with_v.
    void begin(std::span<const std::pair<uint32_t, uint32_t>> groups, std::span<const int32_t> positions, bool with_v);
    // The next batch; false when every position was handed out.
    bool next(kv_batch & out);
    // Drops what is left of the gather (streaming: waits for the reads in flight). Never throws.
    void end();

    // Bytes read from the pool since construction.
    uint64_t read_bytes() const { return read_bytes_; }

private:
    // Plans the next batch (up to batch_groups_ groups from positions_[next_]) into reads_, rows_,
    // batch_pos_ and group_end_.
    void plan_batch();
    // Checks reads_[r0, r1), unpacks their token records and counts their bytes.
    void settle(size_t r0, size_t r1);

    cold_reader & reader_;
    kv_layout layout_;
    bool stream_ = false;
    bool in_flight_ = false;  // streaming: the batch's reads run
    size_t reads_done_ = 0;   // streaming: reads of the batch handed out
    int64_t batch_groups_ = 1;
    aligned_buffer staging_k_, staging_v_;  // layout type [batch_groups, page_tokens, n_embd_kv]
    aligned_buffer records_;                // token records: [batch_groups, page_bytes], the pages read
    std::vector<std::pair<uint32_t, uint32_t>> groups_;  // the log's groups (copied at begin)
    std::vector<int32_t> positions_;
    size_t next_ = 0;
    bool with_v_ = false;
    uint64_t read_bytes_ = 0;
    std::vector<int32_t> rows_, batch_pos_;
    std::vector<uint32_t> group_end_;  // [groups of the batch]: end of each group's rows in rows_
    std::vector<page_read> reads_;
    std::vector<page_result> results_;
};

}  // namespace hill
