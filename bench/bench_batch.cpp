// Batched decode: aggregate decode tokens/s of B sequences decoding together (one pass over the weights
// per layer for the B tokens of a step; sched/decode_step.h), against B = 1, on a generated model of
// about 0.5 B parameters.
//
//   bench_batch [-m MODEL.gguf] [--type q8_0|f16|q4_0] [--batch 1,2,4,8,16,25] [--n-prompt 64]
//               [--n-gen 16] [--policy full|hillinfer|...] [--kv-host-budget BYTES --kv-dir DIR] [-t N]
//               [--json FILE]
//
// Per batch size: every sequence gets its own prompt (different tokens), is prefilled, then the batch
// runs n_gen decode steps; reported are the median step time and spread, the aggregate tokens/s
// (B tokens per step over the median step), the ratio to B = 1, and the weight bytes streamed per
// decoded token. All KV in RAM unless a budget and a kv-dir are given.
#include "bench_stats.h"
#include "compute/matmul.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"
#include "engine/context.h"
#include "model/synthetic_model.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

int main(int argc, char ** argv) {
    using namespace hill;
    CLI::App app{"HillInfer batched decode benchmark"};
    std::string model_path, type_name = "q8_0", json_path, policy = "full", budget, kv_dir;
    std::vector<int> batches = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 25};
    int n_threads = 0, n_prompt = 64, n_gen = 16;
    app.add_option("-m,--model", model_path, "GGUF model (default: a generated random model of about 0.5 B parameters)");
    app.add_option("--type", type_name, "weight type of the generated model")->capture_default_str();
    app.add_option("--batch", batches, "batch sizes (sequences decoding together)")->delimiter(',');
    app.add_option("--n-prompt", n_prompt, "prompt tokens per sequence")->capture_default_str();
    app.add_option("--n-gen", n_gen, "decode steps per batch size")->capture_default_str();
    app.add_option("--policy", policy, "decode policy")->capture_default_str();
    app.add_option("--kv-host-budget", budget, "hot pool bytes (default: all KV in RAM)");
    app.add_option("--kv-dir", kv_dir, "cold pool directory (with --kv-host-budget)");
    app.add_option("-t,--threads", n_threads, "threads (default: physical cores)");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        blas_init_single_threaded();
        if (n_threads <= 0) n_threads = physical_core_count();
        if (n_prompt < 1 || n_gen < 2) fail_usage("--n-prompt must be >= 1 and --n-gen >= 2");
        for (const int b : batches) {
            if (b < 1 || b > 256) fail_usage("--batch values must be in [1, 256], got {}", b);
        }
        thread_pool pool(n_threads);
        std::string tmp;
        if (model_path.empty()) {
            const auto t = ggml_type_from_name(type_name);
            if (!t) fail_usage("unknown --type '{}'", type_name);
            // About 0.49 B parameters (embedding and output 131 M, 8 layers of 45 M).
            const random_model_params p{.n_vocab = 32000, .n_embd = 2048, .n_ff = 5632, .n_layer = 8, .n_head = 16,
                                        .n_head_kv = 4, .type = *t};
            tmp = (std::filesystem::temp_directory_path() / fmt::format("hill-bench-batch-{}.gguf", type_name)).string();
            fmt::print(stderr, "writing a random {} model to {} ...\n", type_name, tmp);
            write_random_model(tmp, p);
            model_path = tmp;
        }
        const auto m = model::load(model_path);
        const hparams & hp = m->hp();
        fmt::print("bench_batch: {} ({:.0f} M params, {} weight bytes per step), {} threads, policy {}, {} prompt + {} "
                   "decode tokens per sequence, KV {}\n", model_path, double(m->n_params()) / 1e6,
                   format_bytes(m->weight_bytes_per_token()), n_threads, policy, n_prompt, n_gen,
                   budget.empty() ? std::string("in RAM") : "hot budget " + budget + " per batch, cold in " + kv_dir);
        fmt::print("{:>6} {:>22} {:>14} {:>10} {:>18} {:>26}\n", "batch", "step ms (min-max)", "tokens/s", "vs B=1",
                   "weights / token", "forward / attend / other ms");
        nlohmann::json out = {{"model", model_path}, {"params", m->n_params()}, {"threads", n_threads},
                              {"policy", policy}, {"n_prompt", n_prompt}, {"n_gen", n_gen},
                              {"results", nlohmann::json::array()}};
        double tps1 = 0.0;
        for (const int nb : batches) {
            context_params cp{.n_ctx = n_prompt + n_gen + 1, .n_batch = 64};
            cp.n_seq = nb;
            cp.policy.name = policy;
            if (!budget.empty()) {
                cp.kv_host_budget = uint64_t(std::stod(budget));
                cp.kv_dir = kv_dir;
            }
            context ctx(*m, cp, pool);
            std::vector<int> seqs(static_cast<size_t>(nb));
            std::vector<int32_t> tokens(static_cast<size_t>(nb));
            std::vector<float> logits(size_t(nb) * size_t(hp.n_vocab));
            for (int s = 0; s < nb; ++s) {
                std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
                for (int i = 0; i < n_prompt; ++i) prompt[size_t(i)] = 1 + (i * 7919 + s * 104729) % (hp.n_vocab - 1);
                ctx.prefill(s, prompt, false, logits.data());
                seqs[size_t(s)] = s;
                tokens[size_t(s)] = 1 + (s * 31) % (hp.n_vocab - 1);
            }
            std::vector<double> ms;
            step_stats warm;  // after the first step, which warms up: not counted
            for (int step = 0; step < n_gen; ++step) {
                const int64_t t0 = time_us();
                ctx.decode(seqs, tokens, logits.data());
                if (step > 0) ms.push_back(double(time_us() - t0) / 1e3);
                if (step == 0) warm = ctx.decode_stats();
                for (int s = 0; s < nb; ++s) {
                    const float * l = logits.data() + size_t(s) * size_t(hp.n_vocab);
                    tokens[size_t(s)] = int32_t(std::max_element(l, l + hp.n_vocab) - l);
                }
            }
            const bench::stat3 st = bench::summarize(ms);
            const double tps = double(nb) / (st.median / 1e3);
            if (nb == 1) tps1 = tps;
            const double ratio = tps1 > 0.0 ? tps / tps1 : 0.0;
            // Stage times per step, over the timed steps.
            const step_stats & ss = ctx.decode_stats();
            const double per = 1e3 * double(ms.size());
            const double fwd = double(ss.t_forward_us - warm.t_forward_us) / per;
            const double att = double(ss.t_attend_us - warm.t_attend_us) / per;
            double total = 0.0;
            for (const double x : ms) total += x;
            const double other = total / double(ms.size()) - fwd - att;
            fmt::print("{:>6} {:>10.1f} ({:.1f}-{:.1f}) {:>14.2f} {:>9.2f}x {:>18} {:>11.1f} / {:.1f} / {:.1f}\n", nb, st.median,
                       st.lo, st.hi, tps, ratio, format_bytes(m->weight_bytes_per_token() / uint64_t(nb)), fwd, att, other);
            out["results"].push_back({{"batch", nb}, {"step_ms", st.median}, {"step_ms_min", st.lo},
                                      {"step_ms_max", st.hi}, {"tokens_per_s", tps}, {"forward_ms", fwd},
                                      {"attend_ms", att},
                                      {"ratio_to_batch_1", tps1 > 0.0 ? nlohmann::json(ratio) : nlohmann::json(nullptr)}});
        }
        fmt::print("peak RSS: {}\n", format_bytes(peak_rss_bytes()));
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
        if (!tmp.empty()) std::filesystem::remove(tmp);
        return 0;
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_batch: error: {}\n", e.what());
        return int(e.code());
    }
}
