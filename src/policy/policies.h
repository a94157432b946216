// The registered policies' factories (registry.cpp); each lives in its own file.
#pragma once

#include "policy/policy.h"

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace hill {

std::unique_ptr<policy> make_full_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_streaming_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_hillinfer_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_quest_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_h2o_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_leoam_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_infinigen_policy(const policy_params & p, int n_head_kv);

// The selection the scoring policies share (top_alpha.cpp): the sinks, the window and, per group (one,
// or one per KV head with kv_head granularity), the ⌈α·N⌉ top-scored middle tokens (top_unit::tokens:
// hillinfer, infinigen, h2o) or whole pages until they hold that many (top_unit::pages, quest_select:
// quest, leoam). They differ in where their scores come from and their default placement. name: a
// string literal.
enum class top_unit { tokens, pages };
std::unique_ptr<policy> make_top_alpha_policy(std::string_view name, copy_kind from, top_unit unit,
                                              placement_kind default_placement, const policy_params & p, int n_head_kv);

// The pages Quest attends: sinks [0, s_end) and window [w_begin, n) of n tokens, plus whole pages of
// page_size tokens taken in the order of their scores (page j's score: scores[t] of its first middle
// token t; higher first, equal scores the lower page first, NaN last as select_rank_key orders) until
// their middle tokens number n_top or more. out: ascending, without repeats; pages: scratch (quest.cpp;
// public for its test).
void quest_select(const float * scores, int64_t n, int64_t n_top, int64_t n_sinks, int64_t n_window, int64_t page_size,
                  std::vector<std::pair<uint64_t, int64_t>> & pages, std::vector<int32_t> & out);

}  // namespace hill
