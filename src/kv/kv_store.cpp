#include "kv/kv_store.h"

#include "core/error.h"
#include "core/sys_info.h"
#include "kv/cold_pool.h"

#include <algorithm>
#include <cstring>

namespace hill {

kv_store::kv_store(const kv_layout & layout, const kv_store_params & params)
    : layout_(layout), params_(params), hits_(layout.n_layer, 0) {
    HILL_ASSERT(layout.n_layer > 0 && layout.n_embd_kv > 0 && params.n_ctx > 0);
    HILL_ASSERT(layout.type == ggml_type::f16 || layout.type == ggml_type::f32);
    const uint64_t per_slot = uint64_t(layout.n_layer) * layout.token_layer_bytes();
    hot_cap_ = int64_t(std::min<uint64_t>(params.host_budget_bytes / per_slot, uint64_t(params.n_ctx)));
    if (hot_cap_ < int64_t(params.n_ctx) && params.kv_dir.empty()) {
        fail_usage("the KV cache of {} tokens needs {} but the host budget is {}; give a --kv-dir for the cold pool "
                   "or raise --kv-host-budget", params.n_ctx, format_bytes(per_slot * uint64_t(params.n_ctx)),
                   format_bytes(params.host_budget_bytes));
    }
    if (hot_cap_ < std::min<int64_t>(params.n_sinks + 1, params.n_ctx)) {
        fail_usage("--kv-host-budget {} holds {} tokens per layer; at least {} (the sinks and one recent token) "
                   "are needed ({} per token)", format_bytes(params.host_budget_bytes), hot_cap_, params.n_sinks + 1,
                   format_bytes(per_slot));
    }
    if (hot_cap_ < int64_t(params.n_ctx)) {
        const int64_t cold_tokens = int64_t(params.n_ctx) - hot_cap_ + layout.page_tokens();
        const int64_t groups = (cold_tokens + layout.page_tokens() - 1) / layout.page_tokens();
        const uint64_t n_pages = uint64_t(2 * groups * layout.n_layer);
        if (n_pages >= cold_pool::no_page) fail_usage("a cold pool of {} pages is too large", n_pages);
        cold_pool_params cp;
        cp.kv_dir = params.kv_dir;
        cp.page_bytes = layout.page_bytes();
        cp.n_pages = uint32_t(n_pages);
        cp.io.fault_hook = params.io_faults;
        cold_ = std::make_unique<cold_pool>(cp);  // checks the free space before anything large is allocated
        // Read batches of about 8 MiB of K (and as much V): large sequential requests, bounded memory.
        batch_groups_ = std::clamp<int64_t>(int64_t((size_t(8) << 20) / layout.page_bytes()), 1, groups);
        staging_k_ = aligned_buffer(size_t(batch_groups_) * layout.page_bytes());
        staging_v_ = aligned_buffer(size_t(batch_groups_) * layout.page_bytes());
        token_k_ = aligned_buffer(layout.page_bytes());
        token_v_ = aligned_buffer(layout.page_bytes());
    }
    const size_t rb = layout.row_bytes();
    layers_.resize(size_t(layout.n_layer));
    for (layer_state & L : layers_) {
        L.map.resize(size_t(params.n_ctx));
        // Not zero-filled: pages are touched as slots fill.
        L.hot_k = std::make_unique_for_overwrite<uint8_t[]>(size_t(hot_cap_) * rb);
        L.hot_v = std::make_unique_for_overwrite<uint8_t[]>(size_t(hot_cap_) * rb);
        L.hot_token.assign(size_t(hot_cap_), -1);
        L.hot_free.resize(size_t(hot_cap_));
        for (int64_t i = 0; i < hot_cap_; ++i) L.hot_free[size_t(i)] = uint32_t(hot_cap_ - 1 - i);
        if (cold_) {
            L.open_k = aligned_buffer(layout.page_bytes());
            L.open_v = aligned_buffer(layout.page_bytes());
        }
    }
    hits_ = hit_table(layout.n_layer, params.n_ctx);
}

kv_store::~kv_store() = default;

int64_t kv_store::n_cold(int il) const { return layers_[size_t(il)].n_cold; }

uint32_t kv_store::take_hot_slot(layer_state & L) {
    HILL_ASSERT(!L.hot_free.empty());
    const uint32_t s = L.hot_free.back();
    L.hot_free.pop_back();
    L.hot_hwm = std::max(L.hot_hwm, int64_t(s) + 1);
    return s;
}

void kv_store::append(int il, int64_t n, const void * k, const void * v) {
    layer_state & L = layers_[size_t(il)];
    HILL_ASSERT(L.n_tokens + n <= params_.n_ctx);
    const size_t rb = layout_.row_bytes();
    const auto * kb = static_cast<const uint8_t *>(k);
    const auto * vb = static_cast<const uint8_t *>(v);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = L.n_tokens;
        if (L.hot_free.empty()) demote_one(il);
        const uint32_t s = take_hot_slot(L);
        std::memcpy(L.hot_k.get() + size_t(s) * rb, kb + size_t(i) * rb, rb);
        std::memcpy(L.hot_v.get() + size_t(s) * rb, vb + size_t(i) * rb, rb);
        L.hot_token[s] = t;
        if (t >= params_.n_sinks) L.hot_fifo.push_back(t);
        hits_.reset(il, t);
        L.map[size_t(t)] = token_loc{kv_tier::hot, s};
        L.n_tokens = t + 1;
    }
}

void kv_store::demote_one(int il) {
    layer_state & L = layers_[size_t(il)];
    while (!L.hot_fifo.empty()) {
        const int64_t t = L.hot_fifo.front();
        L.hot_fifo.pop_front();
        if (t < L.n_tokens && L.map[size_t(t)].tier == kv_tier::hot) {
            const bool moved = move(il, t, kv_tier::cold);
            HILL_ASSERT(moved);
            return;
        }
    }
    HILL_ASSERT(false && "no hot token to demote");
}

bool kv_store::move(int il, int64_t t, kv_tier to) {
    layer_state & L = layers_[size_t(il)];
    HILL_ASSERT(t >= 0 && t < L.n_tokens);
    const token_loc from = L.map[size_t(t)];
    if (from.tier == to) return true;
    const size_t rb = layout_.row_bytes();
    if (to == kv_tier::cold) {
        if (!cold_) return false;
        const uint32_t cs = put_cold(il, t, L.hot_k.get() + size_t(from.slot) * rb, L.hot_v.get() + size_t(from.slot) * rb);
        L.map[size_t(t)] = token_loc{kv_tier::cold, cs};  // after the copy
        L.hot_token[from.slot] = -1;
        L.hot_free.push_back(from.slot);
        ++stats_.demotions;
        return true;
    }
    // cold -> hot
    if (L.hot_free.empty()) return false;
    const uint32_t s = take_hot_slot(L);
    read_token(il, t, L.hot_k.get() + size_t(s) * rb, L.hot_v.get() + size_t(s) * rb);
    L.map[size_t(t)] = token_loc{kv_tier::hot, s};  // after the copy
    L.hot_token[s] = t;
    if (t >= params_.n_sinks) L.hot_fifo.push_back(t);
    L.cold_token[from.slot] = -1;
    --L.n_cold;
    ++stats_.promotions;
    return true;
}

void kv_store::truncate(int64_t n) {
    for (int il = 0; il < layout_.n_layer; ++il) {
        layer_state & L = layers_[size_t(il)];
        for (int64_t t = n; t < L.n_tokens; ++t) {
            const token_loc loc = L.map[size_t(t)];
            if (loc.tier == kv_tier::hot) {
                L.hot_token[loc.slot] = -1;
                L.hot_free.push_back(loc.slot);
            } else if (loc.tier == kv_tier::cold) {
                L.cold_token[loc.slot] = -1;
                --L.n_cold;
            }
            L.map[size_t(t)] = token_loc{};
        }
        L.n_tokens = std::min(L.n_tokens, n);
        release_cold_tail(L);
    }
}

void kv_store::release_cold_tail(layer_state & L) {
    if (!cold_) return;
    // Slots are handed out in order, so the tokens just forgotten left holes at the end: drop them.
    while (!L.cold_token.empty() && L.cold_token.back() < 0) L.cold_token.pop_back();
    const int64_t pt = layout_.page_tokens();
    const auto n_slots = int64_t(L.cold_token.size());
    // The written groups wholly past the live slots go back to the pool. A written group that still
    // holds live slots stays, padded with holes to its end, so that the next cold token opens a fresh
    // group (reading the group back into the open buffer would need I/O, which may fail here).
    const int64_t keep = (n_slots + pt - 1) / pt;
    if (keep >= int64_t(L.groups.size())) return;  // the tail is in the open group, in RAM
    for (size_t g = size_t(keep); g < L.groups.size(); ++g) {
        cold_->free(L.groups[g].first);
        cold_->free(L.groups[g].second);
    }
    L.groups.resize(size_t(keep));
    L.cold_token.resize(size_t(keep * pt), -1);
}

namespace {

// Throws the error of the first failed page of a cold-pool batch.
[[noreturn]] void fail_pages(const cold_pool & pool, std::span<const page_result> results, const char * what) {
    for (const page_result & r : results) {
        if (r.status != page_status::ok) fail_input("cold pool: {} failed: {}", what, pool.describe(r));
    }
    fail_input("cold pool: {} failed", what);
}

}  // namespace

uint32_t kv_store::put_cold(int il, int64_t t, const uint8_t * k, const uint8_t * v) {
    layer_state & L = layers_[size_t(il)];
    const int64_t pt = layout_.page_tokens();
    const size_t rb = layout_.row_bytes();
    const auto slot = int64_t(L.cold_token.size());
    const int64_t i = slot - int64_t(L.groups.size()) * pt;  // row in the open group
    HILL_ASSERT(i >= 0 && i < pt);
    std::memcpy(L.open_k.data() + size_t(i) * rb, k, rb);
    std::memcpy(L.open_v.data() + size_t(i) * rb, v, rb);
    L.cold_token.push_back(t);
    ++L.n_cold;
    if (i + 1 == pt) flush_open_group(il);
    return uint32_t(slot);
}

void kv_store::flush_open_group(int il) {
    layer_state & L = layers_[size_t(il)];
    const uint32_t kp = cold_->alloc(), vp = cold_->alloc();
    HILL_ASSERT(kp != cold_pool::no_page && vp != cold_pool::no_page);  // sized for n_ctx at start
    const page_write batch[2] = {{kp, L.open_k.data()}, {vp, L.open_v.data()}};
    page_result res[2];
    if (cold_->write_pages(batch, res) != 0) {
        cold_->free(kp);
        cold_->free(vp);
        fail_pages(*cold_, res, "writing a page of KV");
    }
    L.groups.emplace_back(kp, vp);
    stats_.cold_write_bytes += 2 * layout_.page_bytes();
}

void kv_store::read_token(int il, int64_t t, void * k_out, void * v_out) {
    layer_state & L = layers_[size_t(il)];
    const token_loc loc = L.map[size_t(t)];
    const size_t rb = layout_.row_bytes();
    if (loc.tier == kv_tier::hot) {
        std::memcpy(k_out, L.hot_k.get() + size_t(loc.slot) * rb, rb);
        std::memcpy(v_out, L.hot_v.get() + size_t(loc.slot) * rb, rb);
        return;
    }
    HILL_ASSERT(loc.tier == kv_tier::cold);
    const int64_t pt = layout_.page_tokens();
    const int64_t g = int64_t(loc.slot) / pt, i = int64_t(loc.slot) % pt;
    const uint8_t *kb, *vb;
    if (g == int64_t(L.groups.size())) {  // still in the open group
        kb = L.open_k.data();
        vb = L.open_v.data();
    } else {
        const page_read batch[2] = {{L.groups[size_t(g)].first, token_k_.data()}, {L.groups[size_t(g)].second, token_v_.data()}};
        page_result res[2];
        if (cold_->read_pages(batch, res) != 0) fail_pages(*cold_, res, "reading a page of KV");
        stats_.cold_read_bytes += 2 * layout_.page_bytes();
        kb = token_k_.data();
        vb = token_v_.data();
    }
    std::memcpy(k_out, kb + size_t(i) * rb, rb);
    std::memcpy(v_out, vb + size_t(i) * rb, rb);
}

bool kv_store::on_disk(int il, int64_t t) const {
    const layer_state & L = layers_[size_t(il)];
    const token_loc loc = L.map[size_t(t)];
    return loc.tier == kv_tier::cold && int64_t(loc.slot) < int64_t(L.groups.size()) * layout_.page_tokens();
}

cold_layer_view kv_store::cold_layer(int il) const {
    const layer_state & L = layers_[size_t(il)];
    const size_t n_slots = L.groups.size() * size_t(layout_.page_tokens());
    return cold_layer_view{L.groups, std::span<const int64_t>(L.cold_token.data(), n_slots), layout_.page_tokens()};
}

void kv_store::for_each_segment(int il, const segment_fn & fn, kv_part part, kv_scope scope) {
    layer_state & L = layers_[size_t(il)];
    rows_.clear();
    tokens_.clear();
    if (scope != kv_scope::on_disk) {
        for (int64_t s = 0; s < L.hot_hwm; ++s) {
            if (L.hot_token[size_t(s)] >= 0) {
                rows_.push_back(int32_t(s));
                tokens_.push_back(int32_t(L.hot_token[size_t(s)]));
            }
        }
    }
    cold_slots_.clear();
    const size_t written = L.groups.size() * size_t(layout_.page_tokens());
    const size_t s0 = scope == kv_scope::in_memory ? written : 0;
    const size_t s1 = scope == kv_scope::on_disk ? written : L.cold_token.size();
    for (size_t s = s0; s < s1; ++s) {
        if (L.cold_token[s] >= 0) cold_slots_.push_back(uint32_t(s));
    }
    visit(il, part, fn);
}

void kv_store::for_each_segment_of(int il, std::span<const int32_t> tokens, const segment_fn & fn, kv_part part,
                                   kv_scope scope) {
    layer_state & L = layers_[size_t(il)];
    rows_.clear();
    tokens_.clear();
    cold_slots_.clear();
    const int64_t written = int64_t(L.groups.size()) * layout_.page_tokens();
    for (const int32_t t : tokens) {
        HILL_ASSERT(t >= 0 && t < L.n_tokens);
        const token_loc loc = L.map[size_t(t)];
        const bool disk = loc.tier == kv_tier::cold && int64_t(loc.slot) < written;
        if (scope == kv_scope::in_memory ? disk : scope == kv_scope::on_disk && !disk) continue;
        if (loc.tier == kv_tier::hot) {
            rows_.push_back(int32_t(loc.slot));
            tokens_.push_back(t);
        } else {
            cold_slots_.push_back(loc.slot);
        }
    }
    std::sort(cold_slots_.begin(), cold_slots_.end());
    visit(il, part, fn);
}

void kv_store::visit(int il, kv_part part, const segment_fn & fn) {
    layer_state & L = layers_[size_t(il)];
    const int64_t stride = layout_.n_embd_kv;
    const bool with_v = part == kv_part::k_and_v;
    // Hot tokens (rows_, tokens_ as the caller collected them), in place.
    if (!rows_.empty()) {
        fn(kv_view{layout_.type, L.hot_k.get(), with_v ? L.hot_v.get() : nullptr, int64_t(rows_.size()), stride},
           rows_.data(), tokens_.data());
    }
    // Cold tokens (cold_slots_, ascending): the written groups that hold any of them, read in batches
    // of at most batch_groups_ groups, then the open group from RAM.
    const int64_t pt = layout_.page_tokens();
    const auto n_groups = int64_t(L.groups.size());
    size_t i = 0;
    while (i < cold_slots_.size() && int64_t(cold_slots_[i]) / pt < n_groups) {
        reads_.clear();
        rows_.clear();
        tokens_.clear();
        int64_t n_batch = 0, last = -1;
        for (; i < cold_slots_.size(); ++i) {
            const int64_t g = int64_t(cold_slots_[i]) / pt;
            if (g >= n_groups) break;
            if (g != last) {
                if (n_batch == batch_groups_) break;
                reads_.push_back({L.groups[size_t(g)].first, staging_k_.data() + size_t(n_batch) * layout_.page_bytes()});
                if (with_v) {
                    reads_.push_back({L.groups[size_t(g)].second, staging_v_.data() + size_t(n_batch) * layout_.page_bytes()});
                }
                last = g;
                ++n_batch;
            }
            rows_.push_back(int32_t((n_batch - 1) * pt + int64_t(cold_slots_[i]) % pt));
            tokens_.push_back(int32_t(L.cold_token[cold_slots_[i]]));
        }
        results_.resize(reads_.size());
        if (cold_->read_pages(reads_, results_) != 0) fail_pages(*cold_, results_, "reading KV pages");
        stats_.cold_read_bytes += uint64_t(reads_.size()) * layout_.page_bytes();
        fn(kv_view{layout_.type, staging_k_.data(), with_v ? staging_v_.data() : nullptr, int64_t(rows_.size()), stride},
           rows_.data(), tokens_.data());
    }
    rows_.clear();
    tokens_.clear();
    for (; i < cold_slots_.size(); ++i) {
        rows_.push_back(int32_t(int64_t(cold_slots_[i]) - n_groups * pt));
        tokens_.push_back(int32_t(L.cold_token[cold_slots_[i]]));
    }
    if (!rows_.empty()) {
        fn(kv_view{layout_.type, L.open_k.data(), with_v ? L.open_v.data() : nullptr, int64_t(rows_.size()), stride},
           rows_.data(), tokens_.data());
    }
}

void kv_store::export_layer(int il, void * k_out, void * v_out) {
    const size_t rb = layout_.row_bytes();
    auto * ko = static_cast<uint8_t *>(k_out);
    auto * vo = static_cast<uint8_t *>(v_out);
    for_each_segment(il, [&](const kv_view & view, const int32_t * rows, const int32_t * tokens) {
        const auto * kb = static_cast<const uint8_t *>(view.k);
        const auto * vb = static_cast<const uint8_t *>(view.v);
        for (int64_t j = 0; j < view.n_kv; ++j) {
            std::memcpy(ko + size_t(tokens[j]) * rb, kb + size_t(rows[j]) * rb, rb);
            std::memcpy(vo + size_t(tokens[j]) * rb, vb + size_t(rows[j]) * rb, rb);
        }
    });
}

}  // namespace hill
