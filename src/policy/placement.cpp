#include "policy/placement.h"

#include "core/error.h"
#include "score/selector.h"

#include <algorithm>

namespace hill {

namespace {

// A hot token placement may evict, with its hit count after the step and how protected it is:
// 0 free to go; 1 promoted within the protected period; 2 attended at this step. Evictions for an
// exchange take rank 0 only; evictions the next step's appends need take the lowest rank first.
struct victim {
    uint8_t rank;
    uint16_t hits;
    int32_t pos;
    int seq;
};

// Whether position t of a sequence of n tokens is pinned hot: a sink or in the recent window.
bool pinned(const policy_params & p, int64_t t, int64_t n) {
    return t < p.n_sinks || t >= n - p.n_window;
}

// The hot tokens of layer in.il outside the sinks and the windows, of every sequence (in.seqs' with
// this step's hit counts and selections).
void evictable(const policy_params & p, const place_input & in, std::vector<victim> & out) {
    out.clear();
    const kv_cells & c = *in.cells;
    std::vector<const place_seq *> step(size_t(c.n_seq()), nullptr);
    for (const place_seq & s : in.seqs) step[size_t(s.seq)] = &s;
    for (int seq = 0; seq < c.n_seq(); ++seq) {
        const place_seq * s = step[size_t(seq)];
        const std::span<const uint32_t> slots = c.hot_slots(seq, in.il);
        const std::span<const uint16_t> hits = c.hit_counts(seq, in.il);
        const int64_t n = s != nullptr ? s->n : int64_t(slots.size());
        size_t k = 0;
        for (int64_t t = 0; t < int64_t(slots.size()); ++t) {
            const bool sel = s != nullptr && k < s->counted.size() && s->counted[k] == t;
            k += sel ? 1 : 0;
            if (slots[size_t(t)] == kv_cells::no_slot || pinned(p, t, n)) continue;
            const uint8_t rank = sel ? 2 : moved_lately(c.last_move(seq, in.il, t), in.step, true) ? 1 : 0;
            out.push_back({rank, s != nullptr ? kv_cells::hit_next(hits[size_t(t)], sel) : hits[size_t(t)], int32_t(t), seq});
        }
    }
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
    // Oldest first, the tokens this step attended last.
    const size_t k = std::min(v.size(), size_t(need));
    std::partial_sort(v.begin(), v.begin() + ptrdiff_t(k), v.end(), [](const victim & a, const victim & b) {
        if ((a.rank == 2) != (b.rank == 2)) return b.rank == 2;
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
    // Victims: by protection rank, then coldest first, older first among equals.
    std::vector<victim> v;
    evictable(pol.params(), in, v);
    // At most n_cand victims go in exchanges and n_reserve for the appends: only those need ordering.
    const size_t n_sorted = std::min(v.size(), n_cand + size_t(std::max<int64_t>(0, in.n_reserve)));
    std::partial_sort(v.begin(), v.begin() + ptrdiff_t(n_sorted), v.end(), [](const victim & a, const victim & b) {
        if (a.rank != b.rank) return a.rank < b.rank;
        if (a.hits != b.hits) return a.hits < b.hits;
        return a.pos != b.pos ? a.pos < b.pos : a.seq < b.seq;
    });
    const size_t n_settled =
        size_t(std::find_if(v.begin(), v.begin() + ptrdiff_t(n_sorted), [](const victim & x) { return x.rank != 0; }) - v.begin());
    size_t next_victim = 0;
    int64_t free = in.n_free;
    for (size_t i = 0; i < n_cand; ++i) {
        if (free > in.n_reserve) {
            --free;  // a spare free slot
        } else if (next_victim < n_settled && v[next_victim].hits < cand[i].hits &&
                   n_sorted - next_victim > size_t(std::max<int64_t>(0, in.n_reserve - free))) {
            // (an exchange leaves the victims the next step's appends need)
            plan.evict.emplace_back(v[next_victim].seq, v[next_victim].pos);
            ++next_victim;
        } else {
            break;
        }
        plan.promote.emplace_back(cand[i].seq, cand[i].pos);
    }
    // Room for the next step's appends, whatever the hit counts and ranks.
    for (; free < in.n_reserve && next_victim < n_sorted; ++free, ++next_victim) {
        plan.evict.emplace_back(v[next_victim].seq, v[next_victim].pos);
    }
}

namespace {

// The sequence's own hot tokens before the segment, and the positions that must be hot after it.
struct prefill_frame {
    std::vector<char> chosen;  // [n]
    int64_t n_chosen = 0;
    int64_t room = 0;
    int64_t kept = 0;          // a sliding layer's first kept position after the segment (kv_cells::kept_from)
};

prefill_frame prefill_start(const policy & pol, const prefill_place_input & in) {
    const kv_cells & c = *in.cells;
    const policy_params & p = pol.params();
    prefill_frame f;
    f.chosen.assign(size_t(in.n), 0);
    int64_t own_hot = 0;
    for (int64_t t = 0; t < in.p0; ++t) own_hot += c.is_hot(in.seq, in.il, t) ? 1 : 0;
    f.room = in.n_free + own_hot - in.n_reserve;
    // A sliding layer places nothing its window leaves behind: those tokens are dropped at commit.
    f.kept = c.window(in.il) > 0 ? std::max<int64_t>(0, in.n - c.window(in.il)) : 0;
    for (int64_t t = f.kept; t < in.n; ++t) {
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
    for (int64_t t = in.n; t-- > f.kept && f.n_chosen < f.room;) {
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
    for (int64_t t = f.kept; t < in.n; ++t) {
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
