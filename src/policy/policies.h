// The registered policies' factories (registry.cpp); each lives in its own file.
#pragma once

#include "policy/policy.h"

#include <memory>

namespace hill {

std::unique_ptr<policy> make_full_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_streaming_policy(const policy_params & p, int n_head_kv);
std::unique_ptr<policy> make_hillinfer_policy(const policy_params & p, int n_head_kv);

}  // namespace hill
