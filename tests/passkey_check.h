// Passkey retrieval check shared by the passkey tests (test_passkey*.cpp): with the passkey model
// built by construction (docs/passkey.md), policy full and policy hillinfer (α = 0.1, 0.2 and 1, at
// least 75% of the KV cold in every layer) retrieve the 5-digit key at depths 0, 25, 50, 75 and 100%; policy
// streaming (sinks + window) does not at depths 0-75%: the task needs retrieval. One prefill per
// depth of all but the prompt's last token; then, under each policy in turn, the last prompt token
// and the answer are decode steps (policies act at decode). The session starts under hillinfer on the
// default plain SSD, so that it keeps the scoring copy (the default INT3 one) that hillinfer scores
// from; full and streaming do not use it.
#pragma once

#include "engine/passkey.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace hill::test {

inline void check_retrieval(int32_t n_ctx) {
    temp_dir dir;
    write_passkey_model(dir.file("passkey.gguf"), passkey_model_params{.n_ctx = n_ctx});
    auto m = model::load(dir.file("passkey.gguf"));
    thread_pool pool(2);
    // Under the sanitizers (test::sanitizer_build) depths 0, 50 and 100%: the needle at the haystack's
    // start, middle and end (the last in streaming's window), each under every policy, in 3/5 of the prefills.
    const std::vector<double> depths = sanitizer_build ? std::vector<double>{0.0, 0.5, 1.0}
                                                       : std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0};
    for (double depth : depths) {
        const passkey_prompt p = make_passkey_prompt(
            m->tokenizer(), passkey_prompt_params{.n_tokens = n_ctx - 8, .depth = depth,
                                                  .seed = uint64_t(n_ctx) + uint64_t(depth * 100)});
        ASSERT_LE(p.n_tokens, n_ctx - 8);
        ASSERT_GE(p.n_tokens, n_ctx - 64) << "the prompt should fill the context";
        const std::vector<int32_t> ids = m->tokenizer().encode(p.text, true);
        // A quarter of the prompt's KV in the hot pool: 75% cold.
        const int64_t n_head = int64_t(ids.size()) - 1;
        context_params sp{.n_ctx = n_ctx, .kv_host_budget = m->hp().kv_bytes_per_token(ggml_type::f16) *
                                                             uint64_t(n_head) / 4,
                          .kv_dir = dir.file("kv"), .policy = policy_params{.name = "hillinfer", .alpha = 0.1}};
        session s(*m, sp, pool);
        ASSERT_NE(s.ctx().scoring_copy(), nullptr);
        s.eval(std::span<const int32_t>(ids).first(size_t(n_head)));
        const kv_cells & cells = s.ctx().cells();
        for (int il = 0; il < cells.n_layer(); ++il) {
            EXPECT_GE((cells.n_tokens(0) - cells.n_hot(il)) * 4, cells.n_tokens(0) * 3)
                << "at least 75% of the KV cold in layer " << il;
        }
        struct run {
            policy_params policy;
            bool must_retrieve;
        };
        const policy_params hill_01{.name = "hillinfer", .alpha = 0.1};
        const policy_params hill_02{.name = "hillinfer", .alpha = 0.2};
        const policy_params hill_1{.name = "hillinfer", .alpha = 1.0};  // scores the middle, keeps all of it
        const policy_params streaming{.name = "streaming"};
        for (const run & r : {run{policy_params{}, true}, run{hill_01, true}, run{hill_02, true}, run{hill_1, true},
                              run{streaming, false}}) {
            s.truncate(n_head);
            s.set_policy(r.policy);
            s.eval(std::span<const int32_t>(&ids.back(), 1));
            const passkey_answer a = answer_passkey(s, p.passkey);
            const std::string what = r.policy.name + " alpha " + std::to_string(r.policy.alpha) +
                                     " depth " + std::to_string(depth) + ": key " + p.passkey + ", answer '" + a.text + "'";
            if (r.must_retrieve) {
                EXPECT_TRUE(a.correct) << what;
            } else if (depth < 0.9) {
                // Sinks and window do not reach the needle (the last depth puts it in the window).
                EXPECT_FALSE(a.correct) << what;
            }
        }
    }
}


}  // namespace hill::test
