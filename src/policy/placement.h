// Placement rules of the hot pool (policy.h): what every policy's place() and place_prefill() use
// unless it refines them.
//
// fifo: the sinks and the most recent tokens stay hot; when the next step needs room, the oldest hot
// token outside the sinks and the window is evicted (one the step did not attend, while there is one).
// No promotions. After a prefill, the sinks and the most recent tokens that fit are hot.
//
// hkm (HillInfer paper §4.2 "Bidirectional KV Cache Pools"; DESIGN.md §3 step 6): the hit table
// (kv_cells.h) drives the moves.
//   - Promote: a cold token the step selected (it is read by the gather anyway, so the promotion
//     copies its rows and costs no I/O), highest hit count first, at most max_promotions per step (the
//     byte budget): into a spare free slot, or in exchange for the evictable hot token of lowest hit
//     count when that count is below the candidate's. A token evicted within the last 8 steps is not
//     promoted back yet.
//   - Evict: besides those exchanges, only what the next step's appends need, lowest hit count
//     first. Never the sinks or the window; an exchange never takes this step's selection nor a
//     token promoted within the last 8 steps, and the appends take them only when nothing else is
//     left (a `full` step attends to everything). These two protected periods are the margin
//     between promotion and demotion: a move is undone within 8 steps only when the appends leave
//     no other choice, so there is no ping-pong (measured: docs/policies.md).
//   - Hits: every token attended at a step counts a hit except the sinks (kv_cells.h), so a token
//     leaving the window carries its recent attention and stays while it is used (temporal
//     locality), and an old token that keeps being selected by score climbs above it.
//   - After a prefill: the sinks, the window and the tokens of highest prefill importance (the
//     importance score of DESIGN.md §1 under the prompt's last queries) are hot, as many as fit,
//     starting with one hit so they are kept through the first steps; a sliding-window layer's, only
//     among the tokens its window keeps (kv/kv_cells.h).
// An eviction never writes: every token has its cold copy (kv/cold_logs.h).
#pragma once

#include "policy/policy.h"

namespace hill {

// Steps within which a move undone counts as ping-pong (DESIGN.md §1), and hkm's protected period.
inline constexpr uint32_t pingpong_steps = 8;

void place_fifo(const policy & pol, const place_input & in, placement_plan & plan);
void place_hkm(const policy & pol, const place_input & in, placement_plan & plan);
void place_prefill_fifo(const policy & pol, const prefill_place_input & in, prefill_plan & plan);
void place_prefill_hkm(const policy & pol, const prefill_place_input & in, prefill_plan & plan);

// Whether a token last moved at `last_move` (kv_cells::last_move) was promoted (promotion) or evicted
// (!promotion) within pingpong_steps steps before `step`.
bool moved_lately(uint32_t last_move, uint32_t step, bool promotion);
// Whether moving it now (a promotion or an eviction) undoes its last move within pingpong_steps steps.
inline bool undoes_recent_move(uint32_t last_move, uint32_t step, bool promote_now) {
    return moved_lately(last_move, step, !promote_now);
}

}  // namespace hill
