// The forward pass against an independent float64 NumPy implementation (tests/reference/llama_ref.py)
// on small random models written as GGUF: 8 query / 2 KV heads, odd dimensions.
#include "engine/session.h"
#include "model/synthetic_model.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace hill {
namespace {

struct ref_case {
    const char * name;
    ggml_type type;
    int32_t n_embd;
    int32_t n_ff;
    float tol;  // max |ours - ref| / max |ref|
    bool tied;
    float freq_base;
    float rope_scale;
};

std::vector<std::vector<double>> run_reference(const std::string & model, const std::vector<int32_t> & tokens) {
    std::string list;
    for (size_t i = 0; i < tokens.size(); ++i) list += (i ? "," : "") + std::to_string(tokens[i]);
    const std::string cmd = std::string(HILL_NUMPY_PYTHON) + " " + HILL_SOURCE_DIR + "/tests/reference/llama_ref.py " +
                            model + " " + list;
    FILE * p = ::popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr);
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    EXPECT_EQ(::pclose(p), 0) << "reference failed: " << cmd;
    std::vector<std::vector<double>> rows;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        rows.emplace_back();
        double v;
        while (ls >> v) rows.back().push_back(v);
    }
    return rows;
}

bool numpy_available() {
    const std::string py = HILL_NUMPY_PYTHON;
    return !py.empty() && py.find("NOTFOUND") == std::string::npos &&
           std::system((py + " -c 'import numpy' 2>/dev/null").c_str()) == 0;
}

class reference : public ::testing::TestWithParam<ref_case> {};

TEST_P(reference, logits_match_float64_numpy) {
    if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) not found";
    const ref_case & c = GetParam();
    test::temp_dir dir;
    const std::string path = dir.file("m.gguf");
    const random_model_params p{.n_vocab = 301, .n_embd = c.n_embd, .n_ff = c.n_ff, .n_layer = 2, .n_head = 8,
                                .n_head_kv = 2, .n_ctx = 64, .type = c.type, .rope_freq_base = c.freq_base,
                                .rope_scaling_factor = c.rope_scale, .tied_output = c.tied, .seed = 7};
    write_random_model(path, p);

    const std::vector<int32_t> tokens = {1, 17, 300, 42, 42, 259, 5, 123};
    const auto ref = run_reference(path, tokens);
    ASSERT_EQ(ref.size(), tokens.size());

    auto m = model::load(path);
    thread_pool pool(2);
    // Whole prompt at once (gemm + prefill attention) and token by token (gemv + decode attention).
    for (int32_t n_batch : {8, 1}) {
        session s(*m, session_params{64, ggml_type::f32, n_batch}, pool);
        s.eval(tokens, true);
        double max_ref = 0.0, max_err = 0.0;
        for (size_t t = 0; t < tokens.size(); ++t) {
            ASSERT_EQ(ref[t].size(), size_t(p.n_vocab));
            for (int32_t i = 0; i < p.n_vocab; ++i) {
                const double r = ref[t][size_t(i)];
                max_ref = std::max(max_ref, std::abs(r));
                max_err = std::max(max_err, std::abs(double(s.logits()[t * size_t(p.n_vocab) + size_t(i)]) - r));
            }
        }
        std::printf("%s n_batch %d: max |error| / max |logit| = %.2e (tolerance %.0e)\n", c.name, n_batch,
                    max_err / max_ref, double(c.tol));
        EXPECT_LE(max_err / max_ref, c.tol) << c.name << " n_batch " << n_batch << ": max error " << max_err
                                            << " against max |logit| " << max_ref;
    }
}

INSTANTIATE_TEST_SUITE_P(
    types, reference,
    ::testing::Values(ref_case{"f32", ggml_type::f32, 80, 99, 1e-4f, false, 10000.0f, 1.0f},
                      ref_case{"f32_tied_scaled_rope", ggml_type::f32, 112, 75, 1e-4f, true, 50000.0f, 4.0f},
                      ref_case{"f16", ggml_type::f16, 80, 99, 2e-3f, false, 10000.0f, 1.0f},
                      ref_case{"bf16", ggml_type::bf16, 80, 99, 2e-3f, false, 10000.0f, 1.0f},
                      ref_case{"q8_0", ggml_type::q8_0, 96, 160, 2e-3f, false, 10000.0f, 1.0f},
                      ref_case{"q4_0", ggml_type::q4_0, 96, 160, 2e-3f, false, 10000.0f, 1.0f}),
    [](const auto & info) { return std::string(info.param.name); });

}  // namespace
}  // namespace hill
