// Decode and prefill speed of a model, with the weight bytes streamed per second during decode
// beside this machine's DRAM read bandwidth (measured here).
//
//   bench_decode [-m MODEL.gguf] [--type f16|q8_0|...] [-t N] [--n-prompt 128] [--n-gen 32]
//                [--reps 3] [--json FILE]
// Without -m it writes a random model large enough to leave the caches (~0.5-1 GB) to a temp
// file. Reports the median and min/max over the repetitions.
#include "bench_dram.h"
#include "bench_stats.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"
#include "compute/kernel_mode.h"
#include "compute/matmul.h"
#include "engine/session.h"
#include "model/synthetic_model.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace {

using namespace hill;

using bench::dram_read_gbps;
using bench::read_gbps;
using bench::stat3;
using bench::summarize;

// Read bandwidth over the model's own weight pages (the mapped file): on a VM the host may place
// memory on nodes of different speed, so the yardstick also reads exactly the bytes decode reads.
double weights_read_gbps(thread_pool & pool, const model & m, int reps) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    auto span = [&](const weight_view & w) {
        lo = std::min(lo, reinterpret_cast<uintptr_t>(w.data));
        hi = std::max(hi, reinterpret_cast<uintptr_t>(w.data) + size_t(w.n_rows) * w.row_bytes());
    };
    span(m.token_embd());
    span(m.output());
    for (const layer_weights & l : m.layers()) {
        for (const weight_view * w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) span(*w);
    }
    lo = (lo + 31) / 32 * 32;
    return read_gbps(pool, reinterpret_cast<const uint64_t *>(lo), (hi - lo) / 32 * 4, reps);
}

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"HillInfer decode/prefill benchmark"};
    std::string model_path, type_name = "q8_0", json_path;
    int n_threads = 0, n_prompt = 128, n_gen = 32, reps = 3;
    app.add_option("-m,--model", model_path, "GGUF model (default: a generated random model)");
    app.add_option("--type", type_name, "weight type of the generated model")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "threads (default: physical cores)");
    app.add_option("--n-prompt", n_prompt, "prompt tokens for prefill")->capture_default_str();
    app.add_option("--n-gen", n_gen, "decode steps per repetition")->capture_default_str();
    app.add_option("--reps", reps, "repetitions")->capture_default_str();
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        blas_init_single_threaded();
        if (n_threads <= 0) n_threads = physical_core_count();
        if (n_prompt < 1 || n_gen < 1 || reps < 1) fail_usage("--n-prompt, --n-gen and --reps must be >= 1");
        thread_pool pool(n_threads);

        std::string tmp;
        if (model_path.empty()) {
            const auto t = ggml_type_from_name(type_name);
            if (!t) fail_usage("unknown --type '{}'", type_name);
            // About 0.4 B parameters: 0.35 GB as Q8_0, 0.65 GB as F16, far beyond any cache.
            const random_model_params p{.n_vocab = 32000, .n_embd = 2048, .n_ff = 5632, .n_layer = 6, .n_head = 16,
                                        .n_head_kv = 4, .type = *t};
            tmp = (std::filesystem::temp_directory_path() / fmt::format("hill-bench-{}.gguf", type_name)).string();
            fmt::print(stderr, "writing a random {} model to {} ...\n", type_name, tmp);
            write_random_model(tmp, p);
            model_path = tmp;
        }
        auto m = model::load(model_path);
        const hparams & hp = m->hp();
        const uint64_t wbytes = m->weight_bytes_per_token();

        const double dram_fresh = dram_read_gbps(pool, size_t(1) << 30, 5);

        std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
        for (int i = 0; i < n_prompt; ++i) prompt[size_t(i)] = 1 + (i * 7919) % (hp.n_vocab - 1);
        std::vector<double> prefill_tps, decode_tps;
        session s(*m, context_params{n_prompt + n_gen + 1, ggml_type::f16}, pool);
        for (int r = 0; r < reps + 1; ++r) {  // the first repetition warms the page cache and is dropped
            s.truncate(0);
            int64_t t0 = time_us();
            s.eval(prompt);
            const double tp = double(n_prompt) / (double(time_us() - t0) / 1e6);
            int32_t tok = 1;
            t0 = time_us();
            for (int i = 0; i < n_gen; ++i) {
                s.eval(std::span<const int32_t>(&tok, 1));
                tok = int32_t(std::max_element(s.logits(), s.logits() + hp.n_vocab) - s.logits());
            }
            const double td = double(n_gen) / (double(time_us() - t0) / 1e6);
            if (r > 0) {
                prefill_tps.push_back(tp);
                decode_tps.push_back(td);
            }
        }
        const stat3 pf = summarize(prefill_tps), dc = summarize(decode_tps);
        const double stream_gbps = dc.median * double(wbytes) / 1e9;
        const double dram_weights = weights_read_gbps(pool, *m, 5);
        const double dram = std::max(dram_fresh, dram_weights);  // the yardstick: the faster of the two

        fmt::print("machine: {} threads ({} physical cores), DRAM read {:.1f} GB/s over a fresh 1 GiB buffer, {:.1f} "
                   "GB/s over the weights' pages (best of 5 each)\n", n_threads, physical_core_count(), dram_fresh,
                   dram_weights);
        fmt::print("model:   {} ({} layers, n_embd {}, {:.0f} M params, {} weight bytes per token)\n", model_path,
                   hp.n_layer, hp.n_embd, double(m->n_params()) / 1e6, format_bytes(wbytes));
        fmt::print("prefill: {:.1f} tokens/s (min {:.1f}, max {:.1f}) over {} tokens\n", pf.median, pf.lo, pf.hi,
                   n_prompt);
        fmt::print("decode:  {:.2f} tokens/s (min {:.2f}, max {:.2f}) over {} steps\n", dc.median, dc.lo, dc.hi, n_gen);
        fmt::print("decode weight stream: {:.1f} GB/s = {:.0f}% of the DRAM read bandwidth (the faster of the two)\n",
                   stream_gbps, 100.0 * stream_gbps / dram);
        fmt::print("peak RSS: {}\n", format_bytes(peak_rss_bytes()));
        if (!json_path.empty()) {
            nlohmann::json j = {{"model", model_path}, {"n_threads", n_threads}, {"dram_read_gbps", dram}, {"dram_read_fresh_gbps", dram_fresh},
                                {"dram_read_weights_gbps", dram_weights},
                                {"weight_bytes_per_token", wbytes}, {"prefill_tokens_per_s", pf.median},
                                {"decode_tokens_per_s", dc.median}, {"decode_tokens_per_s_min", dc.lo},
                                {"decode_tokens_per_s_max", dc.hi}, {"decode_stream_gbps", stream_gbps},
                                {"peak_rss_bytes", peak_rss_bytes()}};
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
        if (!tmp.empty()) std::filesystem::remove(tmp);
        return 0;
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_decode: error: {}\n", e.what());
        return int(e.code());
    }
}
