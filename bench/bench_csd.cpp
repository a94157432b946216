// The storage device: decode-step latency of policy hillinfer with most of the KV cold, the emulator
// (near-data scoring) against the plain SSD (the host reads and scores every cold key), without a
// device profile and with the `smartssd` profile; and how closely the emulator holds a profile's caps.
//
//   bench_csd [--ctx 32768,131072] [--layers 2] [--heads 32] [--kv-heads 8] [--head-dim 128]
//             [--cold 0.75] [--alpha 0.2] [--steps 5] [-t N] [--kv-dir DIR] [--json FILE]
//
// A random model of the given attention shape (tiny FFN and vocabulary) runs real decode steps
// (sched/decode_step.h) over random KV (f16, normal) imported into its context: what is measured is the
// whole step of every layer — scoring, merging, selection, gathering and attention over the tiers,
// beside the model's matmuls (reported apart as "forward"), which are the same for both devices. Each
// step is one token per layer over the whole context. Reported per configuration: median and spread of
// the step latency, the bytes over the device link per step and per cold token scored, the bytes read
// inside the device, and the time per stage.
#include "bench_stats.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"
#include "engine/context.h"
#include "model/synthetic_model.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

namespace {

using namespace hill;

// A context of one sequence of n random tokens per layer, `cold` of them without a hot copy.
std::unique_ptr<context> make_context(const model & m, int64_t n, double cold, const std::string & dir,
                                      csd::storage_kind kind, const csd::device_profile & prof, double alpha,
                                      thread_pool & pool) {
    const hparams & hp = m.hp();
    context_params cp;
    cp.n_ctx = int32_t(n + 64);
    cp.kv_host_budget = uint64_t(double(n) * (1.0 - cold)) * hp.kv_bytes_per_token(ggml_type::f16);
    cp.kv_dir = dir;
    cp.policy.name = "hillinfer";
    cp.policy.alpha = alpha;
    cp.policy.score = score_params{score_precision::int8, query_precision::int8};
    cp.storage = csd::storage_params{.kind = kind, .profile = prof};
    auto ctx = std::make_unique<context>(m, cp, pool);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    const size_t rows = size_t(n) * size_t(hp.n_embd_kv());
    std::vector<std::vector<f16_bits>> k(size_t(hp.n_layer)), v(size_t(hp.n_layer));
    std::vector<const void *> kp, vp;
    for (int il = 0; il < hp.n_layer; ++il) {
        k[size_t(il)].resize(rows);
        v[size_t(il)].resize(rows);
        for (auto & x : k[size_t(il)]) x = fp32_to_fp16(nd(rng));
        for (auto & x : v[size_t(il)]) x = fp32_to_fp16(nd(rng));
        kp.push_back(k[size_t(il)].data());
        vp.push_back(v[size_t(il)].data());
    }
    ctx->import_kv(0, n, kp, vp);
    return ctx;
}

struct step_result {
    bench::stat3 step_ms;
    csd::device_counters per_step;  // counters divided by the steps
    double forward_ms = 0, score_ms = 0, drain_ms = 0, select_ms = 0, attend_ms = 0;  // per step
    double link_per_token = 0;
    double cold_share = 0;          // of the attended tokens
};

step_result run_steps(context & ctx, int n_steps) {
    std::mt19937 rng(7);
    std::vector<double> ms;
    std::vector<float> logits(size_t(ctx.model().hp().n_vocab));
    const int seq = 0;
    for (int step = 0; step < n_steps + 1; ++step) {  // the first step warms up
        const int32_t tok = int32_t(rng() % uint32_t(ctx.model().hp().n_vocab));
        const int64_t t0 = time_us();
        ctx.decode(std::span<const int>(&seq, 1), std::span<const int32_t>(&tok, 1), logits.data());
        if (step > 0) ms.push_back(double(time_us() - t0) / 1e3);
    }
    step_result r;
    r.step_ms = bench::summarize(ms);
    const csd::device_counters d = ctx.storage().counters();
    const auto per = [&](uint64_t x) { return x / uint64_t(n_steps + 1); };
    r.per_step = d;
    r.per_step.tokens_scored = per(d.tokens_scored);
    r.per_step.tokens_read = per(d.tokens_read);
    r.per_step.link_score_bytes = per(d.link_score_bytes);
    r.per_step.link_kv_bytes = per(d.link_kv_bytes);
    r.per_step.internal_read_bytes = per(d.internal_read_bytes);
    r.link_per_token = double(d.link_score_bytes) / double(std::max<uint64_t>(1, d.tokens_scored));
    const step_stats & st = ctx.decode_stats();
    const double steps_us = 1e3 * double(n_steps + 1);  // to ms per step
    r.forward_ms = double(st.t_forward_us) / steps_us;
    r.score_ms = double(st.t_score_host_us) / steps_us;
    r.drain_ms = double(st.t_score_device_us) / steps_us;
    r.select_ms = double(st.t_select_us) / steps_us;
    r.attend_ms = double(st.t_attend_us) / steps_us;
    uint64_t att = 0, cold = 0;
    for (const step_layer_stats & L : st.layers) {
        att += L.n_attended;
        cold += L.n_attended_open + L.n_attended_disk;
    }
    r.cold_share = att > 0 ? double(cold) / double(att) : 0.0;
    return r;
}

// Achieved rate of one cap: passes run with only that cap set, bytes of that kind over the wall time.
struct cap_result {
    std::string cap;
    double cap_gbps, achieved_gbps;
};

cap_result measure_cap(const context & ctx, const std::string & which, double cap_bps, thread_pool & pool) {
    csd::device_profile prof;
    prof.name = which;
    if (which == "internal_read") prof.internal_read_bps = cap_bps;
    if (which == "score") prof.score_bps = cap_bps;
    if (which == "link") prof.link_bps = cap_bps;
    const hparams & hp = ctx.model().hp();
    const attention_shape shape{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f};
    auto dev = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .profile = prof}, ctx.cold(),
                                ctx.layout(), shape, pool);
    host_scorer hs(shape, score_params{score_precision::int8, query_precision::int8}, pool.n_threads());
    std::vector<float> q(size_t(hp.n_head * hp.head_dim), 0.5f);
    hs.prepare_query(q.data());
    const cold_log_view log = ctx.logs()->log(0, 0);
    std::vector<int32_t> all(size_t(log.n_on_disk()));
    for (size_t t = 0; t < all.size(); ++t) all[t] = int32_t(t);
    const csd::device_pass pass{0, log.page_tokens, log.groups, all};
    const int64_t t0 = time_us();
    for (int rep = 0; rep < 3; ++rep) {
        if (which == "link") {  // the link carries KV back: read passes of every cold token
            dev->read_begin(pass);
            kv_batch b;
            while (dev->read_next(b)) {
            }
        } else {
            dev->score_begin(pass, hs);
            while (dev->score_next() != nullptr) {
            }
        }
    }
    const double secs = double(time_us() - t0) / 1e6;
    const csd::device_counters d = dev->counters();
    // Bytes of the capped kind: flash reads; keys the kernel consumed (the K pages read); link bytes.
    const double bytes = which == "link" ? double(d.link_kv_bytes + d.link_score_bytes) : double(d.internal_read_bytes);
    return {which, cap_bps / 1e9, bytes / secs / 1e9};
}

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"HillInfer storage device benchmark: emulator vs plain SSD"};
    std::vector<int64_t> ctxs = {32768, 131072};
    int n_layer = 2, n_head = 32, n_head_kv = 8, head_dim = 128, n_steps = 5, n_threads = 0;
    double cold = 0.75, alpha = 0.2;
    std::string kv_dir = (std::filesystem::temp_directory_path() / "hillinfer-bench-csd").string(), json_path;
    app.add_option("--ctx", ctxs, "context lengths (tokens)")->delimiter(',');
    app.add_option("--layers", n_layer, "layers");
    app.add_option("--heads", n_head, "query heads");
    app.add_option("--kv-heads", n_head_kv, "KV heads");
    app.add_option("--head-dim", head_dim, "head dimension");
    app.add_option("--cold", cold, "share of the tokens without a hot copy");
    app.add_option("--alpha", alpha, "retention ratio");
    app.add_option("--steps", n_steps, "measured decode steps per configuration");
    app.add_option("-t,--threads", n_threads, "host threads (default: physical cores)");
    app.add_option("--kv-dir", kv_dir, "cold pool directory (on the SSD to measure)");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        if (n_steps < 1) fail_usage("--steps must be at least 1, got {}", n_steps);
        if (n_layer < 1) fail_usage("--layers must be at least 1, got {}", n_layer);
        if (!(cold > 0.0 && cold < 1.0)) fail_usage("--cold must be in (0, 1), got {}", cold);
        if (!(alpha > 0.0 && alpha <= 1.0)) fail_usage("--alpha must be in (0, 1], got {}", alpha);
        for (const int64_t n : ctxs) {
            if (n < 1024 || n > (int64_t(1) << 30)) fail_usage("--ctx values must be in [1024, 2^30] tokens, got {}", n);
        }
        if (n_threads <= 0) n_threads = physical_core_count();
        thread_pool pool(n_threads);
        // The model: the attention shape asked for, a small FFN and vocabulary (its matmuls are the "forward" column).
        std::filesystem::create_directories(kv_dir);
        const std::string model_path = (std::filesystem::path(kv_dir) / "bench-csd-model.gguf").string();
        write_random_model(model_path, random_model_params{.n_vocab = 260, .n_embd = n_head * head_dim, .n_ff = 64,
                                                           .n_layer = n_layer, .n_head = n_head, .n_head_kv = n_head_kv,
                                                           .n_ctx = int32_t(ctxs.back() + 64), .type = ggml_type::f16});
        const auto m = model::load(model_path);
        fmt::print("bench_csd: {} layers, {} query / {} KV heads of {}, f16 KV ({} B of K per token and layer), {:.0f}% "
                   "cold, alpha {}, {} steps, {} host threads, kv-dir {}\n", n_layer, n_head, n_head_kv, head_dim,
                   2 * n_head_kv * head_dim, 100 * cold, alpha, n_steps, n_threads, kv_dir);
        nlohmann::json out = {{"layers", n_layer}, {"n_head", n_head}, {"n_head_kv", n_head_kv}, {"head_dim", head_dim},
                              {"cold", cold}, {"alpha", alpha}, {"threads", n_threads}, {"steps", nlohmann::json::array()}};
        const csd::device_profile profiles[2] = {csd::load_device_profile("none"), csd::load_device_profile("smartssd")};
        for (const int64_t n : ctxs) {
            fmt::print("\ncontext {} tokens\n", n);
            fmt::print("{:9} {:9} {:>22} {:>12} {:>14} {:>10} {:>12} {:>10} {:>44}\n", "storage", "profile",
                       "step ms (min-max)", "link/step", "link/token", "flash/step", "cold scored", "cold att.",
                       "forward / score / merge / select / attend ms");
            for (const csd::device_profile & prof : profiles) {
                for (const csd::storage_kind kind : {csd::storage_kind::plain, csd::storage_kind::emulator}) {
                    auto ctx = make_context(*m, n, cold, kv_dir, kind, prof, alpha, pool);
                    const step_result r = run_steps(*ctx, n_steps);
                    const csd::device_counters & d = r.per_step;
                    fmt::print("{:9} {:9} {:>8.1f} ({:.1f}-{:.1f}) {:>12} {:>12.2f} B {:>10} {:>12} {:>9.1f}% {:>9.1f} / {:.1f} / {:.1f} / {:.1f} / {:.1f}\n",
                               name(kind), prof.name, r.step_ms.median, r.step_ms.lo, r.step_ms.hi,
                               format_bytes(d.link_score_bytes + d.link_kv_bytes), r.link_per_token,
                               format_bytes(d.internal_read_bytes), d.tokens_scored, 100.0 * r.cold_share, r.forward_ms,
                               r.score_ms, r.drain_ms, r.select_ms, r.attend_ms);
                    out["steps"].push_back({{"ctx", n}, {"storage", std::string(name(kind))}, {"profile", prof.name},
                                            {"step_ms", r.step_ms.median}, {"step_ms_min", r.step_ms.lo},
                                            {"step_ms_max", r.step_ms.hi},
                                            {"link_bytes_per_step", d.link_score_bytes + d.link_kv_bytes},
                                            {"link_score_bytes_per_cold_token", r.link_per_token},
                                            {"internal_read_bytes_per_step", d.internal_read_bytes},
                                            {"cold_tokens_scored_per_step", d.tokens_scored},
                                            {"attended_cold_share", r.cold_share}, {"forward_ms", r.forward_ms},
                                            {"score_ms", r.score_ms}, {"merge_ms", r.drain_ms},
                                            {"select_ms", r.select_ms}, {"attend_ms", r.attend_ms}});
                    if (n == ctxs.front() && kind == csd::storage_kind::emulator && prof.name == "none") {
                        // The caps: each one alone, at a rate well under what this machine reaches uncapped.
                        fmt::print("\nprofile caps (emulator, one cap at a time, 3 passes over layer 0):\n");
                        out["caps"] = nlohmann::json::array();
                        const double uncapped_read = measure_cap(*ctx, "internal_read", 0.0, pool).achieved_gbps;
                        const double uncapped_link = measure_cap(*ctx, "link", 0.0, pool).achieved_gbps;
                        fmt::print("  uncapped: flash read {:.2f} GB/s (scoring passes), link {:.2f} GB/s (read passes)\n",
                                   uncapped_read, uncapped_link);
                        for (const auto & [which, cap] : {std::pair<std::string, double>{"internal_read", 0.4 * uncapped_read},
                                                          {"score", 0.4 * uncapped_read}, {"link", 0.4 * uncapped_link}}) {
                            const cap_result c = measure_cap(*ctx, which, cap * 1e9, pool);
                            fmt::print("  {:13} cap {:.3f} GB/s: achieved {:.3f} GB/s ({:+.1f}%)\n", c.cap, c.cap_gbps,
                                       c.achieved_gbps, 100.0 * (c.achieved_gbps / c.cap_gbps - 1.0));
                            out["caps"].push_back({{"cap", c.cap}, {"cap_gbps", c.cap_gbps}, {"achieved_gbps", c.achieved_gbps}});
                        }
                        fmt::print("\n");
                    }
                }
            }
        }
        std::filesystem::remove(model_path);
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    } catch (const error & e) {
        fmt::print(stderr, "bench_csd: {}\n", e.what());
        return int(e.code());
    }
    return 0;
}
