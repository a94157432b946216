// The storage device: decode-step latency of policy hillinfer with most of the KV cold, the emulator
// (near-data scoring) against the plain SSD (the host reads and scores every cold key), without a
// device profile and with the `smartssd` profile; and how closely the emulator holds a profile's caps.
//
//   bench_csd [--ctx 32768,131072] [--layers 2] [--heads 32] [--kv-heads 8] [--head-dim 128]
//             [--cold 0.75] [--alpha 0.2] [--steps 5] [-t N] [--kv-dir DIR] [--json FILE]
//
// The KV is random (f16, normal): what is measured is the attention step of every layer — scoring,
// merging, selection, gathering and attention over the tiers — not the model's matmuls, which are the
// same for both devices. Each step is one query per layer over the whole context. Reported per
// configuration: median and spread of the step latency, the bytes over the device link per step and
// per cold token scored, the bytes read inside the device, and the time per stage.
#include "bench_stats.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"
#include "csd/device.h"
#include "kv/device_tier.h"
#include "policy/attention_policy.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

namespace {

using namespace hill;

struct store_case {
    attention_shape shape;
    kv_layout layout;
    int64_t n = 0;
    std::unique_ptr<kv_store> kv;
};

// n random tokens per layer with `cold` of them in the cold pool.
store_case make_store(int64_t n, int n_layer, const attention_shape & s, double cold, const std::string & dir) {
    store_case c{s, kv_layout{n_layer, int64_t(s.n_head_kv) * s.head_dim, ggml_type::f16}, n, nullptr};
    const auto hot = uint64_t(double(n) * (1.0 - cold));
    c.kv = std::make_unique<kv_store>(c.layout, kv_store_params{int32_t(n), hot * uint64_t(n_layer) * c.layout.token_layer_bytes(),
                                                                4, dir});
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    const int64_t chunk = 4096;
    std::vector<f16_bits> k(size_t(chunk * c.layout.n_embd_kv)), v(k.size());
    for (int il = 0; il < n_layer; ++il) {
        for (int64_t t = 0; t < n; t += chunk) {
            for (auto & x : k) x = fp32_to_fp16(nd(rng));
            for (auto & x : v) x = fp32_to_fp16(nd(rng));
            c.kv->append(il, std::min(chunk, n - t), k.data(), v.data());
        }
    }
    return c;
}

struct step_result {
    bench::stat3 step_ms;
    csd::device_counters per_step;  // counters divided by the steps
    double score_ms = 0, drain_ms = 0, select_ms = 0, attend_ms = 0;  // per step
    double link_per_token = 0;
};

step_result run_steps(store_case & c, csd::storage_kind kind, const csd::device_profile & prof, double alpha,
                      int n_steps, thread_pool & pool) {
    csd::storage_params sp{.kind = kind, .profile = prof};
    auto dev = csd::make_device(sp, *c.kv, c.shape, pool);
    policy_params pp{.kind = policy_kind::hillinfer, .alpha = alpha};
    pp.score = score_params{score_precision::int8, query_precision::int8};
    auto pol = make_policy(pp, c.shape, c.layout.n_layer, c.n, pool);
    auto tier = make_cpu_device_tier(pool, 1, int64_t(c.shape.n_head) * c.shape.head_dim, c.shape.n_head);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> q(size_t(c.shape.n_head * c.shape.head_dim)), out(q.size());
    std::vector<double> ms;
    for (int step = 0; step < n_steps + 1; ++step) {  // the first step warms up
        for (float & x : q) x = nd(rng);
        const int64_t t0 = time_us();
        for (int il = 0; il < c.layout.n_layer; ++il) pol->attend(il, q.data(), *c.kv, *dev, *tier, out.data());
        if (step > 0) ms.push_back(double(time_us() - t0) / 1e3);
    }
    step_result r;
    r.step_ms = bench::summarize(ms);
    const csd::device_counters d = dev->counters();
    const auto per = [&](uint64_t x) { return x / uint64_t(n_steps + 1); };
    r.per_step = d;
    r.per_step.tokens_scored = per(d.tokens_scored);
    r.per_step.tokens_read = per(d.tokens_read);
    r.per_step.link_score_bytes = per(d.link_score_bytes);
    r.per_step.link_kv_bytes = per(d.link_kv_bytes);
    r.per_step.internal_read_bytes = per(d.internal_read_bytes);
    r.link_per_token = double(d.link_score_bytes) / double(std::max<uint64_t>(1, d.tokens_scored));
    const policy_stats & st = pol->stats();
    const double steps_us = 1e3 * double(n_steps + 1);  // to ms per step
    r.score_ms = double(st.t_score_us) / steps_us;
    r.drain_ms = double(st.t_drain_us) / steps_us;
    r.select_ms = double(st.t_select_us) / steps_us;
    r.attend_ms = double(st.t_attend_us) / steps_us;
    return r;
}

// Achieved rate of one cap: passes run with only that cap set, bytes of that kind over the wall time.
struct cap_result {
    std::string cap;
    double cap_gbps, achieved_gbps;
};

cap_result measure_cap(store_case & c, const std::string & which, double cap_bps, thread_pool & pool) {
    csd::device_profile prof;
    prof.name = which;
    if (which == "internal_read") prof.internal_read_bps = cap_bps;
    if (which == "score") prof.score_bps = cap_bps;
    if (which == "link") prof.link_bps = cap_bps;
    auto dev = csd::make_device(csd::storage_params{.kind = csd::storage_kind::emulator, .profile = prof}, *c.kv, c.shape, pool);
    host_scorer hs(c.shape, score_params{score_precision::int8, query_precision::int8}, pool.n_threads());
    std::vector<float> q(size_t(c.shape.n_head * c.shape.head_dim), 0.5f);
    hs.prepare_query(q.data());
    std::vector<int32_t> all;
    for (int64_t t = 0; t < c.n; ++t) {
        if (c.kv->on_disk(0, t)) all.push_back(int32_t(t));
    }
    const int64_t t0 = time_us();
    for (int rep = 0; rep < 3; ++rep) {
        if (which == "link") {  // the link carries KV back: read passes of every cold token
            dev->read_begin(0, all);
            dev->read_drain([](const kv_view &, const int32_t *, const int32_t *) {});
        } else {
            dev->score_begin(0, hs);
            dev->score_drain([](const csd::score_block_view &) {});
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
    app.add_option("--cold", cold, "share of the tokens in the cold pool");
    app.add_option("--alpha", alpha, "retention ratio");
    app.add_option("--steps", n_steps, "measured decode steps per configuration");
    app.add_option("-t,--threads", n_threads, "host threads (default: physical cores)");
    app.add_option("--kv-dir", kv_dir, "cold pool directory (on the SSD to measure)");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        if (n_steps < 1) fail_usage("--steps must be at least 1, got {}", n_steps);
        if (n_layer < 1) fail_usage("--layers must be at least 1, got {}", n_layer);
        if (!(cold >= 0.0 && cold < 1.0)) fail_usage("--cold must be in [0, 1), got {}", cold);
        if (!(alpha > 0.0 && alpha <= 1.0)) fail_usage("--alpha must be in (0, 1], got {}", alpha);
        for (const int64_t n : ctxs) {
            if (n < 1024 || n > (int64_t(1) << 30)) fail_usage("--ctx values must be in [1024, 2^30] tokens, got {}", n);
        }
        if (n_threads <= 0) n_threads = physical_core_count();
        thread_pool pool(n_threads);
        const attention_shape shape{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float(head_dim))};
        fmt::print("bench_csd: {} layers, {} query / {} KV heads of {}, f16 KV ({} B of K per token and layer), {:.0f}% "
                   "cold, alpha {}, {} steps, {} host threads, kv-dir {}\n", n_layer, n_head, n_head_kv, head_dim,
                   2 * n_head_kv * head_dim, 100 * cold, alpha, n_steps, n_threads, kv_dir);
        nlohmann::json out = {{"layers", n_layer}, {"n_head", n_head}, {"n_head_kv", n_head_kv}, {"head_dim", head_dim},
                              {"cold", cold}, {"alpha", alpha}, {"threads", n_threads}, {"steps", nlohmann::json::array()}};
        const csd::device_profile profiles[2] = {csd::load_device_profile("none"), csd::load_device_profile("smartssd")};
        for (const int64_t n : ctxs) {
            const int64_t t0 = time_us();
            store_case c = make_store(n, n_layer, shape, cold, kv_dir);
            fmt::print("\ncontext {} tokens: KV written in {:.1f} s\n", n, double(time_us() - t0) / 1e6);
            fmt::print("{:9} {:9} {:>22} {:>12} {:>14} {:>10} {:>12} {:>36}\n", "storage", "profile", "step ms (min-max)",
                       "link/step", "link/token", "flash/step", "cold scored", "score / merge / select / attend ms");
            for (const csd::device_profile & prof : profiles) {
                for (const csd::storage_kind kind : {csd::storage_kind::plain, csd::storage_kind::emulator}) {
                    const step_result r = run_steps(c, kind, prof, alpha, n_steps, pool);
                    const csd::device_counters & d = r.per_step;
                    fmt::print("{:9} {:9} {:>8.1f} ({:.1f}-{:.1f}) {:>12} {:>12.2f} B {:>10} {:>12} {:>9.1f} / {:.1f} / {:.1f} / {:.1f}\n",
                               name(kind), prof.name, r.step_ms.median, r.step_ms.lo, r.step_ms.hi,
                               format_bytes(d.link_score_bytes + d.link_kv_bytes), r.link_per_token,
                               format_bytes(d.internal_read_bytes), d.tokens_scored, r.score_ms, r.drain_ms, r.select_ms,
                               r.attend_ms);
                    out["steps"].push_back({{"ctx", n}, {"storage", std::string(name(kind))}, {"profile", prof.name},
                                            {"step_ms", r.step_ms.median}, {"step_ms_min", r.step_ms.lo},
                                            {"step_ms_max", r.step_ms.hi},
                                            {"link_bytes_per_step", d.link_score_bytes + d.link_kv_bytes},
                                            {"link_score_bytes_per_cold_token", r.link_per_token},
                                            {"internal_read_bytes_per_step", d.internal_read_bytes},
                                            {"cold_tokens_scored_per_step", d.tokens_scored},
                                            {"score_ms", r.score_ms}, {"merge_ms", r.drain_ms},
                                            {"select_ms", r.select_ms}, {"attend_ms", r.attend_ms}});
                }
            }
            if (n == ctxs.front()) {
                // The caps: each one alone, at a rate well under what this machine reaches uncapped.
                fmt::print("\nprofile caps (emulator, one cap at a time, 3 passes over layer 0):\n");
                out["caps"] = nlohmann::json::array();
                const double uncapped_read = measure_cap(c, "internal_read", 0.0, pool).achieved_gbps;
                const double uncapped_link = measure_cap(c, "link", 0.0, pool).achieved_gbps;
                fmt::print("  uncapped: flash read {:.2f} GB/s (scoring passes), link {:.2f} GB/s (read passes)\n",
                           uncapped_read, uncapped_link);
                for (const auto & [which, cap] : {std::pair<std::string, double>{"internal_read", 0.4 * uncapped_read},
                                                  {"score", 0.4 * uncapped_read}, {"link", 0.4 * uncapped_link}}) {
                    const cap_result r = measure_cap(c, which, cap * 1e9, pool);
                    fmt::print("  {:13} cap {:.3f} GB/s: achieved {:.3f} GB/s ({:+.1f}%)\n", r.cap, r.cap_gbps,
                               r.achieved_gbps, 100.0 * (r.achieved_gbps / r.cap_gbps - 1.0));
                    out["caps"].push_back({{"cap", r.cap}, {"cap_gbps", r.cap_gbps}, {"achieved_gbps", r.achieved_gbps}});
                }
            }
        }
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    } catch (const error & e) {
        fmt::print(stderr, "bench_csd: {}\n", e.what());
        return int(e.code());
    }
    return 0;
}
