// The logit error the int8 weight products add (compute/kernel_mode.h, matmul_mode::int8) against
// the exact f32 path, on generated llama models of every weight type with an int8 product (the
// tiny model of test_llama_oracle: rows of 256, n_ff 768, 2 layers), decoding a prompt token by
// token (gemv) and in one chunk of 32 (gemm through gemv_batch): max |int8 − exact| / max |exact|
// over all the prompt's logits, printed and bounded. The bounds are the measured values (seeds
// fixed) with a margin; docs/benchmarks.md quotes them. Types without an int8 product give the
// same bits in both modes.
#include "compute/kernel_mode.h"
#include "engine/session.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace hill {
namespace {

struct logit_case {
    const char * name;
    weight_scheme type;
    double bound;  // max |int8 − exact| / max |exact|; 0: bit for bit
};

void PrintTo(const logit_case & c, std::ostream * os) { *os << c.name; }

class int8_logits : public ::testing::TestWithParam<logit_case> {};

TEST_P(int8_logits, error_against_exact_within_bound) {
    const logit_case & c = GetParam();
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    random_model_params p;
    p.n_vocab = 512;
    p.n_embd = 256;
    p.n_ff = 768;
    p.n_layer = 2;
    p.n_head = 8;
    p.n_head_kv = 2;
    p.n_ctx = 128;
    p.type = c.type;
    p.seed = 15;
    write_random_model(path, p);
    auto m = model::load(path);
    thread_pool pool(2);
    std::vector<int32_t> tokens(32);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(1 + (i * 7919) % 511);

    struct restore {
        matmul_mode saved = matmul_mode_get();
        ~restore() { matmul_mode_set(saved); }
    } restore_mode;
    for (int32_t n_batch : {1, 32}) {
        std::vector<float> logits[2];
        for (int k = 0; k < 2; ++k) {
            matmul_mode_set(k == 0 ? matmul_mode::exact : matmul_mode::int8);
            session s(*m, context_params{64, ggml_type::f32, n_batch}, pool);
            s.eval(tokens, true);
            logits[k].assign(s.logits(), s.logits() + tokens.size() * size_t(p.n_vocab));
        }
        double max_ref = 0.0, max_err = 0.0;
        int same_argmax = 0;
        for (size_t t = 0; t < tokens.size(); ++t) {
            const float * e = logits[0].data() + t * size_t(p.n_vocab);
            const float * q = logits[1].data() + t * size_t(p.n_vocab);
            for (int32_t i = 0; i < p.n_vocab; ++i) {
                max_ref = std::max(max_ref, std::fabs(double(e[i])));
                max_err = std::max(max_err, std::fabs(double(q[i]) - double(e[i])));
            }
            same_argmax += std::max_element(e, e + p.n_vocab) - e == std::max_element(q, q + p.n_vocab) - q;
        }
        std::printf("%s n_batch %d: int8 vs exact max |error| / max |logit| = %.2e (bound %.0e), argmax equal at "
                    "%d of %zu positions\n",
                    c.name, n_batch, max_err / max_ref, c.bound, same_argmax, tokens.size());
        if (c.bound == 0.0) {
            EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0) << c.name;
        } else {
            EXPECT_LE(max_err / max_ref, c.bound) << c.name << " n_batch " << n_batch;
            EXPECT_GT(max_err, 0.0) << c.name << ": the int8 mode did not change the logits";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(types, int8_logits,
                         ::testing::Values(logit_case{"f16", ggml_type::f16, 0.0},
                                           logit_case{"q8_0", ggml_type::q8_0, 3e-2},
                                           logit_case{"q4_0", ggml_type::q4_0, 3e-2},
                                           logit_case{"q4_1", ggml_type::q4_1, 3e-2},
                                           logit_case{"q5_0", ggml_type::q5_0, 3e-2},
                                           logit_case{"q5_1", ggml_type::q5_1, 3e-2},
                                           logit_case{"q4_k", ggml_type::q4_k, 3e-2},
                                           logit_case{"q5_k", ggml_type::q5_k, 3e-2},
                                           logit_case{"q6_k", ggml_type::q6_k, 3e-2},
                                           logit_case{"q4_k_m", weight_scheme(ggml_type::q4_k, true), 3e-2}),
                         [](const auto & info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hill
