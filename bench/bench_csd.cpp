// The storage device emulator's device profiles: how closely the emulator holds each cap (flash read,
// scoring, link) of a profile, each cap alone at 40% of the rate this machine reaches uncapped, over
// the cold pool of a random context. The decode-step time of the emulator against the plain SSD is
// `hillinfer bench step` (experiments/step_bench.h).
//
//   bench_csd [--ctx 32768] [--heads 32] [--kv-heads 8] [--head-dim 128] [--cold 0.75] [-t N] [--kv-dir DIR]
//             [--json FILE]
#include "core/error.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"
#include "engine/context.h"
#include "experiments/calibrate.h"
#include "model/synthetic_model.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace {

using namespace hill;

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
    const csd::device_pass pass{0, 0, log.page_tokens, log.groups, all};
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
    CLI::App app{"HillInfer storage device emulator: how closely it holds a device profile's caps"};
    int64_t n_ctx = 32768;
    int n_head = 32, n_head_kv = 8, head_dim = 128, n_threads = 0;
    double cold = 0.75;
    std::string kv_dir = (std::filesystem::temp_directory_path() / "hillinfer-bench-csd").string(), json_path;
    app.add_option("--ctx", n_ctx, "context length (tokens)");
    app.add_option("--heads", n_head, "query heads");
    app.add_option("--kv-heads", n_head_kv, "KV heads");
    app.add_option("--head-dim", head_dim, "head dimension");
    app.add_option("--cold", cold, "share of the tokens without a hot copy");
    app.add_option("-t,--threads", n_threads, "host threads (default: physical cores)");
    app.add_option("--kv-dir", kv_dir, "cold pool directory (on the SSD to measure)");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        if (!(cold > 0.0 && cold < 1.0)) fail_usage("--cold must be in (0, 1), got {}", cold);
        if (n_ctx < 1024 || n_ctx > (int64_t(1) << 30)) fail_usage("--ctx must be in [1024, 2^30] tokens, got {}", n_ctx);
        if (n_threads <= 0) n_threads = physical_core_count();
        thread_pool pool(n_threads);
        // The model: the attention shape asked for (one layer), a small FFN and vocabulary.
        std::filesystem::create_directories(kv_dir);
        const std::string model_path = (std::filesystem::path(kv_dir) / "bench-csd-model.gguf").string();
        write_random_model(model_path, random_model_params{.n_vocab = 260, .n_embd = n_head * head_dim, .n_ff = 64,
                                                           .n_layer = 1, .n_head = n_head, .n_head_kv = n_head_kv,
                                                           .n_ctx = int32_t(n_ctx + 64), .type = ggml_type::q4_0});
        const auto m = model::load(model_path);
        fmt::print("bench_csd: {} query / {} KV heads of {}, f16 KV, context {} tokens, {:.0f}% cold, {} host threads, "
                   "kv-dir {}\n", n_head, n_head_kv, head_dim, n_ctx, 100 * cold, n_threads, kv_dir);
        auto ctx = make_random_context(*m, n_ctx, cold, kv_dir, csd::storage_kind::emulator,
                                       csd::load_device_profile("none"), 0.2, pool);
        nlohmann::json out = {{"ctx", n_ctx}, {"n_head", n_head}, {"n_head_kv", n_head_kv}, {"head_dim", head_dim},
                              {"cold", cold}, {"threads", n_threads}, {"caps", nlohmann::json::array()}};
        // The caps: each one alone, at a rate well under what this machine reaches uncapped.
        fmt::print("profile caps (emulator, one cap at a time, 3 passes over the cold pages):\n");
        const double uncapped_read = measure_cap(*ctx, "internal_read", 0.0, pool).achieved_gbps;
        const double uncapped_link = measure_cap(*ctx, "link", 0.0, pool).achieved_gbps;
        fmt::print("  uncapped: flash read {:.2f} GB/s (scoring passes), link {:.2f} GB/s (read passes)\n", uncapped_read,
                   uncapped_link);
        for (const auto & [which, cap] : {std::pair<std::string, double>{"internal_read", 0.4 * uncapped_read},
                                          {"score", 0.4 * uncapped_read}, {"link", 0.4 * uncapped_link}}) {
            const cap_result c = measure_cap(*ctx, which, cap * 1e9, pool);
            fmt::print("  {:13} cap {:.3f} GB/s: achieved {:.3f} GB/s ({:+.1f}%)\n", c.cap, c.cap_gbps, c.achieved_gbps,
                       100.0 * (c.achieved_gbps / c.cap_gbps - 1.0));
            out["caps"].push_back({{"cap", c.cap}, {"cap_gbps", c.cap_gbps}, {"achieved_gbps", c.achieved_gbps}});
        }
        ctx.reset();
        std::filesystem::remove(model_path);
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    } catch (const error & e) {
        fmt::print(stderr, "bench_csd: {}\n", e.what());
        return int(e.code());
    }
    return 0;
}
