// evaluate_perplexity: a stop request that the storage device acts on inside a decode step ends the
// run with the value so far, as a stop between steps does.
#include "core/error.h"
#include "engine/perplexity.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

namespace hill {
namespace {

TEST(perplexity, stop_inside_a_device_pass_returns_the_value_so_far) {
    test::temp_dir dir;
    write_random_model(dir.file("m.gguf"), random_model_params{.n_vocab = 300, .n_embd = 64, .n_ff = 96, .n_layer = 2,
                                                               .n_head = 4, .n_head_kv = 2, .n_ctx = 256, .seed = 5});
    const auto m = model::load(dir.file("m.gguf"));
    std::vector<int32_t> ids;
    for (int i = 0; i < 600; ++i) ids.push_back(2 + (i * 53) % 297);
    thread_pool pool(2);
    std::atomic<bool> stop{false};
    // 24 hot tokens per layer (F16 rows of 64 bytes, 64-token pages): past token ~90 of a window,
    // every decode step reads written cold pages through the storage device, which polls stop.
    const auto params = [&] {
        context_params p{.n_ctx = 200, .kv_host_budget = m->hp().kv_bytes_per_token(ggml_type::f16) * 24,
                         .kv_dir = dir.file("kv")};
        p.storage.stop_requested = [&] { return stop.load(); };
        return p;
    };
    session ref_s(*m, params(), pool);
    perplexity_result at_150;
    const perplexity_result ref = evaluate_perplexity(ref_s, ids, 1, 2, [&](const perplexity_result & r) {
        if (r.n_tokens == 150) at_150 = r;
        return true;
    });
    EXPECT_FALSE(ref.interrupted);
    EXPECT_EQ(ref.n_tokens, 2 * 199);
    ASSERT_GT(ref_s.ctx().storage().counters().n_read_passes, 0u) << "no decode step read the cold pool";

    // The stop request comes after token 150: after_token goes on (as if the signal came just
    // after it looked), and the next step's device pass throws exit_code::interrupted.
    session s(*m, params(), pool);
    int64_t calls = 0;
    const perplexity_result r = evaluate_perplexity(s, ids, 1, 2, [&](const perplexity_result & p) {
        ++calls;
        if (p.n_tokens == 150) stop = true;
        return true;
    });
    EXPECT_TRUE(r.interrupted);
    EXPECT_EQ(calls, 150);
    EXPECT_EQ(r.n_tokens, 150);
    EXPECT_EQ(r.n_windows, 0);
    EXPECT_EQ(r.n_windows_total, 2);
    EXPECT_EQ(r.sum_nll, at_150.sum_nll);
    EXPECT_EQ(r.perplexity, at_150.perplexity);
    EXPECT_TRUE(std::isfinite(r.perplexity));
    EXPECT_EQ(s.n_past(), 150);  // the abandoned step was rolled back
}

}  // namespace
}  // namespace hill
