// Decode and prefill speed of a model, with the weight bytes streamed per second during decode
// beside this machine's DRAM read bandwidth (measured here), and llama.cpp's speed on the same file
// and threads side by side when its oracle is built (scripts/llamacpp.sh).
//
//   bench_decode [-m MODEL.gguf] [--type f16|q8_0|...] [-t N] [--n-prompt 128] [--n-gen 32]
//                [--reps 3] [--exact-matmul] [--llamacpp PATH | --no-llamacpp] [--json FILE]
// Without -m it writes a random model large enough to leave the caches (~0.5-1 GB) to a temp
// file. Reports the median and min/max over the repetitions. Decode runs after the prefill, so
// at a context of n_prompt tokens.
//
// llama.cpp: `llama_oracle bench` (tests/oracle/llama_oracle.cpp), found as --llamacpp, else in
// $HILL_LLAMACPP_DIR, else in ${XDG_CACHE_HOME:-~/.cache}/hillinfer/llamacpp. Its repetitions
// alternate with HillInfer's (one each, in turn), so that both see the same machine load, and the
// ratios are the medians of the per-pair ratios HillInfer / llama.cpp.
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
#include <cstdio>
#include <cstdlib>
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

// The llama_oracle to compare with: `flag` if given, else the one scripts/llamacpp.sh builds, if it
// is there; "" for none.
std::string find_llamacpp(const std::string & flag) {
    if (!flag.empty()) {
        if (!std::filesystem::exists(flag)) fail_usage("--llamacpp '{}': no such file", flag);
        return flag;
    }
    std::filesystem::path dir;
    if (const char * d = std::getenv("HILL_LLAMACPP_DIR"); d != nullptr && *d != '\0') {
        dir = d;
    } else if (const char * x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
        dir = std::filesystem::path(x) / "hillinfer/llamacpp";
    } else if (const char * h = std::getenv("HOME"); h != nullptr && *h != '\0') {
        dir = std::filesystem::path(h) / ".cache/hillinfer/llamacpp";
    }
    const auto exe = dir / "llama_oracle";
    return !dir.empty() && std::filesystem::exists(exe) ? exe.string() : std::string();
}

struct speed {
    double prefill_tps, decode_tps;
};

// One `llama_oracle bench` run.
speed run_llamacpp(const std::string & exe, const std::string & model, int n_prompt, int n_gen, int n_threads) {
    const std::string cmd = fmt::format("'{}' bench '{}' {} {} {}", exe, model, n_prompt, n_gen, n_threads);
    std::FILE * p = popen(cmd.c_str(), "r");
    if (p == nullptr) fail_input("cannot run '{}'", cmd);
    std::string out;
    char buf[256];
    while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
    const int rc = pclose(p);
    if (rc != 0) fail_input("'{}' failed (status {}): {}", cmd, rc, out);
    const auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_discarded() || !j.contains("prefill_tps") || !j.contains("decode_tps"))
        fail_input("'{}' printed '{}', expected prefill_tps and decode_tps", cmd, out);
    return {j["prefill_tps"].get<double>(), j["decode_tps"].get<double>()};
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
    bool exact = false, no_llamacpp = false;
    std::string llamacpp_flag;
    app.add_flag("--exact-matmul", exact, "f32 activations for quantized weights (the reference; default int8)");
    app.add_option("--llamacpp", llamacpp_flag, "llama_oracle to compare with (default: scripts/llamacpp.sh's)");
    app.add_flag("--no-llamacpp", no_llamacpp, "do not run llama.cpp");
    CLI11_PARSE(app, argc, argv);
    try {
        blas_init_single_threaded();
        if (n_threads <= 0) n_threads = physical_core_count();
        if (n_prompt < 1 || n_gen < 1 || reps < 1) fail_usage("--n-prompt, --n-gen and --reps must be >= 1");
        thread_pool pool(n_threads);
        if (exact) matmul_mode_set(matmul_mode::exact);
        const std::string llamacpp = no_llamacpp ? std::string() : find_llamacpp(llamacpp_flag);

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
        std::vector<double> prefill_tps, decode_tps, ll_prefill_tps, ll_decode_tps, prefill_ratio, decode_ratio;
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
            if (!llamacpp.empty()) {
                const speed ll = run_llamacpp(llamacpp, model_path, n_prompt, n_gen, n_threads);
                if (r > 0) {
                    ll_prefill_tps.push_back(ll.prefill_tps);
                    ll_decode_tps.push_back(ll.decode_tps);
                    prefill_ratio.push_back(tp / ll.prefill_tps);
                    decode_ratio.push_back(td / ll.decode_tps);
                }
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
        fmt::print("weight products: {}\n", exact ? "exact (f32 activations)" : "int8 activations where the weight type has them");
        nlohmann::json jl;
        if (llamacpp.empty()) {
            fmt::print("llama.cpp: not compared ({})\n", no_llamacpp ? "--no-llamacpp" : "no llama_oracle: scripts/llamacpp.sh builds it");
        } else {
            const stat3 lp = summarize(ll_prefill_tps), ld = summarize(ll_decode_tps);
            const stat3 rp = summarize(prefill_ratio), rd = summarize(decode_ratio);
            fmt::print("\n{:<10} {:>12} {:>12} {:>22}\n", "", "HillInfer", "llama.cpp", "ratio (median of pairs)");
            fmt::print("{:<10} {:>12.1f} {:>12.1f} {:>10.2f} [{:.2f}, {:.2f}]\n", "prefill", pf.median, lp.median, rp.median,
                       rp.lo, rp.hi);
            fmt::print("{:<10} {:>12.2f} {:>12.2f} {:>10.2f} [{:.2f}, {:.2f}]\n", "decode", dc.median, ld.median, rd.median,
                       rd.lo, rd.hi);
            fmt::print("(tokens/s; llama.cpp: {} bench, runs alternating with HillInfer's)\n", llamacpp);
            jl = {{"prefill_tokens_per_s", lp.median}, {"decode_tokens_per_s", ld.median},
                  {"prefill_ratio", rp.median}, {"decode_ratio", rd.median}};
        }
        if (!json_path.empty()) {
            nlohmann::json j = {{"model", model_path}, {"n_threads", n_threads}, {"dram_read_gbps", dram}, {"dram_read_fresh_gbps", dram_fresh},
                                {"dram_read_weights_gbps", dram_weights},
                                {"weight_bytes_per_token", wbytes}, {"prefill_tokens_per_s", pf.median},
                                {"decode_tokens_per_s", dc.median}, {"decode_tokens_per_s_min", dc.lo},
                                {"decode_tokens_per_s_max", dc.hi}, {"decode_stream_gbps", stream_gbps},
                                {"peak_rss_bytes", peak_rss_bytes()}, {"exact_matmul", exact}};
            if (!jl.is_null()) j["llamacpp"] = jl;
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
        if (!tmp.empty()) std::filesystem::remove(tmp);
        return 0;
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_decode: error: {}\n", e.what());
        return int(e.code());
    }
}
