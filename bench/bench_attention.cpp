// Speed of attention_decode_accumulate (the AVX2 kernel, a KV head's query heads together, and the
// scalar reference): one decode query of n_head heads against n_kv random keys, on the threads of
// the pool.
//
//   bench_attention [--head-dim 8] [--n-kv 32768] [--n-head 8] [--n-head-kv N] [--type f16|f32] [--rows] [-t 1]
//                   [--kernel all|avx2|scalar] [--reps 9] [--json FILE]
//
// Prints nanoseconds per key per query head and the K/V bytes read per second (the KV once: each KV
// head's K and V rows are read once for all its query heads, n_head_kv · n_kv · head_dim · 2
// elements), median with min and max over --reps, for each kernel mode this CPU runs (--kernel: one
// of them), beside the DRAM read bandwidth of the same threads. --rows feeds the keys through a
// shuffled row index list (the tiered store's gathers) instead of in order. Prefill runs the same
// kernel per (query token, KV head), so its cost is about this one's times n_tok.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "bench_dram.h"
#include "bench_stats.h"
#include "compute/attention.h"
#include "compute/kernel_mode.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"

namespace {

using namespace hill;

using bench::stat3;
using bench::summarize;

// The CPU's name from /proc/cpuinfo ("unknown" elsewhere).
std::string cpu_name() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
        if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
    }
    return "unknown";
}

struct result {
    kernel_mode mode;
    stat3 ns_per_key_head;
    stat3 gbps;
};

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"HillInfer attention kernel benchmark (one decode query, scalar and AVX2)"};
    int head_dim = 8, n_head = 8, n_head_kv = 0, n_threads = 1, reps = 9;
    int64_t n_kv = 32768;
    std::string type_name = "f16", json_path, kernel_name = "all";
    bool use_rows = false;
    app.add_option("--head-dim", head_dim, "elements per head")->capture_default_str();
    app.add_option("--n-kv", n_kv, "keys attended to")->capture_default_str();
    app.add_option("--n-head", n_head, "query heads")->capture_default_str();
    app.add_option("--n-head-kv", n_head_kv, "KV heads, dividing --n-head (default: --n-head)");
    app.add_option("--type", type_name, "K/V type: f16 or f32")->capture_default_str();
    app.add_flag("--rows", use_rows, "read the keys through a shuffled row index list");
    app.add_option("-t,--threads", n_threads, "threads")->capture_default_str();
    app.add_option("--kernel", kernel_name, "kernel modes to run: all, avx2 or scalar")->capture_default_str();
    app.add_option("--reps", reps, "repetitions (median reported)")->capture_default_str();
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        if (head_dim < 1 || n_head < 1 || n_kv < 1 || n_threads < 1 || reps < 1) {
            fail_usage("--head-dim, --n-head, --n-kv, --threads and --reps must be >= 1");
        }
        if (n_head_kv == 0) n_head_kv = n_head;
        if (n_head_kv < 1 || n_head % n_head_kv != 0) {
            fail_usage("--n-head-kv must divide --n-head ({}), got {}", n_head, n_head_kv);
        }
        if (type_name != "f16" && type_name != "f32") fail_usage("--type must be f16 or f32, not '{}'", type_name);
        if (kernel_name != "all" && kernel_name != "avx2" && kernel_name != "scalar") {
            fail_usage("--kernel must be all, avx2 or scalar, not '{}'", kernel_name);
        }
        const ggml_type type = type_name == "f16" ? ggml_type::f16 : ggml_type::f32;
        const size_t eb = type == ggml_type::f16 ? 2 : 4;
        const attention_shape s{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float(head_dim))};
        const int64_t row_stride = int64_t(n_head_kv) * head_dim;

        // Random K, V and q in [-1, 1) (q scaled up so that the softmax is not flat).
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        const size_t n_elem = size_t(n_kv * row_stride);
        std::vector<float> kf(n_elem), vf(n_elem), q(size_t(n_head) * size_t(head_dim));
        for (float & x : kf) x = dist(rng);
        for (float & x : vf) x = dist(rng);
        for (float & x : q) x = 3.0f * dist(rng);
        std::vector<uint16_t> kh, vh;
        if (type == ggml_type::f16) {
            kh.resize(n_elem);
            vh.resize(n_elem);
            for (size_t i = 0; i < n_elem; ++i) {
                kh[i] = fp32_to_fp16(kf[i]);
                vh[i] = fp32_to_fp16(vf[i]);
            }
        }
        const kv_view kv{type, type == ggml_type::f16 ? static_cast<const void *>(kh.data()) : kf.data(),
                         type == ggml_type::f16 ? static_cast<const void *>(vh.data()) : vf.data(), n_kv, row_stride};
        std::vector<int32_t> rows;
        if (use_rows) {
            rows.resize(size_t(n_kv));
            std::iota(rows.begin(), rows.end(), 0);
            std::shuffle(rows.begin(), rows.end(), rng);
        }

        thread_pool pool(n_threads);
        std::vector<float> acc(q.size());
        std::vector<softmax_state> st(static_cast<size_t>(n_head));
        const double kv_bytes = double(n_head_kv) * double(n_kv) * head_dim * 2.0 * double(eb);
        std::vector<result> results;
        const kernel_mode saved = kernel_mode_get();
        for (kernel_mode m : {kernel_mode::scalar, kernel_mode::avx2}) {
            if (m == kernel_mode::avx2 && !cpu_has_avx2()) continue;
            if (kernel_name != "all" && kernel_name != (m == kernel_mode::avx2 ? "avx2" : "scalar")) continue;
            kernel_mode_set(m);
            std::vector<double> ns, gbps;
            for (int r = 0; r < reps + 1; ++r) {  // the first repetition warms the caches and is dropped
                std::fill(acc.begin(), acc.end(), 0.0f);
                std::fill(st.begin(), st.end(), softmax_state{});
                const auto t0 = std::chrono::steady_clock::now();
                attention_decode_accumulate(s, q.data(), kv, use_rows ? rows.data() : nullptr, acc.data(), st.data(),
                                            pool);
                const double dt_ns =
                    std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
                if (r > 0) {
                    ns.push_back(dt_ns / (double(n_kv) * n_head));
                    gbps.push_back(kv_bytes / dt_ns);
                }
            }
            results.push_back({m, summarize(ns), summarize(gbps)});
        }
        kernel_mode_set(saved);
        const double dram_gbps = bench::dram_read_gbps(pool, size_t(1) << 30, 3);

        fmt::print(
            "machine: {}, {} thread(s) ({} physical cores), DRAM read {:.1f} GB/s (fresh 1 GiB buffer, best of "
            "3)\n",
            cpu_name(), n_threads, physical_core_count(), dram_gbps);
        fmt::print("attention: {} query / {} KV heads, head_dim {}, n_kv {}, {} K/V{} ({} MiB of K/V), {} reps\n", n_head,
                   n_head_kv, head_dim, n_kv, type_name, use_rows ? " through a shuffled row list" : "", kv_bytes / (1 << 20), reps);
        for (const result & r : results) {
            fmt::print(
                "{:6}: {:7.3f} ns per key per head (min {:.3f}, max {:.3f}), K/V read {:6.2f} GB/s (min {:.2f}, "
                "max {:.2f})\n",
                r.mode == kernel_mode::avx2 ? "avx2" : "scalar", r.ns_per_key_head.median, r.ns_per_key_head.lo,
                r.ns_per_key_head.hi, r.gbps.median, r.gbps.lo, r.gbps.hi);
        }
        if (!json_path.empty()) {
            nlohmann::json j = {{"cpu", cpu_name()},
                                {"n_threads", n_threads},
                                {"n_head", n_head},
                                {"n_head_kv", n_head_kv},
                                {"head_dim", head_dim},
                                {"n_kv", n_kv},
                                {"type", type_name},
                                {"rows", use_rows},
                                {"reps", reps},
                                {"dram_read_gbps", dram_gbps},
                                {"results", nlohmann::json::array()}};
            for (const result & r : results) {
                j["results"].push_back({{"mode", r.mode == kernel_mode::avx2 ? "avx2" : "scalar"},
                                        {"ns_per_key_head", r.ns_per_key_head.median},
                                        {"ns_per_key_head_min", r.ns_per_key_head.lo},
                                        {"ns_per_key_head_max", r.ns_per_key_head.hi},
                                        {"kv_read_gbps", r.gbps.median},
                                        {"kv_read_gbps_min", r.gbps.lo},
                                        {"kv_read_gbps_max", r.gbps.hi}});
            }
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
        return 0;
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_attention: error: {}\n", e.what());
        return int(e.code());
    }
}
