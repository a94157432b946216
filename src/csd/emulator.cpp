#include "csd/emulator.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "core/error.h"
#include "core/sys_info.h"
#include "core/trace.h"
#include "csd/hls/score_top.h"
#include "score/selector.h"

namespace hill::csd {

namespace {

constexpr int n_page_batches = 3;  // the reader's ring: one being read, one being scored, one spare
constexpr int n_packets = 8;       // blocks or KV batches in flight to the host (back-pressure beyond)

int64_t us_since(int64_t t0) {
    return time_us() - t0;
}

}  // namespace

struct emulator::atomic_counters {
    std::atomic<uint64_t> n_score_passes{0}, n_read_passes{0}, n_cancelled{0}, n_errors{0};
    std::atomic<uint64_t> tokens_scored{0}, tokens_read{0}, score_blocks{0};
    std::atomic<uint64_t> internal_read_bytes{0}, link_score_bytes{0}, link_kv_bytes{0};
    std::atomic<uint64_t> t_read_us{0}, t_kernel_us{0}, t_throttle_us{0}, t_backpressure_us{0}, t_host_wait_us{0};
    std::atomic<uint64_t> t_pass_us{0};
    // The pass in flight: when the host posted it, and t_backpressure_us then (written by the host before it
    // posts the job, read by the engine when it posts the pass's end).
    std::atomic<int64_t> pass_t0_us{0};
    std::atomic<uint64_t> pass_backpressure0_us{0};
};

emulator::emulator(const storage_params & p, const cold_pool * pool, const kv_layout & layout,
                   const attention_shape & s)
    : device(p.profile), params_(p), shape_(s), layout_(layout), pool_(pool),
      filled_(n_page_batches), free_batches_(n_page_batches), out_(n_packets), free_packets_(n_packets),
      ctr_(std::make_unique<atomic_counters>()), read_bucket_(p.profile.internal_read_bps),
      score_bucket_(p.profile.score_bps), link_bucket_(p.profile.link_bps) {
    if (s.head_dim > hls::max_head_dim || s.n_head > hls::max_head || s.n_head_kv > hls::max_group) {
        fail_usage("--storage emulator: the device kernel is built for head_dim <= {}, n_head <= {}, n_head_kv <= {}; "
                   "the model has {}, {}, {}", hls::max_head_dim, hls::max_head, hls::max_group, s.head_dim, s.n_head,
                   s.n_head_kv);
    }
    HILL_ASSERT(p.block_tokens > 0);
    HILL_ASSERT(layout.cold == cold_records::split);  // the device scans the K pages apart from the V pages
    qbuf_ = std::make_unique<hls::query_buffer>();
    const uint64_t page_bytes = layout_.page_bytes();
    if (pool != nullptr) {
        io_queue_params qp;
        qp.fault_hook = params_.io_faults;
        reader_ = std::make_unique<cold_reader>(*pool, qp);  // the device's own ring and descriptors
    }
    batch_groups_ = std::max<int64_t>(1, int64_t((uint64_t(1) << 20) / page_bytes));
    batches_.resize(n_page_batches);
    for (page_batch & b : batches_) {
        b.k = aligned_buffer(size_t(batch_groups_ * int64_t(page_bytes)), aligned_buffer::uninitialized);
        b.v = aligned_buffer(size_t(batch_groups_ * int64_t(page_bytes)), aligned_buffer::uninitialized);
        b.groups.reserve(size_t(batch_groups_));
    }
    const int n_group_max = std::max(1, s.n_head_kv);
    packets_.resize(n_packets);
    for (packet & pk : packets_) {
        pk.block.resize(score_block_bytes(p.block_tokens, n_group_max));
        pk.k = aligned_buffer(size_t(kv_batch_tokens_) * layout_.row_bytes(), aligned_buffer::uninitialized);
        pk.v = aligned_buffer(size_t(kv_batch_tokens_) * layout_.row_bytes(), aligned_buffer::uninitialized);
        pk.tokens.reserve(size_t(kv_batch_tokens_));
    }
    for (int i = 0; i < n_page_batches; ++i) free_batches_.push(i);
    for (int i = 0; i < n_packets; ++i) free_packets_.push(i);
    // The device's two threads. When the system refuses one (a process limit), the other is stopped
    // and joined and the failure is an error naming the device, not a terminate.
    try {
        reader_thread_ = std::thread([this] { reader_main(); });
        engine_ = std::thread([this] { engine_main(); });
    } catch (const std::system_error & e) {
        shut_down();
        fail_input("storage device emulator: cannot start its threads: {}", e.code().message());
    }
}

emulator::~emulator() {
    shut_down();
}

void emulator::shut_down() {
    {
        std::lock_guard lock(ctl_m_);
        shutdown_ = true;
    }
    cancel_ = true;
    stop_all();
    ctl_cv_.notify_all();
    if (reader_thread_.joinable()) reader_thread_.join();
    if (engine_.joinable()) engine_.join();
}

void emulator::stop_all() {
    jobs_.stop();
    filled_.stop();
    free_batches_.stop();
    out_.stop();
    free_packets_.stop();
}

bool emulator::park() {
    std::unique_lock lock(ctl_m_);
    ++parked_;
    ctl_cv_.notify_all();
    const uint64_t gen = gen_;
    ctl_cv_.wait(lock, [&] { return gen_ != gen || shutdown_; });
    --parked_;
    return !shutdown_;
}

void emulator::cancel() {
    if (!busy_) return;
    cancel_ = true;
    stop_all();
    std::unique_lock lock(ctl_m_);
    ctl_cv_.wait(lock, [&] { return parked_ == 2; });
    // Both threads are parked: nothing touches the queues or buffers.
    jobs_.restart();
    filled_.restart();
    free_batches_.restart();
    out_.restart();
    free_packets_.restart();
    for (int i = 0; i < n_page_batches; ++i) free_batches_.push(i);
    for (int i = 0; i < n_packets; ++i) free_packets_.push(i);
    cancel_ = false;
    ++gen_;
    ctl_cv_.notify_all();
    busy_ = false;
    held_ = -1;
    ctr_->n_cancelled.fetch_add(1, std::memory_order_relaxed);
}

device_counters emulator::counters() const {
    const atomic_counters & c = *ctr_;
    auto ld = [](const std::atomic<uint64_t> & a) { return a.load(std::memory_order_relaxed); };
    device_counters d;
    d.n_score_passes = ld(c.n_score_passes);
    d.n_read_passes = ld(c.n_read_passes);
    d.n_cancelled = ld(c.n_cancelled);
    d.n_errors = ld(c.n_errors);
    d.tokens_scored = ld(c.tokens_scored);
    d.tokens_read = ld(c.tokens_read);
    d.score_blocks = ld(c.score_blocks);
    d.internal_read_bytes = ld(c.internal_read_bytes);
    d.link_score_bytes = ld(c.link_score_bytes);
    d.link_kv_bytes = ld(c.link_kv_bytes);
    d.t_read_us = ld(c.t_read_us);
    d.t_kernel_us = ld(c.t_kernel_us);
    d.t_throttle_us = ld(c.t_throttle_us);
    d.t_backpressure_us = ld(c.t_backpressure_us);
    d.t_host_wait_us = ld(c.t_host_wait_us);
    d.t_pass_us = ld(c.t_pass_us);
    return d;
}

// ---- host side ----

void emulator::start_pass(job_kind k, const device_pass & pass) {
    HILL_ASSERT(!busy_ && reader_ != nullptr && pass.page_tokens == layout_.page_tokens());
    job_kind_ = k;
    job_il_ = pass.il;
    job_groups_ = pass.groups;
    job_positions_.assign(pass.positions.begin(), pass.positions.end());
    busy_ = true;
    held_ = -1;
    ctr_->pass_t0_us.store(time_us(), std::memory_order_relaxed);
    ctr_->pass_backpressure0_us.store(ctr_->t_backpressure_us.load(std::memory_order_relaxed), std::memory_order_relaxed);
    const bool posted = jobs_.push(0);
    HILL_ASSERT(posted);
}

void emulator::score_begin(const device_pass & pass, host_scorer & scorer) {
    const score_params & sp = scorer.params();
    check_scoring(storage_kind::emulator, sp);
    HILL_ASSERT(scorer.query_i8() != nullptr);
    kcfg_.n_head = shape_.n_head;
    kcfg_.n_head_kv = shape_.n_head_kv;
    kcfg_.head_dim = shape_.head_dim;
    kcfg_.key_f32 = layout_.type == ggml_type::f32;
    kcfg_.int4 = sp.key == score_precision::int4;
    kcfg_.aggregate_max = sp.aggregate == score_aggregate::max;
    kcfg_.per_kv_head = sp.granularity == select_granularity::kv_head;
    kcfg_.aggregate_softmax = sp.aggregate == score_aggregate::softmax;
    // The query crosses the link once per pass: q̂ int8 [n_head, head_dim] and s_q f32 [n_head] (softmax:
    // and b_h f32 [n_head]).
    hls::load_query(kcfg_, scorer.query_i8(), scorer.query_scale(), scorer.head_mass(), scorer.log2_scale(), *qbuf_);
    const uint64_t per_head = uint64_t(shape_.head_dim + 4) + (kcfg_.aggregate_softmax ? 4 : 0);
    ctr_->link_score_bytes.fetch_add(uint64_t(shape_.n_head) * per_head, std::memory_order_relaxed);
    ctr_->n_score_passes.fetch_add(1, std::memory_order_relaxed);
    start_pass(job_kind::score, pass);
}

void emulator::read_begin(const device_pass & pass) {
    ctr_->n_read_passes.fetch_add(1, std::memory_order_relaxed);
    start_pass(job_kind::read, pass);
}

int emulator::next_packet() {
    HILL_ASSERT(busy_);
    if (held_ >= 0) {
        free_packets_.push(held_);
        held_ = -1;
    }
    try {
        int p = -1;
        const int64_t t0 = time_us();
        trace_scope span("device wait", "csd", {{"layer", job_il_}});
        int got;
        while ((got = out_.pop_for(p, std::chrono::milliseconds(20))) == 0) {
            if (params_.stop_requested && params_.stop_requested()) {
                throw error(exit_code::interrupted, "interrupted while the storage device was working");
            }
        }
        HILL_ASSERT(got == 1);  // only cancel() stops the queues, and it runs on this thread
        ctr_->t_host_wait_us.fetch_add(uint64_t(us_since(t0)), std::memory_order_relaxed);
        span.close();
        packet & pk = packets_[size_t(p)];
        if (pk.kind == packet_kind::end || pk.kind == packet_kind::error) {
            std::string err = pk.kind == packet_kind::error ? std::move(pk.error) : std::string();
            free_packets_.push(p);
            busy_ = false;
            if (!err.empty()) {
                ctr_->n_errors.fetch_add(1, std::memory_order_relaxed);
                fail_input("storage device emulator: layer {}: {}", job_il_, err);
            }
            return -1;
        }
        held_ = p;
        return p;
    } catch (...) {
        if (busy_) cancel();  // the host gave up on the pass: leave the device idle
        throw;
    }
}

const score_block_view * emulator::score_next() {
    const int p = next_packet();
    if (p < 0) return nullptr;
    HILL_ASSERT(packets_[size_t(p)].kind == packet_kind::scores);
    view_.emplace(packets_[size_t(p)].block.data());
    return &*view_;
}

bool emulator::read_next(kv_batch & out) {
    const int p = next_packet();
    if (p < 0) return false;
    packet & pk = packets_[size_t(p)];
    HILL_ASSERT(pk.kind == packet_kind::kv);
    out.view = kv_view{layout_.type, pk.k.data(), pk.v.data(), pk.n, layout_.n_embd_kv};
    out.rows = nullptr;
    out.positions = pk.tokens.data();
    return true;
}

// ---- the device's threads ----

void emulator::reader_main() {
    trace_set_thread_name("emulator reader");
    const auto cancelled = [this] { return cancel_.load(std::memory_order_relaxed); };
    std::vector<uint32_t> groups;
    std::vector<page_read> reads;
    std::vector<page_result> results;
    for (;;) {
        int token = 0;
        if (!jobs_.pop(token)) {
            if (!park()) return;
            continue;
        }
        // The groups that hold a wanted position, ascending.
        const int64_t pt = layout_.page_tokens();
        groups.clear();
        for (const int32_t t : job_positions_) {
            const auto g = uint32_t(int64_t(t) / pt);
            if (groups.empty() || groups.back() != g) groups.push_back(g);
        }
        const bool with_v = job_kind_ == job_kind::read;
        const uint64_t page_bytes = layout_.page_bytes();
        size_t next = 0;
        bool stopped = false;
        do {
            int b = 0;
            if (!free_batches_.pop(b)) {
                stopped = true;
                break;
            }
            page_batch & B = batches_[size_t(b)];
            B.groups.clear();
            B.error.clear();
            while (next < groups.size() && int64_t(B.groups.size()) < batch_groups_) B.groups.push_back(groups[next++]);
            B.last = next == groups.size();
            const int64_t t0 = time_us();
            trace_scope span("flash read", "csd",
                             {{"layer", job_il_}, {"pages", int64_t(B.groups.size()) * (with_v ? 2 : 1)}});
            reads.clear();
            for (size_t i = 0; i < B.groups.size(); ++i) {
                const auto & [kp, vp] = job_groups_[B.groups[i]];
                reads.push_back({kp, B.k.data() + i * page_bytes});
                if (with_v) reads.push_back({vp, B.v.data() + i * page_bytes});
            }
            uint64_t throttled = 0;
            if (!read_bucket_.take(uint64_t(reads.size()) * page_bytes, cancelled, &throttled)) {
                stopped = true;
                break;
            }
            ctr_->t_throttle_us.fetch_add(throttled, std::memory_order_relaxed);
            const int64_t t1 = time_us();
            results.resize(reads.size());
            if (reader_->read_pages(reads, results) != 0) {
                for (const page_result & r : results) {
                    if (r.status != page_status::ok) {
                        B.error = pool_->describe(r);
                        break;
                    }
                }
                B.last = true;
            }
            ctr_->internal_read_bytes.fetch_add(uint64_t(reads.size()) * page_bytes, std::memory_order_relaxed);
            ctr_->t_read_us.fetch_add(uint64_t(time_us() - t1) + uint64_t(t1 - t0) - throttled, std::memory_order_relaxed);
            span.arg("bytes", int64_t(reads.size() * page_bytes));
            span.arg("throttle_us", int64_t(throttled));
            span.close();
            if (!filled_.push(b)) {
                stopped = true;
                break;
            }
            if (B.last) break;
        } while (true);
        if (stopped && !park()) return;
    }
}

bool emulator::take_packet(int & p) {
    uint64_t waited = 0;
    const int64_t t0 = time_us();
    if (!free_packets_.pop(p)) return false;
    waited = uint64_t(us_since(t0));
    ctr_->t_backpressure_us.fetch_add(waited, std::memory_order_relaxed);
    return true;
}

bool emulator::send_packet(int p, uint64_t link_bytes) {
    uint64_t throttled = 0;
    if (!link_bucket_.take(link_bytes, [this] { return cancel_.load(std::memory_order_relaxed); }, &throttled)) {
        return false;
    }
    ctr_->t_throttle_us.fetch_add(throttled, std::memory_order_relaxed);
    return out_.push(p);
}

void emulator::engine_main() {
    trace_set_thread_name("emulator kernel");
    const auto cancelled = [this] { return cancel_.load(std::memory_order_relaxed); };
    const int64_t pt = layout_.page_tokens();
    const uint64_t page_bytes = layout_.page_bytes();
    const size_t rb = layout_.row_bytes();
    std::vector<float> scores(size_t(pt) * size_t(std::max(1, shape_.n_head_kv)));  // f32 [page_tokens, n_group]
    f16_bits tuple[score_block_max_group];
    for (;;) {
        bool stopped = false;
        int cur = -1;                  // the packet being filled
        score_block_writer w;
        size_t pos_i = 0;              // next of job_positions_
        for (;;) {
            int b = 0;
            if (!filled_.pop(b)) {
                stopped = true;
                break;
            }
            page_batch & B = batches_[size_t(b)];
            auto flush = [&]() -> bool {  // sends the packet being filled, if any
                if (cur < 0) return true;
                packet & pk = packets_[size_t(cur)];
                uint64_t bytes;
                if (pk.kind == packet_kind::scores) {
                    if (w.n_tokens() == 0) return true;
                    bytes = w.seal();
                    ctr_->score_blocks.fetch_add(1, std::memory_order_relaxed);
                    ctr_->link_score_bytes.fetch_add(bytes, std::memory_order_relaxed);
                } else {
                    if (pk.n == 0) return true;
                    bytes = 8 + uint64_t(pk.n) * (2 * rb + 4);  // header, then per token K row, V row, u32 position
                    ctr_->link_kv_bytes.fetch_add(bytes, std::memory_order_relaxed);
                    ctr_->tokens_read.fetch_add(uint64_t(pk.n), std::memory_order_relaxed);
                }
                const int p = cur;
                cur = -1;
                return send_packet(p, bytes);
            };
            auto open = [&](packet_kind kind) -> bool {  // makes sure a packet of this kind is being filled
                if (cur >= 0) return true;
                if (!take_packet(cur)) return false;
                packet & pk = packets_[size_t(cur)];
                pk.kind = kind;
                pk.n = 0;
                pk.tokens.clear();
                if (kind == packet_kind::scores) w = score_block_writer(pk.block.data(), job_il_, kcfg_.n_group());
                return true;
            };
            bool ok = true;
            if (B.error.empty()) {
                const int64_t t0 = time_us();
                const uint64_t backpressure0 = ctr_->t_backpressure_us.load(std::memory_order_relaxed);
                trace_scope span(job_kind_ == job_kind::score ? "score kernel" : "extract rows", "csd",
                                 {{"layer", job_il_}, {"pages", int64_t(B.groups.size())}});
                const size_t pos_i0 = pos_i;
                uint64_t throttled = 0;
                for (size_t i = 0; i < B.groups.size() && ok; ++i) {
                    const int64_t pos0 = int64_t(B.groups[i]) * pt;  // the group's first position
                    const int64_t pos1 = pos0 + pt;
                    if (job_kind_ == job_kind::score) {
                        ok = score_bucket_.take(page_bytes, cancelled, &throttled);
                        if (!ok) break;
                        hill_csd_score(B.k.data() + i * page_bytes, layout_.n_embd_kv, pt, qbuf_.get(), kcfg_.n_head,
                                       kcfg_.n_head_kv, kcfg_.head_dim, hls::top_flags(kcfg_), scores.data());
                        const int n_group = kcfg_.n_group();
                        int64_t n_scored = 0;
                        for (; pos_i < job_positions_.size() && job_positions_[pos_i] < pos1 && ok; ++pos_i) {
                            const int64_t r = job_positions_[pos_i] - pos0;
                            ok = open(packet_kind::scores);
                            if (!ok) break;
                            for (int g = 0; g < n_group; ++g) tuple[g] = score_to_f16(scores[size_t(r * n_group + g)]);
                            w.add(uint32_t(job_positions_[pos_i]), tuple);
                            ++n_scored;
                            if (w.n_tokens() == params_.block_tokens) ok = flush();
                        }
                        ctr_->tokens_scored.fetch_add(uint64_t(n_scored), std::memory_order_relaxed);
                    } else {
                        for (; pos_i < job_positions_.size() && job_positions_[pos_i] < pos1 && ok; ++pos_i) {
                            const int64_t r = job_positions_[pos_i] - pos0;
                            ok = open(packet_kind::kv);
                            if (!ok) break;
                            packet & pk = packets_[size_t(cur)];
                            std::memcpy(pk.k.data() + size_t(pk.n) * rb, B.k.data() + i * page_bytes + size_t(r) * rb, rb);
                            std::memcpy(pk.v.data() + size_t(pk.n) * rb, B.v.data() + i * page_bytes + size_t(r) * rb, rb);
                            pk.tokens.push_back(job_positions_[pos_i]);
                            if (++pk.n == kv_batch_tokens_) ok = flush();
                        }
                    }
                }
                ctr_->t_throttle_us.fetch_add(throttled, std::memory_order_relaxed);
                ctr_->t_kernel_us.fetch_add(uint64_t(us_since(t0)) - throttled, std::memory_order_relaxed);
                span.arg("tokens", int64_t(pos_i - pos_i0));
                // Waiting for the host to hand packets back, and for the speed caps: inside this span.
                const uint64_t backpressure = ctr_->t_backpressure_us.load(std::memory_order_relaxed) - backpressure0;
                span.arg("wait_us", int64_t(backpressure + throttled));
            }
            const bool last = B.last;
            std::string error = B.error;
            if (!ok || !free_batches_.push(b)) {
                stopped = true;
                break;
            }
            if (!last) continue;
            // The pass is over: the partial packet, then an end (or error) packet.
            if (!flush() || (cur < 0 && !take_packet(cur))) {
                stopped = true;
                break;
            }
            packet & pk = packets_[size_t(cur)];  // a fresh packet, or an empty one of the pass
            pk.kind = error.empty() ? packet_kind::end : packet_kind::error;
            pk.error = std::move(error);
            const int p = cur;
            cur = -1;
            const uint64_t backpressure = ctr_->t_backpressure_us.load(std::memory_order_relaxed) -
                                          ctr_->pass_backpressure0_us.load(std::memory_order_relaxed);
            const auto pass_us = uint64_t(us_since(ctr_->pass_t0_us.load(std::memory_order_relaxed)));
            ctr_->t_pass_us.fetch_add(pass_us - std::min(pass_us, backpressure), std::memory_order_relaxed);
            if (!out_.push(p)) stopped = true;
            break;
        }
        if (stopped && !park()) return;
    }
}

}  // namespace hill::csd
