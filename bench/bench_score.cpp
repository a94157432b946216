// Host scorer throughput (DESIGN.md §3 step 2, §4 f_c): bytes of FP16 keys scored per second, for
// each key precision (fp16, int8, int4) and query precision (fp32, int8), and for the scoring copy
// (score/quant_copy.h: INT4, INT3 or INT2 keys with per-channel scales in DRAM, int8 query; keys
// "copy4", "copy3", "copy2"), beside this machine's DRAM read bandwidth.
//
//   bench_score [--n-tokens 131072] [--head-dim 128] [--n-head 32] [--n-head-kv 8] [--reps 5] [-t N]
//               [--granularity layer|kv_head] [--aggregate sum|max|softmax] [--rows] [--json FILE]
//
// One layer's keys, f16 [n_tokens, n_head_kv, head_dim] of random values (256 MiB by default: far
// beyond the caches), are scored against one decode query, --reps times per configuration and kernel
// mode this CPU runs (the first, warm-up repetition dropped). Prints GB/s of f16 keys (1e9 bytes),
// median with min and max, in total and per thread, as a share of the DRAM read bandwidth of the same
// threads, and million tokens per second. --rows scores through a shuffled row index list (how the
// hot pool hands out its slots) instead of in order. The copy rows count the f16 keys they stand for,
// so that their GB/s compares with the others (they read their own bytes_per_token_layer per token
// from DRAM: 27% of the f16 keys at 4 bits, 20% at 3 bits, 14% at 2 bits, at head_dim 128), and always
// score in order (--rows does not apply).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "bench_dram.h"
#include "bench_stats.h"
#include "compute/kernel_mode.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"
#include "score/host_scorer.h"
#include "score/quant_copy.h"

namespace {

using namespace hill;

using bench::stat3;
using bench::summarize;

struct result {
    kernel_mode mode;
    std::string key;  // score_precision name, or "copy4" / "copy3" / "copy2" (the scoring copy)
    query_precision query;
    stat3 gbps;  // f16 key bytes scored per second, all threads, in GB/s
};

const char * mode_name(kernel_mode m) {
    return m == kernel_mode::avx2 ? "avx2" : "scalar";
}

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"HillInfer host scorer throughput (GB/s of FP16 keys) against the DRAM read bandwidth"};
    int64_t n_tokens = 131072;
    int head_dim = 128, n_head = 32, n_head_kv = 8, reps = 5, n_threads = 0;
    std::string granularity = "layer", aggregate = "sum", json_path;
    bool use_rows = false;
    app.add_option("--n-tokens", n_tokens, "tokens scored (keys of one layer)")->capture_default_str();
    app.add_option("--head-dim", head_dim, "elements per head")->capture_default_str();
    app.add_option("--n-head", n_head, "query heads")->capture_default_str();
    app.add_option("--n-head-kv", n_head_kv, "KV heads (divides --n-head)")->capture_default_str();
    app.add_option("--reps", reps, "repetitions (median reported)")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "threads (default: physical cores)");
    app.add_option("--granularity", granularity, "selection granularity: layer or kv_head")->capture_default_str();
    app.add_option("--aggregate", aggregate, "head aggregate: sum, max or softmax")->capture_default_str();
    app.add_flag("--rows", use_rows, "score through a shuffled row index list");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        if (n_threads <= 0) n_threads = physical_core_count();
        if (n_tokens < 1 || n_tokens > INT32_MAX || head_dim < 1 || head_dim > score_max_head_dim || n_head < 1 ||
            n_head_kv < 1 || reps < 1) {
            fail_usage("--n-tokens (< 2^31), --head-dim (<= {}), --n-head, --n-head-kv and --reps must be >= 1",
                       score_max_head_dim);
        }
        if (n_head % n_head_kv != 0) fail_usage("--n-head {} is not a multiple of --n-head-kv {}", n_head, n_head_kv);
        score_params params;
        params.granularity = parse_select_granularity(granularity);
        params.aggregate = parse_score_aggregate(aggregate);
        const attention_shape s{n_head, n_head_kv, head_dim, 1.0f / std::sqrt(float(head_dim))};
        const std::vector<float> head_mass(size_t(n_head), 0.0f);  // softmax: the per-head normalizers b_h
        const int64_t row_stride = int64_t(n_head_kv) * head_dim;
        thread_pool pool(n_threads);

        // Keys uniform in [-1, 1) from a per-element hash (filled in parallel: a 256 MiB buffer), query
        // uniform in [-1, 1).
        std::vector<f16_bits> keys(size_t(n_tokens * row_stride));
        pool.parallel_for(int64_t(keys.size()), [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                const uint64_t h = (uint64_t(i) + 1) * 0x9e3779b97f4a7c15ull;
                keys[size_t(i)] = fp32_to_fp16(float((h >> 40) & 0xffff) / 32768.0f - 1.0f);
            }
        });
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<float> q(size_t(n_head) * size_t(head_dim));
        for (float & x : q) x = dist(rng);
        std::vector<int32_t> rows;
        if (use_rows) {
            rows.resize(size_t(n_tokens));
            std::iota(rows.begin(), rows.end(), 0);
            std::shuffle(rows.begin(), rows.end(), rng);
        }
        const kv_view view{ggml_type::f16, keys.data(), nullptr, n_tokens, row_stride};
        const double key_bytes = double(keys.size()) * sizeof(f16_bits);

        const double dram = bench::dram_read_gbps(pool, size_t(1) << 30, 5);

        // The scoring copies of the same keys at 4, 3 and 2 bits (where head_dim allows): the channel
        // scales from the first 4096 tokens (a prompt), the rest written in parallel (disjoint positions
        // of one sequence and layer), then written again, timed: the quantization's cost per token and
        // thread once the copy's pages exist (as a decode step or a re-write pays it).
        std::vector<quant_copy> copies;
        std::vector<double> write_us;  // per copy: µs per token and thread
        for (const int bits : {4, 3, 2}) {
            if (!quant_copy::supports(head_dim, bits)) continue;
            quant_copy & copy = copies.emplace_back(s, params, bits, 1, 1, n_tokens, n_threads);
            const int64_t n_prompt = std::min<int64_t>(n_tokens, 4096);
            copy.write(0, 0, 0, n_prompt, ggml_type::f16, keys.data(), row_stride);
            const auto write_rest = [&] {
                pool.parallel_for(n_tokens - n_prompt, [&](int64_t i0, int64_t i1) {
                    copy.write(0, 0, n_prompt + i0, i1 - i0, ggml_type::f16,
                               keys.data() + size_t((n_prompt + i0) * row_stride), row_stride);
                });
            };
            write_rest();
            const int64_t t0 = time_us();
            write_rest();
            write_us.push_back(n_tokens > n_prompt ? double(time_us() - t0) * n_threads / double(n_tokens - n_prompt)
                                                   : std::nan(""));
        }

        const struct {
            score_precision key;
            query_precision query;
        } configs[] = {{score_precision::fp16, query_precision::fp32},
                       {score_precision::int8, query_precision::fp32},
                       {score_precision::int8, query_precision::int8},
                       {score_precision::int4, query_precision::fp32},
                       {score_precision::int4, query_precision::int8}};
        std::vector<result> results;
        std::vector<float> scores;
        const kernel_mode saved = kernel_mode_get();
        for (kernel_mode m : {kernel_mode::scalar, kernel_mode::avx2}) {
            if (m == kernel_mode::avx2 && !cpu_has_avx2()) continue;
            kernel_mode_set(m);
            for (const auto & c : configs) {
                params.key = c.key;
                params.query = c.query;
                host_scorer scorer(s, params, n_threads);
                scores.resize(size_t(scorer.n_group() * n_tokens));
                scorer.prepare_query(q.data(), head_mass.data());
                std::vector<double> gbps;
                for (int r = 0; r < reps + 1; ++r) {
                    const int64_t t0 = time_us();
                    scorer.score(view, use_rows ? rows.data() : nullptr, scores.data(), n_tokens, pool);
                    if (r > 0) gbps.push_back(key_bytes / (double(time_us() - t0) * 1e3));
                }
                results.push_back({m, std::string(name(c.key)), c.query, summarize(gbps)});
            }
            for (quant_copy & copy : copies) {
                scores.resize(size_t(copy.n_group() * n_tokens));
                std::vector<double> gbps;
                for (int r = 0; r < reps + 1; ++r) {
                    const int64_t t0 = time_us();
                    copy.prepare_query(0, 0, q.data(), head_mass.data());
                    copy.score(n_tokens, scores.data(), n_tokens, pool);
                    if (r > 0) gbps.push_back(key_bytes / (double(time_us() - t0) * 1e3));
                }
                results.push_back({m, fmt::format("copy{}", copy.bits()), query_precision::int8, summarize(gbps)});
            }
        }
        kernel_mode_set(saved);

        fmt::print(
            "machine: {} thread(s) ({} physical cores), DRAM read {:.1f} GB/s with them over a fresh 1 GiB "
            "buffer (best of 5)\n",
            n_threads, physical_core_count(), dram);
        fmt::print(
            "scoring: {} tokens, {} heads / {} KV heads, head_dim {}, {:.0f} MiB of f16 keys{}, {} / {}, {} "
            "reps; {}\n",
            n_tokens, n_head, n_head_kv, head_dim, key_bytes / (1 << 20),
            use_rows ? " through a shuffled row list" : "", name(params.granularity), name(params.aggregate), reps,
            copies.empty()
                ? fmt::format("no scoring copy (head_dim {} is odd or above {})", head_dim, quant_copy::max_head_dim)
                : [&] {
                      std::string d = "the scoring copies (bytes per token; µs per token and thread to write):";
                      for (size_t i = 0; i < copies.size(); ++i) {
                          const quant_copy & c = copies[i];
                          d += fmt::format(" copy{} {:.0f} MiB ({}; {})", c.bits(), double(c.bytes()) / (1 << 20),
                                           quant_copy::bytes_per_token_layer(s, c.bits()),
                                           std::isnan(write_us[i]) ? std::string("not timed: --n-tokens <= 4096")
                                                                   : fmt::format("{:.2f}", write_us[i]));
                      }
                      return d;
                  }());
        fmt::print("{:6}  {:5}  {:5}  {:>7}  {:>15}  {:>13}  {:>6}  {:>8}\n", "mode", "keys", "query", "GB/s",
                   "(min .. max)", "GB/s / thread", "% DRAM", "Mtok/s");
        for (const result & r : results) {
            fmt::print("{:6}  {:5}  {:5}  {:7.2f}  ({:5.2f} .. {:5.2f})  {:13.2f}  {:5.0f}%  {:8.2f}\n",
                       mode_name(r.mode), r.key, name(r.query), r.gbps.median, r.gbps.lo, r.gbps.hi,
                       r.gbps.median / n_threads, 100.0 * r.gbps.median / dram,
                       r.gbps.median * 1e9 / key_bytes * double(n_tokens) / 1e6);
        }
        if (!json_path.empty()) {
            nlohmann::json j = {{"n_threads", n_threads},
                                {"n_tokens", n_tokens},
                                {"n_head", n_head},
                                {"n_head_kv", n_head_kv},
                                {"head_dim", head_dim},
                                {"granularity", name(params.granularity)},
                                {"aggregate", name(params.aggregate)},
                                {"rows", use_rows},
                                {"reps", reps},
                                {"key_bytes", key_bytes},
                                {"copy4_bytes_per_token", quant_copy::bytes_per_token_layer(s, 4)},
                                {"copy3_bytes_per_token", quant_copy::bytes_per_token_layer(s, 3)},
                                {"copy2_bytes_per_token", quant_copy::bytes_per_token_layer(s, 2)},
                                {"dram_read_gbps", dram},
                                {"copy_write_us_per_token", nlohmann::json::object()},
                                {"results", nlohmann::json::array()}};
            for (size_t i = 0; i < copies.size(); ++i) {
                j["copy_write_us_per_token"][fmt::format("copy{}", copies[i].bits())] = write_us[i];
            }
            for (const result & r : results) {
                j["results"].push_back({{"mode", mode_name(r.mode)},
                                        {"key", r.key},
                                        {"query", name(r.query)},
                                        {"gbps", r.gbps.median},
                                        {"gbps_min", r.gbps.lo},
                                        {"gbps_max", r.gbps.hi},
                                        {"gbps_per_thread", r.gbps.median / n_threads}});
            }
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
        return 0;
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_score: error: {}\n", e.what());
        return int(e.code());
    }
}
