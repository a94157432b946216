#include "policy/placement.h"

#include "core/error.h"
#include "score/selector.h"

#include <algorithm>

namespace hill {

namespace {

// A hot token placement may evict, with its hit count after the step.
struct victim {
    uint16_t hits;
    int32_t pos;
    int entry;  // index into place_input::seqs, or -1 for a sequence not in the step
    int seq;
};

// Whether position t of a sequence of n tokens is pinned hot: a sink or in the recent window.
bool pinned(const policy_params & p, int64_t t, int64_t n) {
    return t < p.n_sinks || t >= n - p.n_window;
}

// The hot tokens of layer in.il that may be evicted: outside sinks, window and this step's counted
// selection, with their hit counts after the step; in.seqs' tokens first, then the other sequences'.
void evictable(const policy_params & p, const place_input & in, std::vector<victim> & out) {
    out.clear();
    const kv_cells & c = *in.cells;
    std::vector<char> in_step(size_t(c.n_seq()), 0);
    for (size_t e = 0; e < in.seqs.size(); ++e) {
        const place_seq & s = in.seqs[e];
        in_step[size_t(s.seq)] = 1;
        const std::span<const uint32_t> slots = c.hot_slots(s.seq, in.il);
        const std::span<const uint16_t> hits = c.hit_counts(s.seq, in.il);
        size_t k = 0;
        for (int64_t t = 0; t < int64_t(slots.size()); ++t) {
            const bool sel = k < s.counted.size() && s.counted[k] == t;
            k += sel ? 1 : 0;
            if (slots[size_t(t)] == kv_cells::no_slot || sel || pinned(p, t, s.n)) continue;
            out.push_back({kv_cells::hit_next(hits[size_t(t)], false), int32_t(t), int(e), s.seq});
        }
    }
    for (int seq = 0; seq < c.n_seq(); ++seq) {
        if (in_step[size_t(seq)] != 0) continue;
        const std::span<const uint32_t> slots = c.hot_slots(seq, in.il);
        const std::span<const uint16_t> hits = c.hit_counts(seq, in.il);
        const int64_t n = int64_t(slots.size());
        for (int64_t t = 0; t < n; ++t) {
            if (slots[size_t(t)] == kv_cells::no_slot || pinned(p, t, n)) continue;
            out.push_back({hits[size_t(t)], int32_t(t), -1, seq});
        }
    }
}

// Moves the k first victims in (key) order to the front of v; returns min(k, v.size()).
template <class Less>
size_t take_first(std::vector<victim> & v, size_t k, Less less) {
    k = std::min(k, v.size());
    std::partial_sort(v.begin(), v.begin() + ptrdiff_t(k), v.end(), less);
    return k;
}

void push_evictions(const std::vector<victim> & v, size_t k, placement_plan & plan) {
    for (size_t i = 0; i < k; ++i) plan.evict.emplace_back(v[i].seq, v[i].pos);
}

}  // namespace

bool moved_lately(uint32_t last_move, uint32_t step, bool promotion) {
    if (last_move == kv_cells::never_moved || ((last_move & 0x80000000u) != 0) != promotion) return false;
    return ((step - (last_move & 0x7fffffffu)) & 0x7fffffffu) <= pingpong_steps;
}

void place_fifo(const policy & pol, const place_input & in, placement_plan & plan) {
    plan.clear();
    const int64_t need = in.n_reserve - in.n_free;
    if (need <= 0) return;
    std::vector<victim> v;
    evictable(pol.params(), in, v);
    const size_t k = take_first(v, size_t(need), [](const victim & a, const victim & b) {
        return a.pos != b.pos ? a.pos < b.pos : a.seq < b.seq;
    });
    push_evictions(v, k, plan);
}

void place_hkm(const policy & pol, const place_input & in, placement_plan & plan) {
    plan.clear();
    const kv_cells & c = *in.cells;
    // Candidates: cold tokens of this step's selection, hottest first (later positions first among equals).
    struct candidate {
        uint16_t hits;
        int32_t pos;
        int seq;
    };
    std::vector<candidate> cand;
    for (const place_seq & s : in.seqs) {
        for (const int32_t t : s.counted) {
            if (t >= c.n_tokens(s.seq) || c.is_hot(s.seq, in.il, t)) continue;
            if (undoes_recent_move(c.last_move(s.seq, in.il, t), in.step, true)) continue;  // evicted lately: not back yet
            cand.push_back({kv_cells::hit_next(c.hits(s.seq, in.il, t), true), t, s.seq});
        }
    }
    const size_t n_cand = std::min<size_t>(cand.size(), size_t(std::max<int64_t>(0, in.max_promotions)));
    std::partial_sort(cand.begin(), cand.begin() + ptrdiff_t(n_cand), cand.end(), [](const candidate & a, const candidate & b) {
        return a.hits != b.hits ? a.hits > b.hits : a.pos > b.pos;
    });
    // Victims, coldest first (older first among equals); tokens promoted in the last 8 steps only when
    // nothing else is left.
    std::vector<victim> v;
    evictable(pol.params(), in, v);
    const auto recent = std::stable_partition(v.begin(), v.end(), [&](const victim & x) {
        return !moved_lately(c.last_move(x.seq, in.il, x.pos), in.step, true);
    });
    const auto coldest = [](const victim & a, const victim & b) {
        if (a.hits != b.hits) return a.hits < b.hits;
        return a.pos != b.pos ? a.pos < b.pos : a.seq < b.seq;
    };
    std::sort(v.begin(), recent, coldest);
    std::sort(recent, v.end(), coldest);
    const size_t n_settled = size_t(recent - v.begin());
    size_t next_victim = 0;
    int64_t free = in.n_free;
    for (size_t i = 0; i < n_cand; ++i) {
        if (free > in.n_reserve) {
            --free;  // a spare free slot
        } else if (next_victim < n_settled && v[next_victim].hits < cand[i].hits) {
            plan.evict.emplace_back(v[next_victim].seq, v[next_victim].pos);
            ++next_victim;
        } else {
            break;
        }
        plan.promote.emplace_back(cand[i].seq, cand[i].pos);
    }
    // Room for the next step's appends, whatever the hit counts.
    for (; free < in.n_reserve && next_victim < v.size(); ++free, ++next_victim) {
        plan.evict.emplace_back(v[next_victim].seq, v[next_victim].pos);
    }
}

namespace {

// The sequence's own hot tokens before the segment, and the positions that must be hot after it.
struct prefill_frame {
    std::vector<char> chosen;  // [n]
    int64_t n_chosen = 0;
    int64_t room = 0;
};

prefill_frame prefill_start(const policy & pol, const prefill_place_input & in) {
    const kv_cells & c = *in.cells;
    const policy_params & p = pol.params();
    prefill_frame f;
    f.chosen.assign(size_t(in.n), 0);
    int64_t own_hot = 0;
    for (int64_t t = 0; t < in.p0; ++t) own_hot += c.is_hot(in.seq, in.il, t) ? 1 : 0;
    f.room = in.n_free + own_hot - in.n_reserve;
    for (int64_t t = 0; t < in.n; ++t) {
        if (pinned(p, t, in.n) && f.n_chosen < f.room) {
            f.chosen[size_t(t)] = 1;
            ++f.n_chosen;
        }
    }
    return f;
}

void prefill_finish(const prefill_place_input & in, const prefill_frame & f, uint16_t chosen_hits,
                    const policy_params & p, prefill_plan & plan) {
    const kv_cells & c = *in.cells;
    for (int64_t t = 0; t < in.p0; ++t) {
        if (c.is_hot(in.seq, in.il, t) && f.chosen[size_t(t)] == 0) plan.evict.push_back(int32_t(t));
    }
    for (int64_t t = 0; t < in.n; ++t) {
        if (f.chosen[size_t(t)] == 0 || (t < in.p0 && c.is_hot(in.seq, in.il, t))) continue;
        plan.place.push_back(int32_t(t));
        plan.place_hits.push_back(pinned(p, t, in.n) ? uint16_t(0) : chosen_hits);
    }
}

}  // namespace

void place_prefill_fifo(const policy & pol, const prefill_place_input & in, prefill_plan & plan) {
    plan.clear();
    prefill_frame f = prefill_start(pol, in);
    for (int64_t t = in.n; t-- > 0 && f.n_chosen < f.room;) {
        if (f.chosen[size_t(t)] == 0) {
            f.chosen[size_t(t)] = 1;
            ++f.n_chosen;
        }
    }
    prefill_finish(in, f, 0, pol.params(), plan);
}

void place_prefill_hkm(const policy & pol, const prefill_place_input & in, prefill_plan & plan) {
    if (in.importance == nullptr) {
        place_prefill_fifo(pol, in, plan);
        return;
    }
    plan.clear();
    prefill_frame f = prefill_start(pol, in);
    std::vector<int32_t> order;
    for (int64_t t = 0; t < in.n; ++t) {
        if (f.chosen[size_t(t)] == 0) order.push_back(int32_t(t));
    }
    const size_t k = size_t(std::clamp<int64_t>(f.room - f.n_chosen, 0, int64_t(order.size())));
    // Ranked as the selector ranks scores (score/selector.h): rounded to f16 as a score block carries
    // them, higher first, NaN last, lower positions first among equals — so that the tokens placed hot
    // are the ones a decode query like the prompt's last ones selects.
    const float * imp = in.importance;
    const auto key = [imp](int32_t t) { return select_rank_key(round_score_f16(imp[t]), t); };
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(k), order.end(),
                      [&key](int32_t a, int32_t b) { return key(a) > key(b); });
    for (size_t i = 0; i < k; ++i) f.chosen[size_t(order[i])] = 1;
    f.n_chosen += int64_t(k);
    prefill_finish(in, f, kv_cells::hit_increment, pol.params(), plan);
}

}  // namespace hill
