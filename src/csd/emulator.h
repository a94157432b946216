// The storage device emulator (csd/device.h; DESIGN.md §5): a software SmartSSD over the cache's
// cold pool files.
//
// Two threads stand for the device's two engines, with bounded queues between them and the host:
//   reader   its own cold_reader (kv/cold_reader.h: its own io_uring and file descriptors, the pool's
//            checksums) reads the pass's pages in batches of about 1 MiB into a ring of 3 page
//            batches (the "flash to FPGA" path; paced by the profile's internal read bandwidth);
//   engine   the HLS kernel (csd/hls/score_kernel.h) scores each key page and packs score blocks of
//            block_tokens tokens; for reads it extracts the selected rows. Each block or KV batch is
//            posted to the host as soon as it is full (paced by the link bandwidth; scoring by the
//            score throughput) and the engine goes on without waiting for the host
//            (HillInfer paper §4.2, Fig. 7a).
// Back-pressure: the engine takes a free packet (8 in all) for every block; when the host has not
// handed enough back, the engine waits (counted as t_backpressure_us), and so, through the full page
// ring, does the reader. Cancellation: cancel() stops every queue, waits until both threads are
// parked, empties the queues and re-arms them. A failed or corrupt read ends the pass with an error
// packet; next() throws it as hill::error naming layer, page and file, and the device is ready again.
//
// Tracing (core/trace.h): the threads' tracks are "emulator reader" ("flash read" per page batch:
// {layer, pages, bytes, throttle_us}) and "emulator kernel" ("score kernel" or "extract rows" per page
// batch: {layer, pages, tokens, wait_us} — waiting for the host's packets and the speed caps is inside
// the span); on the host, "device wait" {layer} is the wait for each packet.
//
// What the emulator scores: the pass's positions, in written cold pages. The kernel scores whole
// pages (the FPGA streams them); only the wanted positions' scores are packed.
#pragma once

#include "core/aligned_buffer.h"
#include "csd/bounded_queue.h"
#include "csd/device.h"
#include "csd/hls/score_kernel.h"
#include "kv/cold_reader.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace hill::csd {

class emulator final : public device {
public:
    // Opens the cold pool's files read-only (O_DIRECT when the pool has it) and starts the threads.
    // Errors: see make_device.
    emulator(const storage_params & p, const cold_pool * pool, const kv_layout & layout, const attention_shape & s);
    ~emulator() override;
    storage_kind kind() const override { return storage_kind::emulator; }
    void score_begin(const device_pass & pass, host_scorer & scorer) override;
    const score_block_view * score_next() override;
    void read_begin(const device_pass & pass) override;
    bool read_next(kv_batch & out) override;
    void cancel() override;
    device_counters counters() const override;

private:
    enum class job_kind : uint8_t { score, read };
    struct page_batch {
        aligned_buffer k, v;          // layout type [batch_groups, page_bytes]: K pages, V pages (read jobs)
        std::vector<uint32_t> groups; // the groups of this batch, ascending
        bool last = false;            // the pass's final batch
        std::string error;            // non-empty: the read failed (this is then the last batch)
    };
    enum class packet_kind : uint8_t { scores, kv, end, error };
    struct packet {
        packet_kind kind = packet_kind::end;
        std::vector<uint8_t> block;   // scores: one score block (score_block.h)
        aligned_buffer k, v;          // kv: layout type [kv_batch_tokens, n_embd_kv]
        std::vector<int32_t> tokens;  // kv: i32 [n]: token positions of the rows
        int64_t n = 0;                // kv: rows
        std::string error;
    };
    // Atomic mirror of device_counters (written by the device threads, read by counters()).
    struct atomic_counters;

    void reader_main();
    void engine_main();
    // A queue was stopped: waits, parked, until cancel() re-arms the queues (true) or shutdown (false).
    bool park();
    void start_pass(job_kind k, const device_pass & pass);
    // Waits for the host's packet; false when stopped.
    bool take_packet(int & p);
    bool send_packet(int p, uint64_t link_bytes);
    // The host's next packet of the pass (the one handed out before goes back first); -1 at the pass's
    // end. Throws the device's error, or exit_code::interrupted on a stop request (the pass cancelled).
    int next_packet();
    void stop_all();
    // Stops and joins the threads that run (the destructor, and a constructor that could not start both).
    void shut_down();

    storage_params params_;
    attention_shape shape_;
    kv_layout layout_;
    const cold_pool * pool_;
    int64_t batch_groups_ = 1;     // page groups per read batch
    int64_t kv_batch_tokens_ = 256;
    std::unique_ptr<cold_reader> reader_;  // the device's own reads (used by its reader thread only)

    // The pass, written by the host before it is posted to jobs_ and read by the threads until its end.
    job_kind job_kind_ = job_kind::score;
    int job_il_ = 0;
    std::span<const std::pair<uint32_t, uint32_t>> job_groups_;  // the log's groups (unchanged during the pass)
    std::vector<int32_t> job_positions_;                         // ascending
    hls::kernel_config kcfg_;
    std::unique_ptr<hls::query_buffer> qbuf_;  // the on-chip query buffer
    bool busy_ = false;                        // host side: a pass is begun and not finished
    int held_ = -1;                            // host side: the packet handed out by the last next()
    std::optional<score_block_view> view_;     // of the held score packet

    std::vector<page_batch> batches_;
    std::vector<packet> packets_;
    bounded_queue<int> jobs_{1};
    bounded_queue<int> filled_, free_batches_;
    bounded_queue<int> out_, free_packets_;

    std::atomic<bool> cancel_{false};
    std::mutex ctl_m_;
    std::condition_variable ctl_cv_;
    int parked_ = 0;
    uint64_t gen_ = 0;
    bool shutdown_ = false;

    std::unique_ptr<atomic_counters> ctr_;
    token_bucket read_bucket_, score_bucket_, link_bucket_;  // reader / engine / engine
    std::thread reader_thread_, engine_;
};

}  // namespace hill::csd
