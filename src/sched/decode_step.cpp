#include "sched/decode_step.h"

#include "core/error.h"
#include "core/fp16.h"
#include "core/sys_info.h"
#include "core/trace.h"
#include "policy/placement.h"
#include "score/selector.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hill {

namespace {

// Orders device_cache::scored_token by position (and finds a position among them).
struct by_pos {
    bool operator()(const device_cache::scored_token & x, const device_cache::scored_token & y) const { return x.pos < y.pos; }
    bool operator()(const device_cache::scored_token & x, int32_t t) const { return x.pos < t; }
};

}  // namespace

struct decode_step::prepared {
    struct layer_prep {
        std::vector<uint32_t> slot;                   // [B] the new tokens' reserved hot slots
        std::vector<cold_append> append;              // [B] their prepared cold-log rows
        std::vector<char> appended;                   // [B] append[b] is prepared (and not applied)
        std::vector<std::vector<int32_t>> attended;   // [B] the union of the sets, ascending
        std::vector<std::vector<int32_t>> counted;    // [B] the scored part: hit counts go up
        std::vector<std::vector<float>> rank;         // [B] f32 [|attended|] or empty: each attended token's
                                                      // score this step, its highest over the sets (the
                                                      // device cache keeps the highest: gather_and_attend)
        std::vector<std::vector<float>> weights;      // [B] f32 [|attended|]: the attention each attended token
                                                      // was paid, summed over heads (a copy that learns from it)
        placement_plan plan;
    };
    std::vector<layer_prep> layers;                   // [n_layer]
    std::vector<place_seq> place;                     // scratch: the batch for the policy's place()
    std::vector<std::pair<int32_t, uint32_t>> promo;  // scratch: one entry's promotions (position, index in plan), ascending
    aligned_buffer promo_k, promo_v;                  // kv type [n_layer, max_promotions, n_embd_kv]: promoted rows
    int64_t max_promotions = 0;                       // per layer and step
    bool pending = false;
};

decode_step::decode_step(const model & m, arch_forward & forward, kv_cells & cells, hot_arena & hot,
                         cold_logs * logs, cold_reader * reader, scoring_copy * copy, device_cache * cache,
                         csd::device & device, device_tier & dev, thread_pool & pool)
    : model_(m), forward_(forward), cells_(cells), hot_(hot), logs_(logs), reader_(reader), copy_(copy), cache_(cache),
      device_(device),
      dev_(dev), pool_(pool), layout_(hot.layout()), n_seq_max_(cells.n_seq()),
      hints_(cells.n_seq(), cells.n_layer()), prep_(std::make_unique<prepared>()),
      gather_(hot) {
    const hparams & hp = m.hp();
    shape_ = hp.attn_shape();
    const size_t nb = size_t(n_seq_max_);
    x_.resize(nb * size_t(hp.n_embd));
    q_.resize(nb * size_t(hp.n_embd_q()));
    k_.resize(nb * size_t(hp.n_embd_kv()));
    v_.resize(nb * size_t(hp.n_embd_kv()));
    attn_.resize(nb * size_t(hp.n_embd_q()));
    for (auto & by_layer : spec_sets_) by_layer.resize(nb);
    rows_.resize(nb * 2 * layout_.row_bytes());
    const size_t n_ctx = size_t(cells.n_ctx());
    scores_.resize(size_t(std::max(1, hp.n_head_kv)) * n_ctx);
    seg_scores_.resize(size_t(std::max(1, hp.n_head_kv)) * n_ctx);
    member_.assign(n_ctx, 0);
    last_attended_.resize(nb * size_t(hp.n_layer));
    prep_->layers.resize(size_t(hp.n_layer));
    for (auto & L : prep_->layers) {
        L.slot.resize(nb);
        L.append.resize(nb);
        L.appended.assign(nb, 0);
        L.attended.resize(nb);
        L.counted.resize(nb);
        L.weights.resize(nb);
        L.rank.resize(nb);
    }
    if (copy_ != nullptr && copy_->wants_attention()) logits_.resize(size_t(hp.n_head) * n_ctx);
    stats_.layers.resize(size_t(hp.n_layer));
    stats_.seq_context.assign(size_t(n_seq_max_), 0);
    stats_.seq_attended.assign(size_t(n_seq_max_), 0);
}

decode_step::~decode_step() = default;

void decode_step::set_policy(const policy & pol, csd::storage_kind storage) {
    const policy_params & p = pol.params();
    if (pol.uses_scores() && pol.scores_from() == copy_kind::tier) csd::check_scoring(storage, p.score);
    policy_ = &pol;
    scorer_ = std::make_unique<host_scorer>(shape_, p.score, pool_.n_threads());
    HILL_ASSERT(scorer_->n_group() == pol.n_group() || !pol.uses_scores());
    // The per-step promotion budget, in tokens of one layer (policy_params::migrate_bytes).
    const uint64_t per_token = uint64_t(layout_.n_layer) * layout_.token_layer_bytes();
    const uint64_t budget = p.migrate_bytes > 0 ? p.migrate_bytes : uint64_t(cells_.hot_capacity()) * per_token / 16;
    // A step cannot promote more tokens than a layer's hot pool holds: a larger budget changes nothing,
    // and would size the staging buffers below by it (--migrate-budget 2G filled 2 GiB before the first token).
    const uint64_t hot = uint64_t(std::max<int64_t>(1, cells_.hot_slots()));
    prep_->max_promotions = int64_t(std::clamp<uint64_t>(budget / per_token, 1, hot));
    const size_t rows = size_t(layout_.n_layer) * size_t(prep_->max_promotions);
    prep_->promo_k = aligned_buffer(rows * layout_.row_bytes());
    prep_->promo_v = aligned_buffer(rows * layout_.row_bytes());
    head_mass_.assign(size_t(shape_.n_head), 0.0f);
    sw_pos_.clear();
    sw_pos_.reserve(size_t(std::max(0, p.n_sinks)) + size_t(std::max(0, p.n_window)) + 1);
    if (reader_ != nullptr && !sw_gather_) sw_gather_ = std::make_unique<cold_gather>(*reader_, layout_);
    sets_.assign(size_t(pol.n_group()), {});
    for (auto & s : sets_) s.reserve(size_t(cells_.n_ctx()));
    speculative_ = pol.uses_scores() && pol.scores_from() == copy_kind::sketch;
    hints_ = hint_gate(n_seq_max_, cells_.n_layer());  // another policy selects otherwise
    HILL_ASSERT(!speculative_ || copy_ != nullptr);
    if (speculative_) {
        q_spec_.resize(q_.size());
        for (auto & by_layer : spec_sets_) {
            for (auto & per_seq : by_layer) {
                per_seq.assign(size_t(pol.n_group()), {});
                for (auto & s : per_seq) s.reserve(size_t(cells_.n_ctx()));
            }
        }
        spec_union_.reserve(size_t(cells_.n_ctx()));
    }
    if (p.diag) {
        recall_ = std::make_unique<attention_recall>(shape_, cells_.n_ctx());
        if (reader_ != nullptr) diag_gather_ = std::make_unique<cold_gather>(*reader_, layout_);
        prev_.assign(size_t(n_seq_max_) * size_t(cells_.n_layer()), {});
    } else {
        recall_.reset();
        diag_gather_.reset();
        prev_.clear();
    }
}

void decode_step::reset_stats() {
    stats_ = step_stats{};
    stats_.layers.resize(size_t(cells_.n_layer()));
    stats_.seq_context.assign(size_t(n_seq_max_), 0);
    stats_.seq_attended.assign(size_t(n_seq_max_), 0);
}

void decode_step::run(std::span<const int> seqs, std::span<const int32_t> tokens, float * logits) {
    HILL_ASSERT(policy_ != nullptr && !prep_->pending);
    const auto nb = int64_t(seqs.size());
    HILL_ASSERT(nb >= 1 && nb <= n_seq_max_ && tokens.size() == seqs.size());
    seqs_.assign(seqs.begin(), seqs.end());
    pos_.resize(size_t(nb));
    for (int64_t b = 0; b < nb; ++b) {
        HILL_ASSERT(std::count(seqs.begin(), seqs.end(), seqs[size_t(b)]) == 1);
        pos_[size_t(b)] = int32_t(cells_.n_tokens(seqs[size_t(b)]));
        HILL_ASSERT(pos_[size_t(b)] < cells_.n_ctx());
    }
    for (int il = 0; il < cells_.n_layer(); ++il) HILL_ASSERT(cells_.n_hot_free(il) >= nb);
    std::vector<std::pair<int, int64_t>> after;
    for (int64_t b = 0; b < nb; ++b) after.emplace_back(seqs_[size_t(b)], pos_[size_t(b)] + 1);
    n_reserve_ = cells_.n_appending(after);
    prepared & prep = *prep_;
    prep.pending = true;
    if (cache_ != nullptr) cache_->begin_step(step_);
    trace_scope span("decode step", "decode", {{"step", int64_t(step_)}, {"batch", nb}});
    const int64_t t_step = time_us();
    try {
        int64_t t0 = t_step;
        {
            trace_scope s("embed", "forward");
            forward_.embed(tokens.data(), pos_.data(), nb, x_.data());
        }
        stats_.t_forward_us += uint64_t(time_us() - t0);
        for (int il = 0; il < cells_.n_layer(); ++il) {
            trace_scope s("layer", "decode", {{"layer", il}});
            layer(il, prep);
        }
        t0 = time_us();
        {
            trace_scope s("logits", "forward");
            forward_.logits(x_.data(), nb, logits);
        }
        stats_.t_forward_us += uint64_t(time_us() - t0);
    } catch (...) {
        device_.drop_prefetches();
        hints_.discard_step();
        discard(prep);
        ++stats_.n_failed;
        span.arg("failed", 1);
        throw;
    }
    device_.end_step();
    // The cost probe measures the steps that could send hints (a cold tier, a policy that scores, a
    // device that reads ahead): its time per decoded token.
    if (logs_ != nullptr && policy_->uses_scores() && device_.reads_ahead()) {
        ++stats_.hint_steps;
        if (!hints_.arm_on()) ++(hints_.probing() ? stats_.hint_steps_off_probing : stats_.hint_steps_off_chosen);
        hints_.end_step(std::max(double(time_us() - t_step), 1.0) * 1e-6 / double(nb));
    } else {
        hints_.end_step(0.0);
    }
    apply(prep);
}

void decode_step::prefetch_layer(int il, const prepared * next_step) {
    if (logs_ == nullptr || !policy_->uses_scores()) return;
    for (size_t b = 0; b < seqs_.size(); ++b) {
        const int seq = seqs_[b];
        const std::vector<int32_t> & last = next_step != nullptr
                                                ? next_step->layers[size_t(il)].attended[b]
                                                : last_attended_[size_t(seq) * size_t(cells_.n_layer()) + size_t(il)];
        // The positions the sequence still has (it may have been cut, or released and started again, since;
        // a sliding window drops the oldest): the hint for this step.
        const auto begin = std::lower_bound(last.begin(), last.end(), int32_t(cells_.n_dropped(seq, il)));
        const auto end = std::lower_bound(begin, last.end(), int32_t(cells_.n_tokens(seq)));
        if (begin == end) continue;
        const cold_log_view log = logs_->log(seq, il);
        table_.clear();
        table_.add(cells_, &log, seq, il, std::span<const int32_t>(&*begin, size_t(end - begin)), false, cache_);
        std::span<const int32_t> disk = table_.disk_pos_of(0);
        if (next_step != nullptr) {
            // For the next step: not the tokens this step's apply promotes into the hot pool.
            promoted_.clear();
            for (const auto & [s, t] : next_step->layers[size_t(il)].plan.promote) {
                if (s == seq) promoted_.push_back(t);
            }
            std::sort(promoted_.begin(), promoted_.end());
            carry_.clear();
            std::set_difference(disk.begin(), disk.end(), promoted_.begin(), promoted_.end(), std::back_inserter(carry_));
            disk = carry_;
        }
        if (disk.empty()) continue;
        if (next_step == nullptr) hints_.named(seq, il, disk);  // the next step names its own
        if (hints_.open(il, next_step != nullptr)) {
            const int64_t queued =
                device_.prefetch(csd::device_pass{il, seq, log.page_tokens, log.groups, disk}, next_step != nullptr);
            if (next_step != nullptr) stats_.hint_tokens_next_step += uint64_t(queued);
        } else if (next_step == nullptr && hints_.arm_on() && device_.reads_ahead()) {  // a hint that would have been read
            ++stats_.hints_gated;
        }
    }
}

void decode_step::speculate(int il) {
    const int64_t nb = int64_t(seqs_.size());
    if (model_.hp().window(il) > 0) return;  // a sliding-window layer attends its window (score_sequence)
    trace_scope span("speculate", "select", {{"layer", il}});
    int64_t t0 = time_us();
    forward_.speculative_query(il, x_.data(), pos_.data(), nb, q_spec_.data());
    stats_.t_forward_us += uint64_t(time_us() - t0);
    const int n_group = policy_->n_group();
    for (int64_t b = 0; b < nb; ++b) {
        const int seq = seqs_[size_t(b)];
        const int64_t n = pos_[size_t(b)] + 1;
        std::vector<std::vector<int32_t>> & sets = spec_sets_[size_t(il % 2)][size_t(b)];
        const float * scores = nullptr;
        t0 = time_us();
        if (policy_->wants_scores(n)) {
            // Positions [0, n − 1) are in layer il's sketch; the step's own token is not computed yet and
            // is attended by rule (an infinite score).
            copy_->prepare_query(seq, il, q_spec_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim), nullptr);
            copy_->score(n - 1, scores_.data(), n, pool_);
            for (int g = 0; g < n_group; ++g) {
                float * row = scores_.data() + size_t(g) * size_t(n);
                for (int64_t t = 0; t < n - 1; ++t) row[t] = round_score_f16(row[t]);
                row[n - 1] = INFINITY;
            }
            scores = scores_.data();
        }
        const int64_t t1 = time_us();
        stats_.t_score_host_us += uint64_t(t1 - t0);
        policy_->select(select_input{n, scores}, sets);
        stats_.t_select_us += uint64_t(time_us() - t1);
        if (logs_ == nullptr) continue;
        // The hint: the selection's tokens on disk (the own token is new and hot).
        spec_union_.clear();
        for (const std::vector<int32_t> & set : sets) spec_union_.insert(spec_union_.end(), set.begin(), set.end());
        if (n_group > 1) {
            std::sort(spec_union_.begin(), spec_union_.end());
            spec_union_.erase(std::unique(spec_union_.begin(), spec_union_.end()), spec_union_.end());
        }
        if (!spec_union_.empty() && spec_union_.back() == n - 1) spec_union_.pop_back();
        if (spec_union_.empty()) continue;
        const cold_log_view log = logs_->log(seq, il);
        table_.clear();
        table_.add(cells_, &log, seq, il, spec_union_, false, cache_);
        const std::span<const int32_t> disk = table_.disk_pos_of(0);
        if (!disk.empty()) device_.prefetch(csd::device_pass{il, seq, log.page_tokens, log.groups, disk}, false);
    }
}

void decode_step::layer(int il, prepared & prep) {
    const hparams & hp = model_.hp();
    const auto nb = int64_t(seqs_.size());
    const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
    const size_t rb = layout_.row_bytes();
    prepared::layer_prep & L = prep.layers[size_t(il)];
    // The pipeline: this layer's reads (the first layer's) and the next layer's start now, in the
    // background, from the previous step's selections; the read passes below take what they got.
    // Under speculation (infinigen) the next layer's hint is its speculated selection instead.
    if (il == 0) prefetch_layer(0);
    if (il + 1 < cells_.n_layer()) {
        if (speculative_) {
            speculate(il + 1);
        } else {
            prefetch_layer(il + 1);
        }
    } else if (il > 0) {
        prefetch_layer(0, &prep);  // the next step's first layer, from this step's selection
    }
    int64_t t0 = time_us();
    {
        trace_scope s("qkv", "forward", {{"layer", il}});
        forward_.attention_input(il, x_.data(), pos_.data(), nb, q_.data(), k_.data(), v_.data());
    }
    stats_.t_forward_us += uint64_t(time_us() - t0);

    // 1. The new tokens: a reserved hot slot each (the window is hot), and their cold-log rows.
    t0 = time_us();
    {
        trace_scope s("kv append", "write", {{"layer", il}, {"tokens", nb}});
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t * kr = rows_.data() + size_t(2 * b) * rb;
            uint8_t * vr = kr + rb;
            layout_.store_row(k_.data() + b * n_kv, n_kv, kr);
            layout_.store_row(v_.data() + b * n_kv, n_kv, vr);
            const uint32_t slot = cells_.peek_free(il, b);  // free: nobody reads it before apply
            std::memcpy(hot_.k(il, slot), kr, rb);
            std::memcpy(hot_.v(il, slot), vr, rb);
            L.slot[size_t(b)] = slot;
            if (logs_ != nullptr) {
                logs_->prepare(seqs_[size_t(b)], il, 1, kr, vr, L.append[size_t(b)]);
                L.appended[size_t(b)] = 1;
            }
            if (copy_ != nullptr) {
                copy_->write(seqs_[size_t(b)], il, pos_[size_t(b)], 1, layout_.type, kr, layout_.n_embd_kv);
            }
        }
    }
    stats_.t_write_us += uint64_t(time_us() - t0);

    // 2-3. Per sequence: scores, selection.
    prep.place.clear();
    for (int64_t b = 0; b < nb; ++b) {
        score_sequence(il, int(b), prep);
        prep.place.push_back({seqs_[size_t(b)], pos_[size_t(b)] + 1, L.counted[size_t(b)]});
    }
    // Placement for the batch: promotions into the slots left after the appends.
    t0 = time_us();
    {
        trace_scope s("place", "select", {{"layer", il}});
        const int64_t max_prom = prep.max_promotions;
        place_input in{il, step_, &cells_, prep.place, cells_.n_hot_free(il) - nb, n_reserve_, max_prom};
        policy_->place(in, L.plan);
        HILL_ASSERT(int64_t(L.plan.promote.size()) <= max_prom);
        s.arg("promote", int64_t(L.plan.promote.size()));
        s.arg("evict", int64_t(L.plan.evict.size()));
    }
    stats_.t_select_us += uint64_t(time_us() - t0);

    // 4. Gather and attend, per sequence.
    for (int64_t b = 0; b < nb; ++b) gather_and_attend(il, int(b), prep);

    // 5. The rest of the block.
    t0 = time_us();
    {
        trace_scope s("output + ffn", "forward", {{"layer", il}});
        forward_.attention_output(il, x_.data(), attn_.data(), nb);
    }
    stats_.t_forward_us += uint64_t(time_us() - t0);
    (void)n_q;
}

void decode_step::score_sequence(int il, int b, prepared & prep) {
    const int seq = seqs_[size_t(b)];
    const int64_t n = pos_[size_t(b)] + 1;
    const int n_group = policy_->n_group();
    prepared::layer_prep & L = prep.layers[size_t(il)];
    L.rank[size_t(b)].clear();
    if (const int64_t window = model_.hp().window(il); window > 0) {
        // A sliding-window layer attends to its window under every policy: that is its selection.
        std::vector<int32_t> & att = L.attended[size_t(b)];
        att.clear();
        for (int64_t t = std::max<int64_t>(0, n - window); t < n; ++t) att.push_back(int32_t(t));
        policy_->counted(att, n, L.counted[size_t(b)]);
        return;
    }
    const float * scores = nullptr;
    if (speculative_ && il > 0) {
        // Speculated one layer earlier (speculate()): no correction after the fact.
        const std::vector<std::vector<int32_t>> & spec = spec_sets_[size_t(il % 2)][size_t(b)];
        for (int g = 0; g < n_group; ++g) sets_[size_t(g)].assign(spec[size_t(g)].begin(), spec[size_t(g)].end());
    } else if (policy_->wants_scores(n) && copy_ != nullptr) {
        // Every token from the scoring copy in DRAM (the step's own key was written to it above).
        const int64_t t0 = time_us();
        trace_scope span("score host", "score", {{"layer", il}, {"seq", seq}, {"tokens", n}, {"copy", 1}});
        // The key sketch keeps its own softmax normalizer (score/key_sketch.h).
        copy_->prepare_query(seq, il, q_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim),
                             speculative_ ? nullptr : sink_window_mass(il, b, prep));
        copy_->score(n, scores_.data(), n, pool_);
        for (size_t i = 0, m = size_t(n_group) * size_t(n); i < m; ++i) scores_[i] = round_score_f16(scores_[i]);
        stats_.t_score_host_us += uint64_t(time_us() - t0);
        scores = scores_.data();
    } else if (policy_->wants_scores(n)) {
        const float * head_mass = sink_window_mass(il, b, prep);
        const cold_log_view log = logs_ != nullptr ? logs_->log(seq, il) : cold_log_view{};
        table_.clear();
        table_.add(cells_, logs_ != nullptr ? &log : nullptr, seq, il, {}, true, cache_);
        table_.add_hot(int32_t(n - 1), L.slot[size_t(b)]);
        const std::span<const int32_t> disk = table_.disk_pos_of(0);
        int64_t t0 = time_us();
        const auto n_in_dram = int64_t(table_.hot_pos.size() + table_.open_pos.size());
        trace_scope host_span("score host", "score", {{"layer", il}, {"seq", seq}, {"tokens", n_in_dram}});
        scorer_->prepare_query(q_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim), head_mass);
        csd::device_pass_guard guard(device_);
        if (!disk.empty()) device_.score_begin(csd::device_pass{il, seq, log.page_tokens, log.groups, disk}, *scorer_);
        // The host's share while the device works: the hot tokens, then the open tail's.
        const auto host_region = [&](const kv_view & view, std::span<const int32_t> rows, std::span<const int32_t> pos) {
            if (rows.empty()) return;
            kv_view v = view;
            v.n_kv = int64_t(rows.size());
            scorer_->score(v, rows.data(), seg_scores_.data(), v.n_kv, pool_);
            for (int g = 0; g < n_group; ++g) {
                const float * src = seg_scores_.data() + size_t(g) * rows.size();
                float * dst = scores_.data() + size_t(g) * size_t(n);
                for (size_t j = 0; j < rows.size(); ++j) dst[pos[j]] = round_score_f16(src[j]);
            }
        };
        host_region(hot_.view(il), table_.hot_slot_of(0), table_.hot_pos_of(0));
        if (logs_ != nullptr) {
            host_region(kv_view{layout_.type, log.open_k, log.open_v, log.n_open, layout_.n_embd_kv},
                        table_.open_row_of(0), table_.open_pos_of(0));
        }
        int64_t t1 = time_us();
        stats_.t_score_host_us += uint64_t(t1 - t0);
        host_span.close();
        trace_scope device_span("score device", "score",
                                {{"layer", il}, {"seq", seq}, {"tokens", int64_t(disk.size())}});
        // The device's blocks, merged as they arrive.
        if (!disk.empty()) {
            while (const csd::score_block_view * blk = device_.score_next()) {
                HILL_ASSERT(blk->n_group() == n_group);
                for (int64_t j = 0; j < blk->n_tokens(); ++j) {
                    const uint32_t t = blk->position(j);
                    HILL_ASSERT(int64_t(t) < n);
                    for (int g = 0; g < n_group; ++g) scores_[size_t(g) * size_t(n) + t] = blk->score(j, g);
                }
            }
        }
        guard.done();
        stats_.t_score_device_us += uint64_t(time_us() - t1);
        scores = scores_.data();
    }
    const int64_t t0 = time_us();
    trace_scope select_span("select", "select", {{"layer", il}, {"seq", seq}});
    if (!speculative_ || il == 0) policy_->select(select_input{n, scores}, sets_);
    // The union of the sets (one set: itself), and its scored part.
    std::vector<int32_t> & att = L.attended[size_t(b)];
    if (n_group == 1) {
        att.assign(sets_[0].begin(), sets_[0].end());
    } else {
        for (int g = 0; g < n_group; ++g) {
            for (const int32_t t : sets_[size_t(g)]) member_[size_t(t)] |= uint64_t(1) << g;
        }
        att.clear();
        for (int64_t t = 0; t < n; ++t) {
            if (member_[size_t(t)] != 0) att.push_back(int32_t(t));
        }
    }
    policy_->counted(att, n, L.counted[size_t(b)]);
    if (scores != nullptr && cache_ != nullptr && cache_->n_rows(il) > 0) {
        std::vector<float> & rank = L.rank[size_t(b)];
        rank.resize(att.size());
        for (size_t j = 0; j < att.size(); ++j) {
            float r = scores[size_t(att[j])];
            for (int g = 1; g < n_group; ++g) r = std::max(r, scores[size_t(g) * size_t(n) + size_t(att[j])]);
            rank[j] = r;
        }
    }
    stats_.t_select_us += uint64_t(time_us() - t0);
    select_span.arg("selected", int64_t(att.size()));
    select_span.close();
    if (recall_ != nullptr) {
        const int64_t t1 = time_us();
        trace_scope s("diag", "diag", {{"layer", il}, {"seq", seq}});
        measure(il, b);
        stats_.t_diag_us += uint64_t(time_us() - t1);
    }
}

const float * decode_step::sink_window_mass(int il, int b, const prepared & prep) {
    const policy_params & p = policy_->params();
    if (p.score.aggregate != score_aggregate::softmax) return nullptr;
    const int seq = seqs_[size_t(b)];
    const int64_t n = pos_[size_t(b)] + 1;
    const auto [s_end, w_begin] = middle_of(n, p.n_sinks, p.n_window);
    sw_pos_.clear();
    for (int64_t t = 0; t < s_end; ++t) sw_pos_.push_back(int32_t(t));
    for (int64_t t = w_begin; t < n; ++t) sw_pos_.push_back(int32_t(t));  // the step's own token last
    const cold_log_view log = logs_ != nullptr ? logs_->log(seq, il) : cold_log_view{};
    table_.clear();
    table_.add(cells_, logs_ != nullptr ? &log : nullptr, seq, il,
               std::span<const int32_t>(sw_pos_.data(), sw_pos_.size() - 1), false, cache_);
    table_.add_hot(int32_t(n - 1), prep.layers[size_t(il)].slot[size_t(b)]);
    // Their keys in position order wherever they live — hot, in an open tail, or (after a truncation
    // moved the window back over evicted tokens) on disk — so that the sums, and so the scores, do not
    // depend on the tiers.
    const size_t rb = layout_.row_bytes();
    sw_keys_.resize(sw_pos_.size() * rb);
    const auto put = [&](int32_t t, const void * row) {
        const auto at = size_t(std::lower_bound(sw_pos_.begin(), sw_pos_.end(), t) - sw_pos_.begin());
        std::memcpy(sw_keys_.data() + at * rb, row, rb);
    };
    for (size_t j = 0; j < table_.hot_pos.size(); ++j) put(table_.hot_pos[j], hot_.k(il, uint32_t(table_.hot_slot[j])));
    for (size_t j = 0; j < table_.open_pos.size(); ++j) put(table_.open_pos[j], log.open_k + size_t(table_.open_row[j]) * rb);
    if (!table_.disk_pos.empty()) {
        sw_gather_->begin(log.groups, table_.disk_pos, false);
        kv_batch batch;
        while (sw_gather_->next(batch)) {
            for (int64_t j = 0; j < batch.view.n_kv; ++j) {
                const int64_t r = batch.rows != nullptr ? batch.rows[j] : j;
                put(batch.positions[j], static_cast<const uint8_t *>(batch.view.k) + size_t(r) * rb);
            }
        }
    }
    const float * q = q_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim);
    std::fill(head_mass_.begin(), head_mass_.end(), -INFINITY);
    head_log2_mass(shape_, q, kv_view{layout_.type, sw_keys_.data(), nullptr, int64_t(sw_pos_.size()), layout_.n_embd_kv},
                   nullptr, head_mass_.data());
    return head_mass_.data();
}

void decode_step::gather_and_attend(int il, int b, prepared & prep) {
    const int seq = seqs_[size_t(b)];
    const int64_t n = pos_[size_t(b)] + 1;
    const int n_group = policy_->n_group();
    prepared::layer_prep & L = prep.layers[size_t(il)];
    const std::vector<int32_t> & att = L.attended[size_t(b)];
    const size_t rb = layout_.row_bytes();
    const bool caching = cache_ != nullptr && cache_->n_rows(il) > 0;
    const int64_t t0 = time_us();
    trace_scope span("attend", "attend", {{"layer", il}, {"seq", seq}, {"tokens", int64_t(att.size())}});
    // This sequence's promotions: (position, index in the plan), ascending.
    prep.promo.clear();
    for (size_t i = 0; i < L.plan.promote.size(); ++i) {
        if (L.plan.promote[i].first == seq) prep.promo.emplace_back(L.plan.promote[i].second, uint32_t(i));
    }
    std::sort(prep.promo.begin(), prep.promo.end());
    // Attends a window; with a set per KV head, each head's query heads see their own set.
    const auto attend = [&](const kv_batch & w) {
        if (n_group == 1) {
            dev_.attend(w.view, w.rows);
            return;
        }
        for (int g = 0; g < n_group; ++g) {
            rows_g_.clear();
            for (int64_t j = 0; j < w.view.n_kv; ++j) {
                if ((member_[size_t(w.positions[j])] >> g) & 1) rows_g_.push_back(w.rows[j]);
            }
            kv_view part = w.view;
            part.n_kv = int64_t(rows_g_.size());
            dev_.attend(part, rows_g_.data(), no_causal_mask, g);
        }
    };
    // Promoted tokens' rows, copied from the window into the step's promotion rows (to their slots at
    // apply); the other tokens read from disk, into the device cache's rows.
    const auto keep_rows = [&](const kv_batch & w) {
        if (prep.promo.empty() && fill_pos_.empty() && swaps_.empty()) return;
        for (int64_t j = 0; j < w.view.n_kv; ++j) {
            const int32_t t = w.positions[j];
            const auto * k = static_cast<const uint8_t *>(w.view.k) + size_t(w.rows[j]) * rb;
            const auto * v = static_cast<const uint8_t *>(w.view.v) + size_t(w.rows[j]) * rb;
            const auto it = std::lower_bound(prep.promo.begin(), prep.promo.end(), std::make_pair(t, uint32_t(0)));
            if (it != prep.promo.end() && it->first == t) {
                const size_t row = size_t(il) * size_t(prep.max_promotions) + it->second;
                std::memcpy(prep.promo_k.data() + row * rb, k, rb);
                std::memcpy(prep.promo_v.data() + row * rb, v, rb);
            } else if (std::binary_search(fill_pos_.begin(), fill_pos_.end(), t)) {
                const uint32_t slot = cache_->fill(seq, il, t);
                if (slot == device_cache::no_slot) continue;
                std::memcpy(hot_.k(il, slot), k, rb);
                std::memcpy(hot_.v(il, slot), v, rb);
                ++stats_.cache_fills;
            } else if (const auto c = std::lower_bound(swaps_.begin(), swaps_.end(), t, by_pos{});
                       c != swaps_.end() && c->pos == t && c->slot != device_cache::no_slot) {
                cache_->replace(il, c->slot, seq, t);
                std::memcpy(hot_.k(il, c->slot), k, rb);
                std::memcpy(hot_.v(il, c->slot), v, rb);
                ++stats_.cache_swaps;
                ++stats_.cache_fills;
            }
        }
    };

    const cold_log_view log = logs_ != nullptr ? logs_->log(seq, il) : cold_log_view{};
    table_.clear();
    // The step's own token is the last position; it is not in the cells yet.
    const bool own = !att.empty() && att.back() == n - 1;
    table_.add(cells_, logs_ != nullptr ? &log : nullptr, seq, il,
               std::span<const int32_t>(att.data(), att.size() - (own ? 1 : 0)), false, cache_);
    if (own) table_.add_hot(int32_t(n - 1), L.slot[size_t(b)]);
    const std::span<const int32_t> disk = table_.disk_pos_of(0);
    hints_.wanted(seq, il, disk);
    // The reads start now; the device cache's bookkeeping below only decides where their rows go.
    csd::device_pass_guard guard(device_);
    if (!disk.empty()) device_.read_begin(csd::device_pass{il, seq, log.page_tokens, log.groups, disk});
    // The device cache: the disk tokens not promoted fill the rows this step did not use, in place of
    // their least selected tokens. Which disk tokens, when there are more than such rows: with scores,
    // the highest-scored, and the rest may take the rows of cached tokens this step scored lower (after
    // attention has read them: device_cache::plan_replacements); without, the most selected.
    fill_pos_.clear();
    swaps_.clear();
    if (caching) {
        if (table_.n_cached > 0) {
            for (const int32_t slot : table_.hot_slot_of(0)) {
                if (cache_->holds(il, uint32_t(slot))) cache_->use(il, uint32_t(slot));
            }
        }
        for (const int32_t t : disk) {
            const auto it = std::lower_bound(prep.promo.begin(), prep.promo.end(), std::make_pair(t, uint32_t(0)));
            if (it == prep.promo.end() || it->first != t) fill_pos_.push_back(t);
        }
        const auto hits = [this, il](int s, int32_t t) { return uint32_t(cells_.hits(s, il, t)); };
        const auto m = size_t(cache_->prepare_fills(il, int64_t(fill_pos_.size()), hits));
        const std::vector<float> & rank = L.rank[size_t(b)];
        if (m < fill_pos_.size() && rank.empty()) {
            std::partial_sort(fill_pos_.begin(), fill_pos_.begin() + ptrdiff_t(m), fill_pos_.end(), [&](int32_t x, int32_t y) {
                return hits(seq, x) != hits(seq, y) ? hits(seq, x) > hits(seq, y) : x > y;
            });
            fill_pos_.resize(m);
            std::sort(fill_pos_.begin(), fill_pos_.end());
        } else if (m < fill_pos_.size()) {
            // Scored: the highest-scored disk tokens take the free rows; the rest may take the rows of
            // cached tokens this step scored lower.
            const auto score_of = [&](int32_t t) {
                return rank[size_t(std::lower_bound(att.begin(), att.end(), t) - att.begin())];
            };
            for (const int32_t t : fill_pos_) swaps_.push_back({t, device_cache::no_slot, score_of(t)});
            std::sort(swaps_.begin(), swaps_.end(), [](const auto & x, const auto & y) {
                return x.score != y.score ? x.score > y.score : x.pos > y.pos;
            });
            fill_pos_.clear();
            for (size_t i = 0; i < m; ++i) fill_pos_.push_back(swaps_[i].pos);
            std::sort(fill_pos_.begin(), fill_pos_.end());
            swaps_.erase(swaps_.begin(), swaps_.begin() + ptrdiff_t(m));
            std::sort(swaps_.begin(), swaps_.end(), by_pos{});
            held_.clear();
            const std::span<const int32_t> hp = table_.hot_pos_of(0), hs = table_.hot_slot_of(0);
            for (size_t j = 0; j < hp.size(); ++j) {
                if (cache_->holds(il, uint32_t(hs[j]))) held_.push_back({hp[j], uint32_t(hs[j]), score_of(hp[j])});
            }
            cache_->plan_replacements(swaps_, held_);
        }
    }

    // The selected tokens in position order, window by window (kv/ordered_gather.h): the hot ones in
    // place, the others copied as the storage device delivers them.
    dev_.begin(shape_, q_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim), 1);
    gather_.begin(il, table_, 0, kv_view{layout_.type, log.open_k, log.open_v, log.n_open, layout_.n_embd_kv},
                  [this](kv_batch & out) { return device_.read_next(out); });
    // A copy that learns from attention (h2o): the logits of every attended token, in attended order.
    const bool learn = copy_ != nullptr && copy_->wants_attention();
    HILL_ASSERT(!learn || n_group == 1);
    int64_t n_seen = 0;
    kv_batch w;
    while (gather_.next(w)) {
        attend(w);
        keep_rows(w);
        if (learn) {
            attention_logits(shape_, q_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim),
                             kv_view{w.view.type, w.view.k, w.view.k, w.view.n_kv, w.view.row_stride}, w.rows,
                             logits_.data() + n_seen, int64_t(cells_.n_ctx()), pool_);
            n_seen += w.view.n_kv;
        }
    }
    if (learn) attention_weights(int64_t(att.size()), L.weights[size_t(b)]);
    if (!disk.empty()) {
        kv_batch rest;
        const bool more = device_.read_next(rest);  // the pass's end
        HILL_ASSERT(!more);
    }
    guard.done();
    dev_.end(attn_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim));
    if (n_group > 1) {
        for (const int32_t t : att) member_[size_t(t)] = 0;
    }
    stats_.t_attend_us += uint64_t(time_us() - t0);
    span.arg("disk", int64_t(disk.size()));

    step_layer_stats & S = stats_.layers[size_t(il)];
    ++S.n_steps;
    S.n_context += uint64_t(n);
    S.n_attended += att.size();
    S.n_attended_hot += table_.hot_pos.size() - uint64_t(table_.n_cached);
    S.n_attended_cached += uint64_t(table_.n_cached);
    S.n_attended_open += table_.open_pos.size();
    S.n_attended_disk += disk.size();
    // The previous step's set of this sequence (a set from the slot's previous occupant reaches past n).
    const std::vector<int32_t> & last = last_attended_[size_t(seq) * size_t(cells_.n_layer()) + size_t(il)];
    if (!last.empty() && last.back() < n - 1) {
        for (const int32_t t : disk) S.n_disk_reread += std::binary_search(last.begin(), last.end(), t) ? 1u : 0u;
    }
    stats_.seq_context[size_t(seq)] += uint64_t(n);
    stats_.seq_attended[size_t(seq)] += att.size();
}

void decode_step::attention_weights(int64_t n, std::vector<float> & out) {
    // out[j] = Σ_h softmax_j(logits_[h, 0..n)): the weights attention gave the n tokens, summed over heads.
    HILL_ASSERT(n >= 0 && n <= int64_t(cells_.n_ctx()));
    weight_acc_.assign(size_t(n), 0.0);
    weight_exp_.resize(size_t(n));
    for (int h = 0; h < shape_.n_head; ++h) {
        const float * s = logits_.data() + size_t(h) * size_t(cells_.n_ctx());
        const float m = n > 0 ? *std::max_element(s, s + n) : 0.0f;
        double l = 0.0;
        for (int64_t j = 0; j < n; ++j) {
            weight_exp_[size_t(j)] = std::exp(s[j] - m);
            l += double(weight_exp_[size_t(j)]);
        }
        for (int64_t j = 0; j < n; ++j) weight_acc_[size_t(j)] += double(weight_exp_[size_t(j)]) / l;
    }
    out.resize(size_t(n));
    for (int64_t j = 0; j < n; ++j) out[size_t(j)] = float(weight_acc_[size_t(j)]);
}

void decode_step::measure(int il, int b) {
    // Exact scores of every token (the scoring table of score_sequence, or a fresh one), then recall
    // of the selection and its overlap with the previous step's.
    const int seq = seqs_[size_t(b)];
    const int64_t n = pos_[size_t(b)] + 1;
    const prepared::layer_prep & L = prep_->layers[size_t(il)];
    const cold_log_view log = logs_ != nullptr ? logs_->log(seq, il) : cold_log_view{};
    kv_page_table all;
    all.add(cells_, logs_ != nullptr ? &log : nullptr, seq, il, {}, true, cache_);
    all.add_hot(int32_t(n - 1), L.slot[size_t(b)]);
    recall_->begin(q_.data() + size_t(b) * size_t(shape_.n_head * shape_.head_dim), n);
    const kv_view hot = hot_.view(il);
    recall_->add(kv_view{hot.type, hot.k, nullptr, int64_t(all.hot_pos.size()), hot.row_stride}, all.hot_slot.data(),
                 all.hot_pos.data());
    if (logs_ != nullptr) {
        recall_->add(kv_view{layout_.type, log.open_k, nullptr, int64_t(all.open_pos.size()), layout_.n_embd_kv},
                     all.open_row.data(), all.open_pos.data());
        if (!all.disk_pos.empty()) {
            diag_gather_->begin(log.groups, all.disk_pos, false);
            kv_batch batch;
            while (diag_gather_->next(batch)) recall_->add(batch.view, batch.rows, batch.positions);
        }
    }
    step_layer_stats & S = stats_.layers[size_t(il)];
    S.recall_sum += recall_->recall(sets_);
    const std::vector<int32_t> & now = L.attended[size_t(b)];
    std::vector<int32_t> & prev = prev_[size_t(seq) * size_t(cells_.n_layer()) + size_t(il)];
    if (!prev.empty() && prev.back() >= n - 1) prev.clear();  // a set of the sequence slot's previous occupant
    if (!prev.empty() && !now.empty()) {
        std::vector<int32_t> common;
        std::set_intersection(prev.begin(), prev.end(), now.begin(), now.end(), std::back_inserter(common));
        S.overlap_sum += double(common.size()) / double(now.size());
        ++S.n_overlap;
    }
    prev.assign(now.begin(), now.end());
}

void decode_step::apply(prepared & prep) {
    const auto nb = int64_t(seqs_.size());
    trace_scope span("apply", "migrate", {{"step", int64_t(step_)}});
    const uint64_t promotions0 = stats_.promotions, evictions0 = stats_.evictions;
    for (int64_t b = 0; b < nb; ++b) cells_.grow(seqs_[size_t(b)], 1);
    for (int il = 0; il < cells_.n_layer(); ++il) {
        prepared::layer_prep & L = prep.layers[size_t(il)];
        // The appends take the slots they reserved (the top of the free list, untouched since).
        for (int64_t b = 0; b < nb; ++b) {
            const uint32_t s = cells_.take_hot(seqs_[size_t(b)], il, pos_[size_t(b)]);
            HILL_ASSERT(s == L.slot[size_t(b)]);
            if (L.appended[size_t(b)] != 0) {
                logs_->apply(L.append[size_t(b)]);
                L.appended[size_t(b)] = 0;
            }
        }
        // Evictions, then promotions into the free slots: a promoted token may take an evicted one's slot.
        HILL_ASSERT(logs_ != nullptr || L.plan.evict.empty());  // without a cold tier the hot pool holds all
        cache_victims(il, L.plan.evict);
        for (const auto & [seq, t] : L.plan.evict) {
            if (undoes_recent_move(cells_.last_move(seq, il, t), step_, false)) ++stats_.pingpong;
            cells_.drop_hot(seq, il, t);
            cells_.set_last_move(seq, il, t, step_, false);
            ++stats_.evictions;
        }
        const size_t rb = layout_.row_bytes();
        for (size_t i = 0; i < L.plan.promote.size(); ++i) {
            const auto [seq, t] = L.plan.promote[i];
            if (undoes_recent_move(cells_.last_move(seq, il, t), step_, true)) ++stats_.pingpong;
            const uint32_t s = cells_.take_hot(seq, il, t);
            const size_t row = size_t(il) * size_t(prep.max_promotions) + i;
            std::memcpy(hot_.k(il, s), prep.promo_k.data() + row * rb, rb);
            std::memcpy(hot_.v(il, s), prep.promo_v.data() + row * rb, rb);
            cells_.set_last_move(seq, il, t, step_, true);
            ++stats_.promotions;
            stats_.promoted_bytes += layout_.token_layer_bytes();
        }
        for (int64_t b = 0; b < nb; ++b) {
            cells_.update_hits(seqs_[size_t(b)], il, L.counted[size_t(b)]);
            if (copy_ != nullptr && copy_->wants_attention()) {
                copy_->observe(seqs_[size_t(b)], il, L.attended[size_t(b)], L.weights[size_t(b)].data());
            }
            const std::vector<int32_t> & att = L.attended[size_t(b)];
            last_attended_[size_t(seqs_[size_t(b)]) * size_t(cells_.n_layer()) + size_t(il)].assign(att.begin(), att.end());
        }
    }
    // Sliding layers: the token each sequence's window left behind is dropped (its cold group, when whole,
    // went at the log's apply).
    for (int64_t b = 0; b < nb; ++b) cells_.drop_outside_windows(seqs_[size_t(b)]);
    span.arg("promote", int64_t(stats_.promotions - promotions0));
    span.arg("evict", int64_t(stats_.evictions - evictions0));
    ++step_;
    ++stats_.n_steps;
    stats_.n_tokens += uint64_t(nb);
    prep.pending = false;
}

void decode_step::cache_victims(int il, std::span<const std::pair<int, int32_t>> evict) {
    // The device cache as a victim cache: tokens the hot pool evicts keep their KV in the rows this step
    // did not use, the most selected first (the plan lists victims coldest first), so that a token the
    // hot pool drops and the next steps select again is not read from the SSD. Its slot still holds its
    // KV: evictions and promotions come after.
    if (cache_ == nullptr || cache_->n_rows(il) == 0 || evict.empty()) return;
    victims_.clear();
    for (auto it = evict.rbegin(); it != evict.rend(); ++it) {
        if (cache_->slot(it->first, il, it->second) == device_cache::no_slot) victims_.push_back(*it);
    }
    const auto hits = [this, il](int s, int32_t t) { return uint32_t(cells_.hits(s, il, t)); };
    const auto m = size_t(cache_->prepare_fills(il, int64_t(victims_.size()), hits));
    const size_t rb = layout_.row_bytes();
    for (size_t i = 0; i < m; ++i) {
        const auto [seq, t] = victims_[i];
        const uint32_t from = cells_.hot_slot(seq, il, t);
        const uint32_t row = cache_->fill(seq, il, t);
        std::memcpy(hot_.k(il, row), hot_.k(il, from), rb);
        std::memcpy(hot_.v(il, row), hot_.v(il, from), rb);
        ++stats_.cache_fills;
    }
}

void decode_step::discard(prepared & prep) {
    for (prepared::layer_prep & L : prep.layers) {
        for (size_t b = 0; b < L.appended.size(); ++b) {
            if (L.appended[b] != 0) {
                logs_->discard(L.append[b]);
                L.appended[b] = 0;
            }
        }
        L.plan.clear();
    }
    prep.pending = false;
}

}  // namespace hill
