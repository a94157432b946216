#include "model/forward.h"

#include "compute/ops.h"
#include "core/error.h"
#include "model/model.h"

namespace hill {

std::unique_ptr<arch_forward> make_forward(const model & m, thread_pool & pool, int64_t n_rows_max, int64_t n_ctx) {
    HILL_ASSERT(n_rows_max > 0);
    const std::string & arch = m.hp().arch;
    if (arch == "opt") return make_opt_forward(m, pool, n_rows_max);
    for (const char * a : {"llama", "qwen2", "qwen", "qwen3", "gemma2", "gemma3", "phi3"}) {
        if (arch == a) return make_llama_forward(m, pool, n_rows_max, n_ctx);
    }
    fail_input("'{}': architecture '{}' has no forward pass; supported: llama, qwen2, qwen, qwen3, gemma2, gemma3, "
               "phi3, opt", m.path(), arch);
}

void rmsnorm_rows(const std::vector<float> & w, float eps, const float * x, int64_t n, float * y) {
    const int64_t n_cols = int64_t(w.size());
    for (int64_t t = 0; t < n; ++t) rmsnorm(x + t * n_cols, w.data(), y + t * n_cols, n_cols, eps);
}

void layernorm_rows(const std::vector<float> & w, const std::vector<float> & b, float eps, const float * x, int64_t n,
                    float * y) {
    HILL_ASSERT(b.size() == w.size());
    const int64_t n_cols = int64_t(w.size());
    for (int64_t t = 0; t < n; ++t) layernorm(x + t * n_cols, w.data(), b.data(), y + t * n_cols, n_cols, eps);
}

void linear(const weight_view & w, const std::vector<float> & b, const float * x, int64_t n, float * y,
            thread_pool & pool) {
    gemm(w, x, n, y, pool);
    if (!b.empty()) add_bias_rows(y, b.data(), n, w.n_rows);
}

}  // namespace hill
