#include "engine/context.h"

#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"
#include "core/sys_info.h"
#include "core/trace.h"
#include "kv/page_table.h"
#include "score/attention_totals.h"
#include "score/key_sketch.h"
#include "score/page_bounds.h"
#include "score/quant_copy.h"
#include "score/selector.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <numeric>

namespace hill {

struct context::layer_append {
    cold_append app;
    bool appended = false;
    std::vector<int32_t> place;      // positions placed hot, in reservation order
    std::vector<uint16_t> hits;      // their starting hit counts
    std::vector<uint32_t> slots;     // their reserved slots
};

context::context(const hill::model & m, const context_params & p, thread_pool & pool)
    : model_(m), params_(p), pool_(pool) {
    const hparams & hp = m.hp();
    if (p.n_ctx <= 0) fail_usage("context size must be > 0, got {}", p.n_ctx);
    if (p.n_seq < 1) fail_usage("the number of sequences must be >= 1, got {}", p.n_seq);
    if (hp.position == position_kind::learned && p.n_ctx > hp.n_ctx_train) {
        fail_usage("a context of {} tokens (-c) exceeds the {} positions this {} model has learned; use -c {} or less",
                   p.n_ctx, hp.n_ctx_train, hp.arch, hp.n_ctx_train);
    }
    if (p.kv_type != ggml_type::f16 && p.kv_type != ggml_type::f32) {
        fail_usage("KV cache type must be f16 or f32, got {}", ggml_type_name(p.kv_type));
    }
    HILL_ASSERT(p.n_batch > 0 && p.n_segment > 0);
    policy_ = make_policy(p.policy, hp.n_head_kv);
    const uint64_t copy_bytes = scoring_copy_bytes(m, p);
    const bool with_copy = copy_bytes > 0;
    check_metadata_memory(m, p);
    // With a scoring copy over a plain SSD nothing scans the cold keys: a gathered token is one read of
    // its K and V together (token records, kv/kv_layout.h); otherwise the keys are scanned apart from the
    // values (the emulator scores them where they live).
    const bool token_records = with_copy && p.storage.kind == csd::storage_kind::plain;
    layout_ = kv_layout{hp.n_layer, hp.n_embd_kv(), p.kv_type, token_records ? cold_records::token : cold_records::split};

    // The hot pool: the budget's slots per layer, at most every token of every sequence — a sliding-window
    // layer's at most its windows (layer_slot_caps): what it does not need goes to the other layers.
    const uint64_t per_slot = uint64_t(hp.n_layer) * layout_.token_layer_bytes();
    const std::vector<int64_t> caps = layer_slot_caps(m, p);
    uint64_t all_cells = 0;  // token-layers the hot pool would need to hold everything
    for (const int64_t c : caps) all_cells += uint64_t(c);
    const uint64_t budget =
        p.kv_host_budget == 0 ? all_cells * layout_.token_layer_bytes() + copy_bytes : p.kv_host_budget;
    const uint64_t cells_fit = budget > copy_bytes ? (budget - copy_bytes) / layout_.token_layer_bytes() : 0;
    // The largest count S of slots per layer whose min(S, cap) over the layers fits the budget.
    const auto cells_for = [&](int64_t slots) {
        uint64_t n = 0;
        for (const int64_t c : caps) n += uint64_t(std::min(slots, c));
        return n;
    };
    int64_t hot_slots = 0;
    for (int64_t lo = 0, hi = *std::max_element(caps.begin(), caps.end()); lo <= hi;) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (cells_for(mid) <= cells_fit) {
            hot_slots = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    std::vector<int64_t> layer_slots(caps.size());
    bool cold = false;
    for (size_t il = 0; il < caps.size(); ++il) {
        layer_slots[il] = std::min(hot_slots, caps[il]);
        cold = cold || layer_slots[il] < caps[il];
    }
    const std::string seqs = p.n_seq > 1 ? fmt::format(" for {} sequences", p.n_seq) : std::string();
    if (cold && p.kv_dir.empty()) {
        fail_usage("the KV cache of {} tokens{} needs {}{} but the host budget is {}; give a --kv-dir for the cold pool "
                   "or raise --kv-host-budget", p.n_ctx, seqs,
                   format_bytes(all_cells * layout_.token_layer_bytes() + copy_bytes),
                   with_copy ? fmt::format(" (with the {} scoring copy of the keys)", format_bytes(copy_bytes)) : "",
                   format_bytes(budget));
    }
    const policy_params & pp = p.policy;
    const int64_t per_seq_min = std::min<int64_t>(int64_t(pp.n_sinks) + pp.n_window + 1, p.n_ctx);
    for (size_t il = 0; il < caps.size() && cold; ++il) {
        // The sinks, the window and the new token of each sequence; a sliding layer's at most its windows.
        if (layer_slots[il] >= std::min(int64_t(p.n_seq) * per_seq_min, caps[il])) continue;
        const std::string copy = with_copy ? fmt::format(" after the {} scoring copy of the keys", format_bytes(copy_bytes))
                                           : std::string();
        // The smallest budget that holds them, as a value to type (whole KiB, rounded up); a wider copy than
        // INT2 also names the narrower one and the budget that holds them beside it.
        const uint64_t needed_cells = cells_for(int64_t(p.n_seq) * per_seq_min) * layout_.token_layer_bytes();
        const auto as_flag = [](uint64_t bytes) { return fmt::format("{}K", (bytes + 1023) / 1024); };
        context_params narrow = p;
        narrow.score_copy_bits = 2;
        const uint64_t narrow_bytes = scoring_copy_bytes(m, narrow);
        const std::string hint = with_copy && scoring_copy_bits(m, p) > 2 && scoring_copy_bits(m, narrow) == 2
                                     ? fmt::format(", or {} with the {} INT2 copy (--score-copy int2)",
                                                   as_flag(narrow_bytes + needed_cells), format_bytes(narrow_bytes))
                                     : std::string();
        fail_usage(
            "--kv-host-budget {} holds {} tokens per layer{}; at least {} are needed{} (the {} sinks, the {}-token "
            "window and the new token of each sequence stay hot; {} per token): give --kv-host-budget {} or more{}",
            format_bytes(budget), hot_slots, copy, int64_t(p.n_seq) * per_seq_min, seqs, pp.n_sinks, pp.n_window,
            format_bytes(per_slot), as_flag(copy_bytes + needed_cells), hint);
    }
    // The device tier's cache takes its share of each cold layer's slots, leaving the hot pool its minimum.
    std::vector<int64_t> pool_slots = layer_slots, cache_rows(caps.size(), 0);
    if (!(p.device_cache_share >= 0.0 && p.device_cache_share < 1.0)) {  // NaN too
        fail_usage("the device cache's share of the hot slots must be in [0, 1), got {}", p.device_cache_share);
    }
    if (!cold && p.device_cache_share > 0.0) {
        log_warn("the device cache (--device-cache) caches cold tokens, and with this budget every token is hot (no "
                 "cold tier): it is not used");
    }
    if (cold && p.device_cache_share > 0.0 && p.storage.kind != csd::storage_kind::plain) {
        log_warn("the device cache (--device-cache) works over the plain SSD only: the {} runs without it",
                 csd::name(p.storage.kind));
    }
    if (cold && p.storage.kind == csd::storage_kind::plain) {
        for (size_t il = 0; il < caps.size(); ++il) {
            if (layer_slots[il] >= caps[il]) continue;  // everything of the layer is hot
            const int64_t keep = std::min(int64_t(p.n_seq) * per_seq_min, caps[il]);
            cache_rows[il] = std::clamp<int64_t>(int64_t(p.device_cache_share * double(layer_slots[il])), 0,
                                                 layer_slots[il] - keep);
            pool_slots[il] = layer_slots[il] - cache_rows[il];
        }
    }
    std::vector<int32_t> window(size_t(hp.n_layer));  // sliding layers keep only their window (kv/kv_cells.h)
    for (int il = 0; il < hp.n_layer; ++il) window[size_t(il)] = std::min(hp.window(il), p.n_ctx);
    io_queue_params io;
    io.fault_hook = p.io_faults;
    if (cold) {
        // Every token of every sequence has its cold copy (a sliding layer: of its window): whole groups of
        // page_tokens rows.
        uint64_t groups = 0;
        for (const int32_t w : window) groups += uint64_t(cold_logs::groups_held(layout_, p.n_ctx, w));
        const uint64_t n_pages = uint64_t(p.n_seq) * uint64_t(layout_.pages_per_group()) * groups;
        if (n_pages >= cold_pool::no_page) fail_usage("a cold pool of {} pages is too large", n_pages);
        cold_pool_params cp;
        cp.kv_dir = p.kv_dir;
        cp.page_bytes = layout_.page_bytes();
        cp.n_pages = uint32_t(n_pages);
        cold_ = std::make_unique<cold_pool>(cp);  // checks the free space before anything large is allocated
        writer_ = std::make_unique<cold_writer>(*cold_, io);
        logs_ = std::make_unique<cold_logs>(*writer_, layout_, p.n_seq, p.n_ctx, cold_logs::open_groups_for(layout_),
                                            window);
        reader_ = std::make_unique<cold_reader>(*cold_, io);
        gather_ = std::make_unique<cold_gather>(*reader_, layout_);
    }
    if (policy_->scores_from() == copy_kind::attention) {
        copy_ = std::make_unique<attention_totals>(p.n_seq, hp.n_layer, p.n_ctx);
    } else if (policy_->scores_from() == copy_kind::page_bounds || policy_->scores_from() == copy_kind::chunk_bounds) {
        // LeoAM's chunks: 1 to 8 pages, candidates sized from the policy's α.
        const page_chunking chunks = policy_->scores_from() == copy_kind::chunk_bounds
                                         ? page_chunking{.alpha = pp.alpha, .max_pages = 8}
                                         : page_chunking{};
        copy_ = std::make_unique<page_bounds>(attn_shape(), pp.score, pp.page_size, p.n_seq, hp.n_layer, p.n_ctx,
                                              pool.n_threads(), chunks);
    } else if (policy_->scores_from() == copy_kind::sketch) {
        copy_ = make_key_sketch(m, pp, p.n_seq, p.n_ctx);
    } else if (with_copy) {
        copy_ = std::make_unique<quant_copy>(attn_shape(), pp.score, scoring_copy_bits(m, p), p.n_seq, hp.n_layer, p.n_ctx,
                                             pool.n_threads());
    }
    if (p.keep_prefill_importance) {
        const size_t n_kept = size_t(p.n_seq) * size_t(hp.n_layer) * size_t(p.n_ctx);
        try {
            importance_kept_.assign(n_kept, 0.0f);
        } catch (const std::bad_alloc &) {
            fail_input(
                "cannot allocate the kept prefill importance: {} bytes for {} sequences × {} layers × {} positions",
                n_kept * sizeof(float), p.n_seq, hp.n_layer, p.n_ctx);
        }
    }
    const int64_t pool_max = *std::max_element(pool_slots.begin(), pool_slots.end());
    cells_ = std::make_unique<kv_cells>(kv_cells_params{hp.n_layer, p.n_seq, p.n_ctx, pool_max, window, pool_slots});
    hot_min_ = std::min<int64_t>(pool_max, int64_t(p.n_seq) * per_seq_min);
    dcache_ = hill::device_cache(p.n_seq, p.n_ctx, pool_slots, cache_rows);
    if (cold && p.storage.kind == csd::storage_kind::emulator) {
        planner_params planned = p.planner;
        if (planned.cal.f_c_bps <= 0.0) planned.cal = default_calibration(p.storage.profile);
        planner_ = std::make_unique<hill::planner>(planned, pp.alpha, int64_t(layout_.row_bytes()),
                                                   int64_t(layout_.token_layer_bytes()), hp.n_layer);
    }
    hot_ = std::make_unique<hot_arena>(layout_, layer_slots, ordered_gather::window_tokens);
    ordered_ = std::make_unique<ordered_gather>(*hot_);
    const int64_t n_rows_max = std::max<int64_t>(p.n_batch, p.n_seq);
    forward_ = p.forward ? p.forward(m, pool, n_rows_max) : make_forward(m, pool, n_rows_max, p.n_ctx);
    if (auto * q = dynamic_cast<quant_copy *>(copy_.get()); q != nullptr && hp.position == position_kind::rope &&
                                                           forward_->keys_from_model()) {
        // The stored keys are rotated: the copy's channel scales bound the rotation (score/quant_copy.h).
        std::vector<std::vector<double>> inv_freq;
        for (int il = 0; il < hp.n_layer; ++il) inv_freq.push_back(hp.rope_inv_freq(il, p.n_ctx));
        q->set_rope(hp.rope_pairs, std::move(inv_freq));
    }
    storage_ = csd::make_device(p.storage, cold_.get(), layout_, attn_shape(), pool);
    // A prefetch for the next decode step outlives its step: no page may leave a log under it.
    if (logs_ != nullptr) logs_->set_before_free([this] { storage_->drop_prefetches(); });
    device_ = make_cpu_device_tier(pool, std::max<int64_t>(std::min(p.n_segment, p.n_ctx), p.n_seq), hp.n_embd_q(),
                                   hp.n_head);
    step_ = std::make_unique<decode_step>(m, *forward_, *cells_, *hot_, logs_.get(), reader_.get(), copy_.get(),
                                          dcache_.empty() ? nullptr : &dcache_, *storage_, *device_, pool);
    set_policy(p.policy);
}

context::~context() = default;

std::unique_ptr<hill::scoring_copy> context::make_key_sketch(const hill::model & m, const policy_params & pp, int n_seq,
                                                             int64_t n_ctx) const {
    // InfiniGen's channels, chosen from each layer's weights (score/key_sketch.h); RoPE pairs stay together.
    const hparams & hp = m.hp();
    const attention_shape s = attn_shape();
    const int r = key_sketch::channels_for(hp.head_dim);
    const sketch_pairing pairing = hp.position != position_kind::rope ? sketch_pairing::none
                                   : hp.rope_pairs == rope_layout::adjacent_pairs ? sketch_pairing::adjacent
                                                                                   : sketch_pairing::half;
    std::vector<float> imp(size_t(hp.n_head_kv) * size_t(hp.head_dim));
    std::vector<int32_t> channels(size_t(hp.n_layer) * size_t(hp.n_head_kv) * size_t(r));
    for (int il = 0; il < hp.n_layer; ++il) {
        const layer_weights & l = m.layers()[size_t(il)];
        sketch_channel_importance(l.wq, l.wk, s, imp.data());
        sketch_choose_channels(imp.data(), hp.n_head_kv, hp.head_dim, r, pairing,
                               channels.data() + size_t(il) * size_t(hp.n_head_kv) * size_t(r));
    }
    return std::make_unique<key_sketch>(s, pp.score, r, std::move(channels), pp.n_sinks, pp.n_window, n_seq, hp.n_layer,
                                        n_ctx, pool_.n_threads());
}

int context::scoring_copy_bits(const hill::model & m, const context_params & p) {
    // Over a plain SSD a scoring policy scores from the scoring copy of the keys in DRAM
    // (score/quant_copy.h), which the budget holds beside the hot pool.
    const hparams & hp = m.hp();
    const auto pol = make_policy(p.policy, hp.n_head_kv);
    if (p.score_copy_bits == 0 || p.storage.kind != csd::storage_kind::plain || !pol->uses_scores() ||
        pol->scores_from() != copy_kind::tier) {
        return 0;
    }
    for (const int bits : {p.score_copy_bits, 4}) {
        if (quant_copy::supports(hp.head_dim, bits)) return bits;
    }
    return 0;
}

uint64_t context::scoring_copy_bytes(const hill::model & m, const context_params & p) {
    const hparams & hp = m.hp();
    const attention_shape s{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f};
    const copy_kind kind = make_policy(p.policy, hp.n_head_kv)->scores_from();
    if (kind == copy_kind::attention) return attention_totals::bytes_for(p.n_seq, hp.n_layer, p.n_ctx);
    if (kind == copy_kind::page_bounds || kind == copy_kind::chunk_bounds) {
        return page_bounds::bytes_for(s, p.policy.page_size, p.n_seq, hp.n_layer, p.n_ctx);
    }
    if (kind == copy_kind::sketch) return key_sketch::bytes_for(s, key_sketch::channels_for(hp.head_dim), p.n_seq, hp.n_layer, p.n_ctx);
    const int bits = scoring_copy_bits(m, p);
    return bits == 0 ? 0 : quant_copy::bytes_for(s, bits, p.n_seq, hp.n_layer, p.n_ctx);
}

std::vector<int64_t> context::layer_slot_caps(const hill::model & m, const context_params & p) {
    const hparams & hp = m.hp();
    std::vector<int64_t> caps(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        const int64_t w = hp.window(il);
        caps[size_t(il)] = int64_t(p.n_seq) * (w > 0 ? std::min<int64_t>(w + 2, p.n_ctx) : int64_t(p.n_ctx));
    }
    return caps;
}

uint64_t context::host_budget_for(const hill::model & m, const context_params & p, int64_t hot_tokens) {
    uint64_t cells = 0;
    for (const int64_t c : layer_slot_caps(m, p)) cells += uint64_t(std::min(hot_tokens, c));
    return cells * (m.hp().kv_bytes_per_token(p.kv_type) / uint64_t(m.hp().n_layer)) + scoring_copy_bytes(m, p);
}

attention_shape context::attn_shape() const { return model_.hp().attn_shape(); }

void context::set_policy(const policy_params & p) {
    auto next = make_policy(p, model_.hp().n_head_kv);
    // A copy is made with the context, from every key as it arrives: a policy that scores from another
    // kind of copy needs a context made for it (the prompt cache moves a prefill into one).
    if (policy_ != nullptr && next->uses_scores() && next->scores_from() != policy_->scores_from() &&
        (copy_ != nullptr || next->scores_from() != copy_kind::tier)) {
        const copy_kind k = next->scores_from();
        fail_usage("policy '{}' scores from {}, but this context was made for policy '{}'{}: make a new context for it",
                   p.name, k == copy_kind::page_bounds ? "page bounds of the keys"
                           : k == copy_kind::chunk_bounds ? "chunk bounds of the keys"
                           : k == copy_kind::attention ? "the accumulated attention of its tokens"
                           : k == copy_kind::sketch ? "a key sketch" : "the KV tiers",
                   policy_->name(), copy_ != nullptr ? fmt::format(" and keeps {}", copy_->describe()) : std::string());
    }
    step_->set_policy(*next, params_.storage.kind);  // checks the storage device can score as the policy asks
    storage_->drop_prefetches();  // the last step's hint for the next is the old policy's
    if (planner_ != nullptr && p.alpha != planner_->alpha()) {
        planner_ = std::make_unique<hill::planner>(planner_->params(), p.alpha, int64_t(layout_.row_bytes()),
                                                   int64_t(layout_.token_layer_bytes()), layout_.n_layer);
    }
    if (copy_ != nullptr) copy_->set_params(p.score);  // the copy was made under the first policy's
    policy_ = std::move(next);
    params_.policy = p;
    step_->reset_stats();
    importance_scorer_.reset();
    if (policy_->wants_prefill_importance() || params_.keep_prefill_importance) {
        importance_scorer_ = std::make_unique<host_scorer>(attn_shape(), p.score, pool_.n_threads());
    }
}

const kv_io_stats & context::io_stats() const {
    io_stats_.cold_write_bytes = writer_ != nullptr ? writer_->write_bytes() : 0;
    io_stats_.cold_read_bytes = reader_ != nullptr ? reader_->io().stats().bytes_read : 0;
    return io_stats_;
}

int64_t context::n_cold_cells(int seq) const {
    int64_t n = 0;
    for (int s = 0; s < cells_->n_seq(); ++s) {
        if (seq >= 0 && s != seq) continue;
        for (int il = 0; il < cells_->n_layer(); ++il) {
            const std::span<const uint32_t> slots = cells_->hot_slots(s, il).subspan(size_t(cells_->n_dropped(s, il)));
            for (const uint32_t slot : slots) n += slot == kv_cells::no_slot ? 1 : 0;
        }
    }
    return n;
}

int64_t context::n_dropped_cells(int seq) const {
    int64_t n = 0;
    for (int s = 0; s < cells_->n_seq(); ++s) {
        if (seq >= 0 && s != seq) continue;
        for (int il = 0; il < cells_->n_layer(); ++il) n += cells_->n_dropped(s, il);
    }
    return n;
}

uint64_t context::cold_bytes() const {
    return cold_ == nullptr ? 0 : uint64_t(cold_->n_pages() - cold_->n_free()) * cold_->page_bytes();
}

template <class F>
void context::for_each_stored(int seq, int il, bool with_v, F && fn) {
    kv_page_table t;
    const cold_log_view log = logs_ != nullptr ? logs_->log(seq, il) : cold_log_view{};
    t.add(*cells_, logs_ != nullptr ? &log : nullptr, seq, il, {}, true);
    kv_view hot = hot_->view(il);
    if (!with_v) hot.v = nullptr;
    if (!t.hot_pos.empty()) {
        hot.n_kv = int64_t(t.hot_pos.size());
        fn(hot, t.hot_slot.data(), t.hot_pos.data());
    }
    if (!t.open_pos.empty()) {
        fn(kv_view{layout_.type, log.open_k, with_v ? log.open_v : nullptr, int64_t(t.open_pos.size()), layout_.n_embd_kv},
           t.open_row.data(), t.open_pos.data());
    }
    if (!t.disk_pos.empty()) {
        gather_->begin(log.groups, t.disk_pos, with_v);
        kv_batch b;
        while (gather_->next(b)) fn(b.view, b.rows, b.positions);
    }
}

void context::check_metadata_memory(const hill::model & m, const context_params & p) {
    const uint64_t copy_bytes = scoring_copy_bytes(m, p);
    const bool with_copy = copy_bytes > 0;
    const uint64_t meta_bytes =
        uint64_t(p.n_seq) * uint64_t(m.hp().n_layer) * uint64_t(p.n_ctx) * kv_cells::cell_bytes + copy_bytes;
    if (const uint64_t avail = available_memory_bytes(); avail > 0 && meta_bytes > avail) {
        fail_usage(
            "a context of {} tokens{} needs {} of memory for its KV metadata ({} bytes per token and layer for the "
            "KV cells{}) but {} is available: lower the context size",
            p.n_ctx, p.n_seq > 1 ? fmt::format(" for each of {} sequences", p.n_seq) : std::string(),
            format_bytes(meta_bytes), kv_cells::cell_bytes,
            with_copy ? fmt::format(", {} for the scoring copy of the keys", format_bytes(copy_bytes)) : "",
            format_bytes(avail));
    }
}

context::layer_work context::prefill_work(int il, int64_t p0, int64_t n) const {
    const hparams & hp = model_.hp();
    const double e = double(hp.n_embd), q = double(hp.n_embd_q()), kv = double(hp.n_embd_kv());
    // (query, key) pairs: query t (position p0 + t) sees p0 + t + 1 keys, at most w of a sliding window.
    const int64_t w = hp.window(il);
    const int64_t a = p0 + 1, k = w == 0 ? n : std::clamp<int64_t>(w - a, 0, n);  // the first k see all
    const double pairs = double(k) * double(a) + double(k) * double(k - 1) / 2 + double(n - k) * double(w);
    return {.qkv = double(n) * e * (q + 2 * kv),
            .attend = 2 * q * pairs,
            .rest = double(n) * (q * e + 3 * e * double(hp.n_ff))};
}

void context::prefill(int seq, std::span<const int32_t> tokens, bool logits_all, float * logits,
                      const std::function<void(double, double)> & progress) {
    const int64_t n = int64_t(tokens.size());
    if (n == 0) return;
    HILL_ASSERT(seq >= 0 && seq < params_.n_seq);
    const int64_t n_past0 = n_past(seq);
    if (n_past0 + n > params_.n_ctx) {
        fail_usage("{} tokens after {} already in the context exceed the context size of {} tokens (-c)", n, n_past0,
                   params_.n_ctx);
    }
    const int32_t n_vocab = model_.hp().n_vocab;
    for (const int32_t t : tokens) {
        if (t < 0 || t >= n_vocab) fail_input("token id {} is out of range [0, {})", t, n_vocab);
    }
    cold_logs::snapshot snap;
    if (logs_ != nullptr) logs_->take_snapshot(seq, snap);
    const int n_layer = model_.hp().n_layer;
    const auto segment_work = [&](int64_t s0) {
        double w = 0;
        for (int il = 0; il < n_layer; ++il)
            w += prefill_work(il, n_past0 + s0, std::min<int64_t>(params_.n_segment, n - s0)).total();
        return w;
    };
    double total = 0;
    for (int64_t s0 = 0; s0 < n; s0 += params_.n_segment) total += segment_work(s0);
    try {
        double before = 0;  // the work of the segments done
        for (int64_t s0 = 0; s0 < n; s0 += params_.n_segment) {
            const int64_t ns = std::min<int64_t>(params_.n_segment, n - s0);
            float * out = logits == nullptr ? nullptr : logits + (logits_all ? s0 * n_vocab : 0);
            prefill_segment(seq, tokens.data() + s0, ns, logits_all, out, [&](double done) {
                if (progress) progress(std::min(before + done, total), total);
            });
            before += segment_work(s0);
        }
    } catch (...) {
        // Back to the sequence as it was: its later tokens forgotten, its cold log restored (no I/O) — or,
        // when a committed segment moved the sliding windows past tokens the sequence needs at n_past0,
        // emptied.
        const int64_t back = cells_->can_truncate(seq, n_past0) ? n_past0 : 0;
        if (back != n_past0) log_warn("prefill failed after its sliding-window layers dropped the window of the {} "
                                      "tokens before it: sequence {} is emptied", n_past0, seq);
        if (logs_ != nullptr) logs_->restore(snap);
        cells_->truncate(seq, back);
        if (logs_ != nullptr && back == 0) logs_->truncate(seq, 0, *reader_);
        throw;
    }
}

void context::prefill_segment(int seq, const int32_t * tokens, int64_t n, bool logits_all, float * logits,
                              const std::function<void(double)> & progress) {
    const hparams & hp = model_.hp();
    const int64_t n_embd = hp.n_embd, n_kv = hp.n_embd_kv(), n_q = hp.n_embd_q();
    const size_t rb = layout_.row_bytes();
    const int64_t p0 = n_past(seq), nb = params_.n_batch;
    trace_scope span("prefill", "prefill", {{"seq", seq}, {"p0", p0}, {"tokens", n}});
    // The segment's residual stream f32 [n, n_embd]; one layer's K and V of it, kv type [n, n_embd_kv];
    // its queries and then (in place) their attention outputs, f32 [n, n_embd_q].
    std::vector<float> x(size_t(n) * size_t(n_embd));
    std::vector<uint8_t> layer_k(size_t(n) * rb), layer_v(size_t(n) * rb);
    std::vector<float> qa(size_t(n) * size_t(n_q));
    std::vector<float> kc(size_t(std::min(n, nb)) * size_t(n_kv)), vc(kc.size());
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(p0 + i);
    {
        trace_scope s("embed", "forward", {{"tokens", n}});
        for (int64_t c0 = 0; c0 < n; c0 += nb) {
            forward_->embed(tokens + c0, pos.data() + c0, std::min(nb, n - c0), x.data() + c0 * n_embd);
        }
    }
    // Prefill importance (placement hkm): the importance scores of every token under the segment's last
    // W queries (at least one), summed.
    const bool measure = importance_scorer_ != nullptr;
    const int64_t n_obs = std::clamp<int64_t>(params_.policy.n_window, 1, n);
    std::vector<float> q_obs(measure ? size_t(n_obs) * size_t(n_q) : 0);
    std::vector<float> importance(measure ? size_t(p0 + n) : 0);
    std::vector<float> seg_scores;
    // Room for this sequence's window and sinks and the next step's appends, in the planned hot pool.
    plan_capacity(n);
    make_room(room_for(seq, p0, p0 + n));

    std::vector<layer_append> appends(size_t(hp.n_layer));
    double base = 0;  // the work of the layers done (prefill_work)
    try {
        for (int il = 0; il < hp.n_layer; ++il) {
            const layer_work work = prefill_work(il, p0, n);
            trace_scope layer_span("layer", "prefill", {{"layer", il}});
            trace_scope qkv_span("qkv", "forward", {{"layer", il}, {"tokens", n}});
            for (int64_t c0 = 0; c0 < n; c0 += nb) {
                const int64_t nc = std::min<int64_t>(nb, n - c0);
                forward_->attention_input(il, x.data() + c0 * n_embd, pos.data() + c0, nc, qa.data() + c0 * n_q, kc.data(),
                                          vc.data());
                for (int64_t t = 0; t < nc; ++t) {
                    layout_.store_row(kc.data() + t * n_kv, n_kv, layer_k.data() + size_t(c0 + t) * rb);
                    layout_.store_row(vc.data() + t * n_kv, n_kv, layer_v.data() + size_t(c0 + t) * rb);
                }
            }
            qkv_span.close();
            if (progress) progress(base + work.qkv);
            if (measure) std::copy(qa.end() - n_obs * n_q, qa.end(), q_obs.begin());
            // Every query of the segment attends to the sequence's tokens already in the tiers (one pass
            // over them), then causally to the segment's own KV.
            trace_scope attend_span("prefill attend", "prefill", {{"layer", il}, {"tokens", n}, {"context", p0 + n}});
            // The attention runs in parts of keys with a stop check (progress) between them, so that a stop
            // lands within it rather than after it (an 8K-token segment's takes seconds at a 7B shape):
            // windows of the earlier tokens, parts of them and of the segment's own keys.
            constexpr int64_t attend_part = 2 * attention_key_split;
            // The attention's progress: (query, key) pairs attended (at most the layer's: a sliding window's
            // queries see fewer keys than counted here). Keys of the earlier tokens are seen by all n queries;
            // the first j of the segment's own keys by j(j + 1)/2 + (n - j)·j pairs.
            double earlier_pairs = 0;
            const auto attended = [&](double pairs) {
                if (progress) progress(base + work.qkv + std::min(work.attend, 2 * double(n_q) * pairs));
            };
            const std::function<void(int64_t)> earlier_part = [&](int64_t j) {
                attended(earlier_pairs + double(n) * double(j));
            };
            const std::function<void(int64_t)> own_part = [&](int64_t j) {
                attended(earlier_pairs + double(j) * double(j + 1) / 2 + double(n - j) * double(j));
            };
            attention_shape shape = attn_shape();
            shape.window = hp.window(int(il));
            device_->begin(shape, qa.data(), n);
            // A sliding-window layer: the earlier tokens the segment's first query still sees.
            const int64_t w0 = shape.window > 0 ? std::max<int64_t>(0, p0 - shape.window + 1) : 0;
            if (p0 > w0) {
                // In position order, window by window (kv/ordered_gather.h): the same result wherever the
                // tokens live.
                kv_page_table t;
                const cold_log_view log = logs_ != nullptr ? logs_->log(seq, il) : cold_log_view{};
                std::vector<int32_t> in_window;
                for (int64_t j = w0; j < p0 && w0 > 0; ++j) in_window.push_back(int32_t(j));
                t.add(*cells_, logs_ != nullptr ? &log : nullptr, seq, il, in_window, true);
                if (!t.disk_pos.empty()) gather_->begin(log.groups, t.disk_pos, true);
                ordered_->begin(il, t, 0, kv_view{layout_.type, log.open_k, log.open_v, log.n_open, layout_.n_embd_kv},
                                [this](kv_batch & out) { return gather_->next(out); });
                kv_batch w;
                while (ordered_->next(w)) {
                    if (shape.window == 0) {
                        device_->attend_in_parts(w.view, w.rows, no_causal_mask, attend_part, earlier_part);
                    } else {
                        // Windowed: each run of consecutive positions [P, P + m) as keys j = position - P,
                        // which query t (position p0 + t) sees when j > (p0 - P) + t - window.
                        attend_position_runs(w, p0);
                    }
                    earlier_pairs += double(n) * double(w.view.n_kv);
                    attended(earlier_pairs);
                }
            }
            device_->attend_in_parts(kv_view{layout_.type, layer_k.data(), layer_v.data(), n, n_kv}, nullptr, 0,
                                     attend_part, own_part);
            device_->end(qa.data());
            attend_span.close();
            if (progress) progress(base + work.qkv + work.attend);  // a stop asked for ends the prefill here too
            if (measure) {
                trace_scope s("prefill importance", "prefill", {{"layer", il}, {"queries", n_obs}});
                std::fill(importance.begin(), importance.end(), 0.0f);
                const int n_group = importance_scorer_->n_group();
                const bool softmax = importance_scorer_->params().aggregate == score_aggregate::softmax;
                // Softmax aggregate: each observed query's normalizers over the sinks (when the segment
                // starts the sequence) and its window among the segment's keys, as a decode step takes
                // them (score/head_softmax.h); the weights (2^score) are what add up over the queries.
                std::vector<float> head_mass(softmax ? size_t(n_obs) * size_t(shape.n_head) : 0, -INFINITY);
                if (softmax) {
                    const policy_params & pp = params_.policy;
                    const int64_t s_end = p0 == 0 ? std::min<int64_t>(pp.n_sinks, n) : 0;
                    std::vector<int32_t> sw;
                    for (int64_t o = 0; o < n_obs; ++o) {
                        const int64_t r = n - n_obs + o;  // the query's row in the segment
                        sw.clear();
                        for (int64_t t = 0; t < s_end; ++t) sw.push_back(int32_t(t));
                        for (int64_t t = std::max(s_end, r - pp.n_window + 1); t <= r; ++t) sw.push_back(int32_t(t));
                        head_log2_mass(shape, q_obs.data() + o * n_q,
                                       kv_view{layout_.type, layer_k.data(), nullptr, int64_t(sw.size()), n_kv},
                                       sw.data(), head_mass.data() + o * shape.n_head);
                    }
                }
                const auto add = [&](const kv_view & view, const int32_t * rows, const int32_t * positions) {
                    seg_scores.resize(size_t(n_group) * size_t(view.n_kv));
                    for (int64_t o = 0; o < n_obs; ++o) {
                        importance_scorer_->prepare_query(q_obs.data() + o * n_q,
                                                          softmax ? head_mass.data() + o * shape.n_head : nullptr);
                        importance_scorer_->score(view, rows, seg_scores.data(), view.n_kv, pool_);
                        for (int g = 0; g < n_group; ++g) {
                            for (int64_t j = 0; j < view.n_kv; ++j) {
                                const float x = seg_scores[size_t(g) * size_t(view.n_kv) + size_t(j)];
                                importance[size_t(positions[j])] += softmax ? std::exp2(x) : x;
                            }
                        }
                    }
                };
                for_each_stored(seq, il, false, add);
                add(kv_view{layout_.type, layer_k.data(), nullptr, n, n_kv}, nullptr, pos.data());
            }
            {
                trace_scope s("output + ffn", "forward", {{"layer", il}, {"tokens", n}});
                for (int64_t c0 = 0; c0 < n; c0 += nb) {
                    const int64_t nc = std::min<int64_t>(nb, n - c0);
                    forward_->attention_output(il, x.data() + c0 * n_embd, qa.data() + c0 * n_q, nc);
                    if (progress) progress(base + work.qkv + work.attend + work.rest * double(c0 + nc) / double(n));
                }
            }
            append_layer(seq, il, p0, n, layer_k.data(), layer_v.data(), measure ? importance.data() : nullptr,
                         appends[size_t(il)]);
            base += work.total();
        }
        if (logits != nullptr) {
            trace_scope s("logits", "forward");
            const int64_t r0 = logits_all ? 0 : n - 1;
            for (int64_t c0 = r0; c0 < n; c0 += nb) {
                const int64_t nc = std::min<int64_t>(nb, n - c0);
                forward_->logits(x.data() + c0 * n_embd, nc, logits + (c0 - r0) * hp.n_vocab);
            }
        }
    } catch (...) {
        abandon(appends);
        throw;
    }
    commit(seq, n, appends);
}

void context::attend_position_runs(const kv_batch & w, int64_t p0) {
    const size_t eb = w.view.type == ggml_type::f16 ? 2 : 4;
    for (int64_t j0 = 0, j1 = 0; j0 < w.view.n_kv; j0 = j1) {
        j1 = j0 + 1;
        while (j1 < w.view.n_kv && w.positions[j1] == w.positions[j1 - 1] + 1) ++j1;
        kv_view part = w.view;
        part.n_kv = j1 - j0;
        if (w.rows == nullptr) {
            part.k = static_cast<const uint8_t *>(w.view.k) + size_t(j0 * w.view.row_stride) * eb;
            part.v = static_cast<const uint8_t *>(w.view.v) + size_t(j0 * w.view.row_stride) * eb;
        }
        device_->attend(part, w.rows != nullptr ? w.rows + j0 : nullptr, p0 - w.positions[j0]);
    }
}

void context::append_layer(int seq, int il, int64_t p0, int64_t n, const uint8_t * k, const uint8_t * v,
                           const float * importance, layer_append & out) {
    trace_scope span("prefill place", "migrate", {{"layer", il}, {"tokens", n}});
    const size_t rb = layout_.row_bytes();
    if (logs_ != nullptr) {
        logs_->prepare(seq, il, n, k, v, out.app);
        out.appended = true;
    }
    if (copy_ != nullptr) {
        copy_->write(seq, il, p0, n, layout_.type, k, layout_.n_embd_kv);
        if (copy_->wants_attention() && importance != nullptr) {
            // The segment's tokens start from the attention the prompt's last queries paid them.
            std::vector<int32_t> positions(static_cast<size_t>(n));
            std::iota(positions.begin(), positions.end(), int32_t(p0));
            copy_->observe(seq, il, positions, importance + p0);
        }
    }
    if (!importance_kept_.empty() && importance != nullptr) {
        std::copy_n(importance + p0, n, importance_kept_.begin() + ptrdiff_t(kept_index(seq, il)) + p0);
    }
    prefill_plan plan;
    policy_->place_prefill(prefill_place_input{il, seq, p0, p0 + n, cells_.get(), importance, cells_->n_hot_free(il),
                                               cells_->n_appending(std::array{std::pair{seq, p0 + n}})}, plan);

    // Evictions now: metadata only (the cold copies exist), so that their slots take the new hot set.
    // Without a cold tier the hot pool holds every token but those a sliding window leaves behind.
    const int64_t kept = cells_->window(il) > 0 ? p0 + n - cells_->window(il) : 0;
    HILL_ASSERT(logs_ != nullptr ||
                std::all_of(plan.evict.begin(), plan.evict.end(), [&](int32_t t) { return t < kept; }));
    for (const int32_t t : plan.evict) cells_->drop_hot(seq, il, t);
    io_stats_.prefill_evicted += plan.evict.size();
    out.place = plan.place;
    out.hits = plan.place_hits;
    out.slots.resize(plan.place.size());
    std::vector<int32_t> older;  // placed tokens from before the segment, read from the cold tier
    for (size_t i = 0; i < plan.place.size(); ++i) {
        const int32_t t = plan.place[i];
        const uint32_t slot = cells_->peek_free(il, int64_t(i));
        out.slots[i] = slot;
        if (t >= p0) {
            std::memcpy(hot_->k(il, slot), k + size_t(t - p0) * rb, rb);
            std::memcpy(hot_->v(il, slot), v + size_t(t - p0) * rb, rb);
        } else {
            older.push_back(t);
        }
    }
    if (older.empty()) return;
    // Older tokens placed hot again: from the open tail in RAM or from their pages.
    std::sort(older.begin(), older.end());
    kv_page_table tab;
    const cold_log_view log = logs_->log(seq, il);
    tab.add(*cells_, &log, seq, il, older, false);
    std::vector<std::pair<int32_t, uint32_t>> slot_of;  // (position, slot), ascending
    for (size_t i = 0; i < plan.place.size(); ++i) {
        if (plan.place[i] < p0) slot_of.emplace_back(plan.place[i], out.slots[i]);
    }
    std::sort(slot_of.begin(), slot_of.end());
    const auto copy_rows = [&](const kv_view & view, const int32_t * rows, const int32_t * positions, int64_t m) {
        for (int64_t j = 0; j < m; ++j) {
            const auto it = std::lower_bound(slot_of.begin(), slot_of.end(), std::make_pair(positions[j], uint32_t(0)));
            HILL_ASSERT(it != slot_of.end() && it->first == positions[j]);
            const uint32_t slot = it->second;
            const int64_t r = rows != nullptr ? rows[j] : j;
            std::memcpy(hot_->k(il, slot), static_cast<const uint8_t *>(view.k) + size_t(r) * rb, rb);
            std::memcpy(hot_->v(il, slot), static_cast<const uint8_t *>(view.v) + size_t(r) * rb, rb);
        }
    };
    copy_rows(kv_view{layout_.type, log.open_k, log.open_v, 0, layout_.n_embd_kv}, tab.open_row.data(),
              tab.open_pos.data(), int64_t(tab.open_pos.size()));
    if (!tab.disk_pos.empty()) {
        gather_->begin(log.groups, tab.disk_pos, true);
        kv_batch b;
        while (gather_->next(b)) copy_rows(b.view, b.rows, b.positions, b.view.n_kv);
    }
}

void context::commit(int seq, int64_t n, std::vector<layer_append> & layers) {
    const int64_t p0 = n_past(seq);
    cells_->grow(seq, n);
    for (int il = 0; il < int(layers.size()); ++il) {
        layer_append & L = layers[size_t(il)];
        for (size_t i = 0; i < L.place.size(); ++i) {
            const uint32_t s = cells_->take_hot(seq, il, L.place[i]);
            HILL_ASSERT(s == L.slots[i]);
            cells_->set_hits(seq, il, L.place[i], L.hits[i]);
        }
        io_stats_.prefill_placed_hot += L.place.size();
        if (L.appended) {
            logs_->apply(L.app);
            L.appended = false;
        }
    }
    cells_->drop_outside_windows(seq);
    (void)p0;
}

void context::abandon(std::vector<layer_append> & layers) {
    for (layer_append & L : layers) {
        if (L.appended) logs_->discard(L.app);
        L.appended = false;
    }
}

std::vector<int64_t> context::room_for(int seq, int64_t p0, int64_t n_after) const {
    const policy_params & p = policy_->params();
    const int64_t n_next = cells_->n_appending(std::array{std::pair{seq, n_after}});
    std::vector<int64_t> need(size_t(cells_->n_layer()), n_next);
    for (int il = 0; il < cells_->n_layer(); ++il) {
        const auto [s_end, w_begin] = middle_of(n_after, p.n_sinks, p.n_window);
        const int64_t kept = cells_->window(il) > 0 ? n_after - cells_->window(il) : 0;  // a sliding layer's
        const auto needs_slot = [&](int64_t t) {
            return t >= kept && (t >= p0 || !cells_->is_hot(seq, il, t)) ? 1 : 0;
        };
        for (int64_t t = 0; t < s_end; ++t) need[size_t(il)] += needs_slot(t);
        for (int64_t t = w_begin; t < n_after; ++t) need[size_t(il)] += needs_slot(t);
    }
    return need;
}

void context::make_room(std::span<const int64_t> need_free) {
    const policy_params & p = policy_->params();
    struct victim {
        uint16_t hits;
        int32_t pos;
        int seq;
    };
    std::vector<victim> v;
    for (int il = 0; il < cells_->n_layer(); ++il) {
        const int64_t over = std::max<int64_t>(0, cells_->n_hot(il) - cells_->hot_capacity());
        const int64_t need = need_free[size_t(il)] - cells_->n_hot_free(il) + over;
        if (need <= 0) continue;
        v.clear();
        for (int seq = 0; seq < cells_->n_seq(); ++seq) {
            const int64_t nt = cells_->n_tokens(seq);
            for (int64_t t = 0; t < nt; ++t) {
                if (!cells_->is_hot(seq, il, t) || t < p.n_sinks || t >= nt - p.n_window) continue;
                v.push_back({cells_->hits(seq, il, t), int32_t(t), seq});
            }
        }
        const size_t k = std::min(v.size(), size_t(need));
        HILL_ASSERT(logs_ != nullptr || k == 0);
        std::partial_sort(v.begin(), v.begin() + ptrdiff_t(k), v.end(), [](const victim & a, const victim & b) {
            if (a.hits != b.hits) return a.hits < b.hits;
            return a.pos != b.pos ? a.pos < b.pos : a.seq < b.seq;
        });
        for (size_t i = 0; i < k; ++i) {
            cells_->drop_hot(v[i].seq, il, v[i].pos);
            cells_->set_last_move(v[i].seq, il, v[i].pos, step_->step_counter(), false);
        }
        io_stats_.room_evicted += k;
    }
}

void context::decode(std::span<const int> seqs, std::span<const int32_t> tokens, float * logits) {
    HILL_ASSERT(seqs.size() == tokens.size() && !seqs.empty());
    const int32_t n_vocab = model_.hp().n_vocab;
    for (size_t b = 0; b < seqs.size(); ++b) {
        if (tokens[b] < 0 || tokens[b] >= n_vocab) fail_input("token id {} is out of range [0, {})", tokens[b], n_vocab);
        if (n_past(seqs[b]) >= params_.n_ctx) {
            fail_usage("1 token after {} already in the context exceeds the context size of {} tokens (-c)",
                       n_past(seqs[b]), params_.n_ctx);
        }
    }
    // The placement of every step and prefill leaves a free slot for each sequence that holds tokens;
    // nothing to do unless one decodes without any.
    plan_capacity(int64_t(seqs.size()));
    make_room(std::vector<int64_t>(size_t(cells_->n_layer()), int64_t(seqs.size())));
    const plan_snapshot before = plan_snap();
    step_->run(seqs, tokens, logits);
    plan_observe(before);
}

void context::plan_capacity(int64_t n_more) {
    if (planner_ == nullptr) return;
    if (!policy_->uses_scores()) {  // nothing to balance: the hot pool is a cache of the whole budget
        cells_->set_hot_capacity(cells_->hot_slots());
        return;
    }
    int64_t n = n_more;
    for (int s = 0; s < cells_->n_seq(); ++s) n += cells_->n_tokens(s);
    cells_->set_hot_capacity(planner_->capacity(n, hot_min_, cells_->hot_slots()));
}

context::plan_snapshot context::plan_snap() const {
    plan_snapshot s;
    if (planner_ == nullptr) return s;
    const step_stats & st = step_->stats();
    s.t_score_host_us = st.t_score_host_us;
    for (const step_layer_stats & L : st.layers) {
        s.attended_hot += L.n_attended_hot;
        s.attended_disk += L.n_attended_disk;
    }
    s.t_pass_us = storage_->counters().t_pass_us;
    int64_t n = 0;
    for (int q = 0; q < cells_->n_seq(); ++q) n += cells_->n_tokens(q);
    for (int il = 0; il < cells_->n_layer(); ++il) s.n_hot += cells_->n_hot(il);
    s.n_tokens = n * cells_->n_layer() - n_dropped_cells();  // the kept ones: a dropped token is in no tier
    return s;
}

void context::plan_observe(const plan_snapshot & before) {
    if (planner_ == nullptr || !policy_->uses_scores()) return;
    const plan_snapshot now = plan_snap();
    step_observation o;
    // The step attended its own new tokens too, hot from their append on: α_c's denominator counts them.
    o.n_hot = double(before.n_hot + (now.n_tokens - before.n_tokens));
    o.n_cold = double(before.n_tokens - before.n_hot);
    o.attended_hot = double(now.attended_hot - before.attended_hot);
    o.attended_cold = double(now.attended_disk - before.attended_disk);
    // T_cpu: the host's scoring, and the attended hot KV over B_c (attended in place here: not timed apart).
    o.t_cpu_s = double(now.t_score_host_us - before.t_score_host_us) / 1e6 +
                o.attended_hot * double(layout_.token_layer_bytes()) / planner_->params().cal.b_c_bps;
    o.t_csd_s = double(now.t_pass_us - before.t_pass_us) / 1e6;
    planner_->observe(o);
}

void context::truncate(int seq, int64_t n) {
    HILL_ASSERT(n >= 0 && n <= n_past(seq));
    if (!cells_->can_truncate(seq, n)) {
        fail_usage("cannot cut the sequence back from {} to {} tokens: its sliding-window layers (window {}) keep only "
                   "their last tokens, and those before position {} are gone; start the sequence again (prefill it "
                   "from 0)", n_past(seq), n, model_.hp().n_swa, n_past(seq) - model_.hp().n_swa);
    }
    if (logs_ != nullptr) logs_->truncate(seq, n, *reader_);  // may read, may fail: first
    cells_->truncate(seq, n);
    dcache_.forget(seq, n);
}

int64_t context::device_cache_rows() const {
    int64_t n = 0;
    for (int il = 0; il < cells_->n_layer(); ++il) n += dcache_.n_rows(il);
    return n;
}

void context::release(int seq) {
    const uint64_t cells = uint64_t(n_past(seq)) * uint64_t(cells_->n_layer()) - uint64_t(n_dropped_cells(seq));
    const uint64_t cold = uint64_t(n_cold_cells(seq));
    truncate(seq, 0);  // no I/O at 0: cannot fail
    io_stats_.released_cells += cells;
    io_stats_.released_cold_cells += cold;
}

void context::export_layer(int seq, int il, void * k_out, void * v_out) {
    const size_t rb = layout_.row_bytes();
    auto * ko = static_cast<uint8_t *>(k_out);
    auto * vo = static_cast<uint8_t *>(v_out);
    // A sliding layer's dropped tokens: zero rows (no query of the layer reads them again).
    const size_t n_dropped = size_t(cells_->n_dropped(seq, il));
    std::memset(ko, 0, n_dropped * rb);
    std::memset(vo, 0, n_dropped * rb);
    for_each_stored(seq, il, true, [&](const kv_view & view, const int32_t * rows, const int32_t * positions) {
        const auto * kb = static_cast<const uint8_t *>(view.k);
        const auto * vb = static_cast<const uint8_t *>(view.v);
        for (int64_t j = 0; j < view.n_kv; ++j) {
            const int64_t r = rows != nullptr ? rows[j] : j;
            std::memcpy(ko + size_t(positions[j]) * rb, kb + size_t(r) * rb, rb);
            std::memcpy(vo + size_t(positions[j]) * rb, vb + size_t(r) * rb, rb);
        }
    });
}

size_t context::kept_index(int seq, int il) const {
    HILL_ASSERT(seq >= 0 && seq < params_.n_seq && il >= 0 && il < layout_.n_layer);
    return (size_t(seq) * size_t(layout_.n_layer) + size_t(il)) * size_t(params_.n_ctx);
}

void context::export_importance(int seq, int il, float * out) const {
    HILL_ASSERT(params_.keep_prefill_importance);
    std::copy_n(importance_kept_.begin() + ptrdiff_t(kept_index(seq, il)), n_past(seq), out);
}

void context::import_kv(int seq, int64_t n, std::span<const void * const> k, std::span<const void * const> v,
                        std::span<const float * const> importance) {
    HILL_ASSERT(n_past(seq) == 0 && n > 0 && n <= params_.n_ctx);
    HILL_ASSERT(k.size() == size_t(layout_.n_layer) && v.size() == k.size());
    HILL_ASSERT(importance.empty() || importance.size() == k.size());
    trace_scope span("import kv", "prefill", {{"seq", seq}, {"tokens", n}});
    plan_capacity(n);
    make_room(room_for(seq, 0, n));
    std::vector<layer_append> appends(size_t(layout_.n_layer));
    try {
        for (int il = 0; il < layout_.n_layer; ++il) {
            append_layer(seq, il, 0, n, static_cast<const uint8_t *>(k[size_t(il)]),
                         static_cast<const uint8_t *>(v[size_t(il)]),
                         importance.empty() ? nullptr : importance[size_t(il)], appends[size_t(il)]);
        }
    } catch (...) {
        abandon(appends);
        throw;
    }
    commit(seq, n, appends);
}

}  // namespace hill
