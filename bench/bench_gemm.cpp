// Batched decode products: the cost of multiplying every weight matrix of a layer stack by n
// activation rows at once (one decode step of a batch of n sequences), against n = 1.
//
//   bench_gemm [--types f16,q8_0,q4_0] [--n 1,2,4,8,16,25] [--n-embd 1024] [--n-ff 4096]
//              [--n-layer 24] [--n-head 16] [--n-head-kv 4] [--reps 5] [-t N] [--blas] [--scalar]
//              [--exact-matmul] [--json FILE]
//
// The stack: n_layer llama layers of random weights (wq, wo [n_embd, n_embd]; wk, wv [n_embd_kv,
// n_embd]; ffn_gate, ffn_up [n_ff, n_embd]; ffn_down [n_embd, n_ff]); the defaults are a ~0.4 B
// parameter stack (0.73 GB as F16), far beyond the caches. One pass = gemm() of every matrix, in
// layer order, with n rows of activations. Per type and n: the median pass time over --reps passes
// after a warm-up pass (min and max beside it), activation rows per second through the whole stack
// (n / pass time), GB/s of weights (weight bytes / pass time) and the ratios to n = 1: the time of
// a pass, and the aggregate throughput gain n · t(1) / t(n). The n values take turns pass after
// pass, so that the load of a shared machine falls on all alike; beside the wall clock, the
// process's CPU time per pass divided by the threads (what a pass costs the cores, whatever else
// runs) and its ratio to n = 1. --blas times the OpenBLAS path (gemm_blas) instead, for the
// threshold between the two.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "bench_dram.h"
#include "bench_stats.h"
#include "compute/kernel_mode.h"
#include "compute/matmul.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/ggml_type.h"
#include "core/sys_info.h"
#include "core/thread_pool.h"

namespace {

using namespace hill;

using bench::stat3;
using bench::summarize;

struct free_deleter {
    void operator()(void * p) const { std::free(p); }
};

// One weight matrix of random valid content, 64-byte aligned.
struct matrix {
    std::unique_ptr<uint8_t, free_deleter> bytes;
    weight_view view;
};

uint64_t hash64(uint64_t i) {
    uint64_t h = (i + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

// Random weights encoded directly (no quantization pass): f16/bf16/f32 values uniform in [-1, 1),
// Q8_0/Q4_0 blocks of random quants with a scale d in [2^-9, 2^-8), the other written types
// (quantize_supported) uniform values through their encoder. Filled by the pool's threads.
matrix make_matrix(ggml_type type, int64_t n_rows, int64_t n_cols, uint64_t seed, thread_pool & pool) {
    const size_t rb = *ggml_row_bytes(type, n_cols);
    const size_t bytes = (rb * size_t(n_rows) + 63) / 64 * 64;
    matrix m{std::unique_ptr<uint8_t, free_deleter>(static_cast<uint8_t *>(std::aligned_alloc(64, bytes))), {}};
    m.view = weight_view{type, n_rows, n_cols, m.bytes.get()};
    uint8_t * base = m.bytes.get();
    pool.parallel_for(n_rows, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            uint8_t * row = base + size_t(r) * rb;
            const uint64_t s = seed * 0x100000001b3ull + uint64_t(r) * uint64_t(n_cols);
            auto uniform = [&](int64_t j) { return float(hash64(s + uint64_t(j)) >> 40) / float(1 << 23) - 1.0f; };
            switch (type) {
                case ggml_type::f32:
                    for (int64_t j = 0; j < n_cols; ++j) {
                        const float v = uniform(j);
                        std::memcpy(row + 4 * j, &v, 4);
                    }
                    break;
                case ggml_type::f16:
                case ggml_type::bf16:
                    for (int64_t j = 0; j < n_cols; ++j) {
                        const uint16_t h = type == ggml_type::f16 ? fp32_to_fp16(uniform(j)) : fp32_to_bf16(uniform(j));
                        std::memcpy(row + 2 * j, &h, 2);
                    }
                    break;
                case ggml_type::q8_0:
                case ggml_type::q4_0: {
                    const size_t block_bytes = type == ggml_type::q8_0 ? sizeof(block_q8_0) : sizeof(block_q4_0);
                    for (int64_t ib = 0; ib < n_cols / 32; ++ib) {
                        uint8_t * b = row + size_t(ib) * block_bytes;
                        const uint16_t d = fp32_to_fp16((1.0f + 0.5f * (uniform(ib) + 1.0f)) / 512.0f);
                        std::memcpy(b, &d, 2);
                        for (size_t k = 2; k < block_bytes; ++k)
                            b[k] = uint8_t(hash64(s + uint64_t(ib) * 64 + k) >> 32);
                    }
                    break;
                }
                default: {  // the other written types: uniform values through their encoder
                    std::vector<float> v(static_cast<size_t>(n_cols));
                    for (int64_t j = 0; j < n_cols; ++j) v[static_cast<size_t>(j)] = uniform(j);
                    quantize_row(type, v.data(), row, n_cols);
                    break;
                }
            }
        }
    });
    return m;
}

struct result {
    ggml_type type;
    int64_t n;
    stat3 t_ms;    // one pass over the stack, wall clock
    stat3 cpu_ms;  // the process's CPU time of one pass / threads
};

// CPU time of the whole process (every thread), in ms.
double process_cpu_ms() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

std::vector<int64_t> parse_list(const std::string & s) {
    std::vector<int64_t> v;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ',')) {
        char * end = nullptr;
        const long long x = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || x < 1) fail_usage("--n: '{}' is not a positive integer", item);
        v.push_back(x);
    }
    if (v.empty()) fail_usage("--n is empty");
    return v;
}

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"HillInfer batched decode products (n activation rows per pass over the weights)"};
    std::string types_arg = "f16,q8_0,q4_0", n_arg = "1,2,4,8,16,25", json_path;
    int64_t n_embd = 1024, n_ff = 4096, n_head = 16, n_head_kv = 4;
    int n_layer = 24, reps = 5, n_threads = 0;
    bool use_blas = false, scalar = false, exact = false;
    app.add_option("--types", types_arg, "weight types, comma-separated")->capture_default_str();
    app.add_option("--n", n_arg, "activation rows per call, comma-separated")->capture_default_str();
    app.add_option("--n-embd", n_embd, "model width")->capture_default_str();
    app.add_option("--n-ff", n_ff, "feed-forward width")->capture_default_str();
    app.add_option("--n-layer", n_layer, "layers")->capture_default_str();
    app.add_option("--n-head", n_head, "query heads")->capture_default_str();
    app.add_option("--n-head-kv", n_head_kv, "KV heads")->capture_default_str();
    app.add_option("--reps", reps, "timed passes per point (median reported)")->capture_default_str();
    app.add_option("-t,--threads", n_threads, "threads (default: physical cores)");
    app.add_flag("--blas", use_blas, "time the OpenBLAS path (gemm_blas) instead of gemm");
    app.add_flag("--scalar", scalar, "run the scalar reference kernels");
    app.add_flag("--exact-matmul", exact, "f32 activations for quantized weights (default: int8 where the type has it)");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);
    try {
        blas_init_single_threaded();
        if (n_threads <= 0) n_threads = physical_core_count();
        if (n_embd < 32 || n_ff < 32 || n_embd % 32 != 0 || n_ff % 32 != 0 || n_layer < 1 || n_head < 1 ||
            n_head_kv < 1 || n_head % n_head_kv != 0 || n_embd % n_head != 0 || reps < 1) {
            fail_usage(
                "--n-embd and --n-ff must be multiples of 32, --n-head a multiple of --n-head-kv and a "
                "divisor of --n-embd, --n-layer and --reps >= 1");
        }
        std::vector<ggml_type> types;
        {
            std::stringstream in(types_arg);
            std::string item;
            while (std::getline(in, item, ',')) {
                const auto t = ggml_type_from_name(item);
                if (!t) fail_usage("--types: unknown type '{}'", item);
                const bool written = *t == ggml_type::q8_0 || *t == ggml_type::q4_0 || quantize_supported(*t);
                if (!written || (n_embd % ggml_block_size(*t) != 0 || n_ff % ggml_block_size(*t) != 0)) {
                    fail_usage("--types: {} needs an encoder and --n-embd, --n-ff multiples of {}", item,
                               ggml_block_size(*t));
                }
                types.push_back(*t);
            }
        }
        const std::vector<int64_t> ns = parse_list(n_arg);
        const int64_t n_max = *std::max_element(ns.begin(), ns.end());
        if (scalar) kernel_mode_set(kernel_mode::scalar);
        if (exact) matmul_mode_set(matmul_mode::exact);
        thread_pool pool(n_threads);
        const int64_t n_embd_kv = n_embd / n_head * n_head_kv;

        // Activations f32 [n_max, max(n_embd, n_ff)] in [-1, 1); outputs f32 [n_max, max(n_embd, n_ff)].
        const int64_t width = std::max(n_embd, n_ff);
        std::vector<float> x(size_t(n_max * width)), y(size_t(n_max * width));
        for (size_t i = 0; i < x.size(); ++i) x[i] = float(hash64(i ^ 0x5555) >> 40) / float(1 << 23) - 1.0f;

        const double dram = bench::dram_read_gbps(pool, size_t(1) << 30, 5);

        std::vector<result> results;
        uint64_t stack_params = 0;
        std::vector<uint64_t> stack_bytes;
        for (ggml_type type : types) {
            std::vector<matrix> stack;
            uint64_t bytes = 0;
            for (int il = 0; il < n_layer; ++il) {
                const struct {
                    int64_t n_rows, n_cols;
                } shapes[] = {{n_embd, n_embd}, {n_embd_kv, n_embd}, {n_embd_kv, n_embd}, {n_embd, n_embd},
                              {n_ff, n_embd},   {n_ff, n_embd},      {n_embd, n_ff}};
                for (const auto & s : shapes) {
                    stack.push_back(make_matrix(type, s.n_rows, s.n_cols, stack.size() + 1, pool));
                    bytes += stack.back().view.row_bytes() * uint64_t(s.n_rows);
                }
            }
            stack_params = 0;
            for (const matrix & m : stack) stack_params += uint64_t(m.view.n_rows * m.view.n_cols);
            stack_bytes.push_back(bytes);
            // The n values take turns, pass after pass (after one warm-up pass each), so that a load
            // change of a shared machine falls on all of them alike.
            std::vector<std::vector<double>> t_ms(ns.size()), cpu_ms(ns.size());
            for (int r = 0; r < reps + 1; ++r) {
                for (size_t in = 0; in < ns.size(); ++in) {
                    const int64_t t0 = time_us();
                    const double c0 = process_cpu_ms();
                    for (const matrix & m : stack) {
                        if (use_blas) {
                            gemm_blas(m.view, x.data(), ns[in], y.data(), pool);
                        } else {
                            gemm(m.view, x.data(), ns[in], y.data(), pool);
                        }
                    }
                    if (r > 0) {
                        t_ms[in].push_back(double(time_us() - t0) / 1e3);
                        cpu_ms[in].push_back((process_cpu_ms() - c0) / n_threads);
                    }
                }
            }
            for (size_t in = 0; in < ns.size(); ++in)
                results.push_back({type, ns[in], summarize(t_ms[in]), summarize(cpu_ms[in])});
        }

        fmt::print(
            "machine: {} thread(s) ({} physical cores), kernels {}, DRAM read {:.1f} GB/s with them over a fresh "
            "1 GiB buffer (best of 5)\n",
            n_threads, physical_core_count(), kernel_mode_get() == kernel_mode::avx2 ? "avx2" : "scalar", dram);
        fmt::print(
            "stack:   {} layers, n_embd {}, n_embd_kv {}, n_ff {}: {:.0f} M weights, {} matrices per pass, {}, "
            "{} reps\n",
            n_layer, n_embd, n_embd_kv, n_ff, double(stack_params) / 1e6, 7 * n_layer, use_blas ? "gemm_blas" : "gemm",
            reps);
        fmt::print("{:5}  {:>3}  {:>9}  {:>19}  {:>8}  {:>9}  {:>6}  {:>7}  {:>6}  {:>8}  {:>7}\n", "type", "n",
                   "ms/pass", "(min .. max)", "us/call", "rows/s", "GB/s", "t/t(1)", "gain", "cpu ms", "cpu/(1)");
        for (size_t it = 0; it < types.size(); ++it) {
            const result * base = nullptr;
            for (const result & r : results) {
                if (r.type == types[it] && r.n == 1) base = &r;
            }
            for (const result & r : results) {
                if (r.type != types[it]) continue;
                const double s = r.t_ms.median / 1e3;
                const std::string ratio = base ? fmt::format("{:7.2f}", r.t_ms.median / base->t_ms.median) : "      -";
                const std::string gain =
                    base ? fmt::format("{:6.2f}", double(r.n) * base->t_ms.median / r.t_ms.median) : "     -";
                const std::string cpu_ratio =
                    base ? fmt::format("{:7.2f}", r.cpu_ms.median / base->cpu_ms.median) : "      -";
                fmt::print(
                    "{:5}  {:3}  {:9.2f}  ({:7.2f} .. {:7.2f})  {:8.1f}  {:9.0f}  {:6.1f}  {}  {}  {:8.2f}  {}\n",
                    ggml_type_name(r.type), r.n, r.t_ms.median, r.t_ms.lo, r.t_ms.hi,
                    r.t_ms.median * 1e3 / double(7 * n_layer), double(r.n) / s, double(stack_bytes[it]) / s / 1e9,
                    ratio, gain, r.cpu_ms.median, cpu_ratio);
            }
        }
        if (!json_path.empty()) {
            nlohmann::json j = {{"n_threads", n_threads},
                                {"kernel_mode", kernel_mode_get() == kernel_mode::avx2 ? "avx2" : "scalar"},
                                {"exact_matmul", exact},
                                {"path", use_blas ? "gemm_blas" : "gemm"},
                                {"dram_read_gbps", dram},
                                {"n_layer", n_layer},
                                {"n_embd", n_embd},
                                {"n_embd_kv", n_embd_kv},
                                {"n_ff", n_ff},
                                {"n_weights", stack_params},
                                {"reps", reps},
                                {"results", nlohmann::json::array()}};
            for (size_t it = 0; it < types.size(); ++it) {
                for (const result & r : results) {
                    if (r.type != types[it]) continue;
                    j["results"].push_back({{"type", ggml_type_name(r.type)},
                                            {"n", r.n},
                                            {"weight_bytes", stack_bytes[it]},
                                            {"ms_per_pass", r.t_ms.median},
                                            {"ms_per_pass_min", r.t_ms.lo},
                                            {"ms_per_pass_max", r.t_ms.hi},
                                            {"cpu_ms_per_pass", r.cpu_ms.median},
                                            {"rows_per_s", double(r.n) / (r.t_ms.median / 1e3)},
                                            {"weight_gbps", double(stack_bytes[it]) / (r.t_ms.median / 1e3) / 1e9}});
                }
            }
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
        return 0;
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_gemm: error: {}\n", e.what());
        return int(e.code());
    }
}
