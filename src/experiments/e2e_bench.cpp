// bench latency and bench batch: prefill + decode through the engine on a random model of a paper
// model's shape (experiments/experiments.h run_e2e).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/sys_info.h"
#include "csd/device_profile.h"
#include "engine/context.h"
#include "engine/passkey.h"
#include "experiments/experiments.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "model/weight_scheme.h"
#include "policy/policy.h"

namespace hill {

const std::vector<model_shape> & model_shapes() {
    // From the models' published configurations (vocabulary, hidden size, FFN size, layers, heads).
    static const std::vector<model_shape> shapes = {
        {"opt-6.7b", "llama", 50272, 4096, 16384, 32, 32, 32},
        {"llama-2-7b", "llama", 32000, 4096, 11008, 32, 32, 32},
        {"llama-13b", "llama", 32000, 5120, 13824, 40, 40, 40},
        {"qwen-7b", "qwen2", 151936, 4096, 11008, 32, 32, 32},
        {"tiny", "llama", 512, 256, 704, 2, 4, 4},
    };
    return shapes;
}

const model_shape & find_shape(const std::string & name) {
    std::string names;
    for (const model_shape & s : model_shapes()) {
        if (name == s.name) return s;
        names += (names.empty() ? "" : ", ") + std::string(s.name);
    }
    fail_usage("unknown model shape '{}': expected one of {}", name, names);
}

namespace {

// The books of dir (*.txt, name order) concatenated, at least n_chars long (cycled); generated text when
// dir is empty.
std::string read_books(const std::string & dir, size_t n_chars) {
    if (dir.empty()) return generated_haystack(1, n_chars);
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto & e : std::filesystem::directory_iterator(dir, ec)) {
        if (e.path().extension() == ".txt") files.push_back(e.path());
    }
    if (ec || files.empty()) fail_usage("--text-dir '{}': expected a directory of .txt books", dir);
    std::sort(files.begin(), files.end());
    std::string text;
    while (text.size() < n_chars) {
        for (const auto & f : files) {
            std::ifstream in(f, std::ios::binary);
            std::ostringstream ss;
            ss << in.rdbuf();
            if (!in || ss.str().empty()) fail_usage("--text-dir: the book '{}' cannot be read or is empty", f.string());
            text += ss.str();
            text += "\n\n";
            if (text.size() >= n_chars) break;
        }
    }
    return text;
}

struct e2e_result {
    int64_t ctx = 0;
    int batch = 0;
    double cold = 0;
    std::string storage, policy;
    double prefill_s = 0, decode_s = 0, e2e_s = 0, step_ms = 0, tokens_per_s = 0;
};

std::string label(const e2e_result & r) {
    return r.cold == 0.0 ? fmt::format("{} in RAM", r.policy)
                         : fmt::format("{} {:.0f}% cold {}", r.policy, 100 * r.cold, r.storage);
}

}  // namespace

experiment_report run_e2e(const std::string & name, const e2e_params & p, thread_pool & pool,
                          const experiment_log & log) {
    const model_shape & shape = find_shape(p.shape);
    const std::optional<weight_scheme> ws = weight_scheme_from_name(p.weights);
    if (!ws) fail_usage("--weights '{}': expected one of {}", p.weights, weight_scheme_names());
    if (p.n_layer < 1 || p.n_layer > shape.n_layer) {
        fail_usage("--layers must be in [1, {}] ({} has {}), got {}", shape.n_layer, shape.name, shape.n_layer,
                   p.n_layer);
    }
    if (p.ctxs.empty() || p.batches.empty() || p.colds.empty() || p.storages.empty()) {
        fail_usage("bench {}: the context lengths, batch sizes, cold shares and storages need a value each", name);
    }
    for (const int64_t n : p.ctxs) {
        if (n < 64 || n > (int64_t(1) << 24)) fail_usage("prompt lengths must be in [64, 2^24] tokens, got {}", n);
    }
    for (const int b : p.batches) {
        if (b < 1 || b > 256) fail_usage("batch sizes must be in [1, 256], got {}", b);
    }
    if (p.n_gen < 1) fail_usage("--gen must be at least 1, got {}", p.n_gen);
    for (const double c : p.colds) {
        if (!(c >= 0.0 && c < 1.0)) fail_usage("cold shares must be in [0, 1), got {}", c);
    }
    for (const std::string & s : p.storages) (void)csd::parse_storage(s);
    const csd::device_profile profile = csd::load_device_profile(p.profile);
    const std::vector<std::string> policies = p.policies.empty() ? registered_policies() : p.policies;
    for (const std::string & s : policies) (void)make_policy(policy_params{.name = s}, shape.n_head_kv);
    if (p.kv_dir.empty()) fail_usage("bench {}: needs a kv-dir (the model file and the cold pool)", name);

    // The model: the shape with its layers reduced, random weights (the KV cache's work does not depend on them).
    std::error_code ec;
    std::filesystem::create_directories(p.kv_dir, ec);
    const int64_t ctx_max = *std::max_element(p.ctxs.begin(), p.ctxs.end());
    const int batch_max = *std::max_element(p.batches.begin(), p.batches.end());
    const std::string model_path =
        (std::filesystem::path(p.kv_dir) / fmt::format("hillinfer-bench-{}.gguf", ::getpid())).string();
    log(fmt::format(
        "model: random {} of {}'s shape (n_embd {}, n_ff {}, {} heads / {} KV heads, vocabulary {}), {} of its "
        "{} layers, {} weights",
        shape.arch, shape.name, shape.n_embd, shape.n_ff, shape.n_head, shape.n_head_kv, shape.n_vocab, p.n_layer,
        shape.n_layer, p.weights));
    write_random_model(model_path, random_model_params{.n_vocab = shape.n_vocab,
                                                       .n_embd = shape.n_embd,
                                                       .n_ff = shape.n_ff,
                                                       .n_layer = p.n_layer,
                                                       .n_head = shape.n_head,
                                                       .n_head_kv = shape.n_head_kv,
                                                       .n_ctx = int32_t(ctx_max + p.n_gen + 1),
                                                       .type = *ws,
                                                       .arch = shape.arch});
    const remove_on_exit cleanup{model_path};
    const auto m = model::load(model_path);
    const hparams & hp = m->hp();
    const size_t row_bytes = size_t(hp.n_embd_kv()) * 2;  // f16

    // The prompts' tokens: slices of the books, one per sequence of the largest batch, and the token after each.
    const int n_prompts = p.same_prompt ? 1 : batch_max;  // prompts prefilled per length
    const int64_t need = int64_t(n_prompts) * (ctx_max + 1);
    std::vector<int32_t> ids = m->tokenizer().encode(read_books(p.text_dir, size_t(need) * 2), false);
    if (ids.empty()) fail_input("the text gave no tokens");
    for (size_t i = 0; int64_t(ids.size()) < need; ++i) {  // cycled
        const int32_t t = ids[i];
        ids.push_back(t);
    }
    log(fmt::format("text: {}, {} tokens of it", p.text_dir.empty() ? std::string("generated") : p.text_dir, need));

    std::vector<e2e_result> out;
    std::vector<float> logits;
    for (const int64_t n : p.ctxs) {
        // Prefill every sequence's prompt once, densely in RAM, and keep its KV: f16 [n, n_embd_kv] per layer.
        std::vector<std::vector<std::vector<uint8_t>>> k(static_cast<size_t>(n_prompts)),
            v(static_cast<size_t>(n_prompts));
        std::vector<double> prefill_s(static_cast<size_t>(n_prompts));
        for (int i = 0; i < n_prompts; ++i) {
            context_params cp;
            cp.n_ctx = int32_t(n);
            cp.policy.name = "full";
            context c(*m, cp, pool);
            const int64_t t0 = time_us();
            c.prefill(0, std::span<const int32_t>(ids.data() + int64_t(i) * (n + 1), size_t(n)), false, nullptr,
                      [](int64_t, int64_t) { throw_if_stopped("prefill"); });
            prefill_s[size_t(i)] = double(time_us() - t0) / 1e6;
            k[size_t(i)].resize(size_t(hp.n_layer));
            v[size_t(i)].resize(size_t(hp.n_layer));
            for (int il = 0; il < hp.n_layer; ++il) {
                k[size_t(i)][size_t(il)].resize(size_t(n) * row_bytes);
                v[size_t(i)][size_t(il)].resize(size_t(n) * row_bytes);
                c.export_layer(0, il, k[size_t(i)][size_t(il)].data(), v[size_t(i)][size_t(il)].data());
            }
        }
        log(
            fmt::format("ctx {}: prefill of {} prompt{}, {:.2f} s each on average (dense, in RAM; reused by every "
                        "configuration{})",
                        n, n_prompts, n_prompts == 1 ? "" : "s", [&] {
                            double s = 0;
                            for (const double x : prefill_s) s += x;
                            return s / double(n_prompts);
                        }(), p.same_prompt ? "; every sequence of a batch has this prompt and is charged its prefill" : ""));
        for (const int batch : p.batches) {
            double batch_prefill_s = 0;
            for (int i = 0; i < batch; ++i) batch_prefill_s += prefill_s[size_t(i % n_prompts)];
            for (const double cold : p.colds) {
                const std::vector<std::string> ram = {"ram"};
                for (const std::string & storage : cold > 0.0 ? p.storages : ram) {
                    for (const std::string & pol : policies) {
                        context_params cp;
                        cp.n_ctx = int32_t(n + p.n_gen + 1);
                        cp.n_seq = batch;
                        cp.kv_dir = cold > 0.0 ? p.kv_dir : std::string();
                        cp.policy.name = pol;
                        cp.policy.alpha = p.alpha;
                        cp.policy.score.query = query_precision::int8;  // the device's integer kernel
                        cp.storage.stop_requested = stop_requested;     // Ctrl-C abandons a device pass
                        if (cold > 0.0) {
                            cp.storage.kind = csd::parse_storage(storage);
                            if (storage == "emulator") {
                                cp.storage.profile = profile;
                                cp.planner.cal = p.calibrate ? p.calibrate(profile) : default_calibration(profile);
                            }
                        }
                        if (cold > 0.0) {
                            // (1 - cold) of the tokens hot (at least the sinks, windows and appends), and the
                            // policy's scoring copy on top.
                            const int64_t rule = int64_t(batch) * (cp.policy.n_sinks + cp.policy.n_window + 2);
                            const auto hot = std::max(rule, int64_t(double(batch) * double(n) * (1.0 - cold)));
                            cp.kv_host_budget = context::host_budget_for(*m, cp, hot);
                        }
                        context c(*m, cp, pool);
                        std::vector<int> seqs(static_cast<size_t>(batch));
                        std::vector<int32_t> toks(static_cast<size_t>(batch));
                        for (int i = 0; i < batch; ++i) {
                            const size_t j = size_t(i % n_prompts);  // the sequence's prompt
                            std::vector<const void *> kp, vp;
                            for (int il = 0; il < hp.n_layer; ++il) {
                                kp.push_back(k[j][size_t(il)].data());
                                vp.push_back(v[j][size_t(il)].data());
                            }
                            c.import_kv(i, n, kp, vp);
                            seqs[size_t(i)] = i;
                            toks[size_t(i)] = ids[size_t(int64_t(j) * (n + 1) + n)];  // the text's next token
                        }
                        logits.resize(size_t(batch) * size_t(hp.n_vocab));
                        const int64_t t0 = time_us();
                        for (int s = 0; s < p.n_gen; ++s) {
                            throw_if_stopped("bench decode");
                            c.decode(seqs, toks, logits.data());
                            for (int i = 0; i < batch; ++i) {  // greedy
                                const float * row = logits.data() + size_t(i) * size_t(hp.n_vocab);
                                toks[size_t(i)] = int32_t(std::max_element(row, row + hp.n_vocab) - row);
                            }
                        }
                        e2e_result r{n, batch, cold, storage, pol};
                        r.prefill_s = batch_prefill_s;
                        r.decode_s = double(time_us() - t0) / 1e6;
                        r.e2e_s = r.prefill_s + r.decode_s;
                        r.step_ms = 1e3 * r.decode_s / p.n_gen;
                        r.tokens_per_s = double(batch) * p.n_gen / r.e2e_s;
                        log(fmt::format(
                            "ctx {:>7} batch {:>3} {:32} prefill {:8.2f} s, decode {:8.2f} s ({:.1f} ms/step), "
                            "end to end {:8.2f} s, {:.2f} tokens/s",
                            n, batch, label(r), r.prefill_s, r.decode_s, r.step_ms, r.e2e_s, r.tokens_per_s));
                        out.push_back(r);
                    }
                }
            }
        }
    }

    // hillinfer against every other policy in the same (ctx, batch, cold, storage).
    nlohmann::json results = nlohmann::json::array(), speedups = nlohmann::json::array();
    for (const e2e_result & r : out) {
        results.push_back({{"ctx", r.ctx},
                           {"batch", r.batch},
                           {"cold", r.cold},
                           {"storage", r.storage},
                           {"policy", r.policy},
                           {"prefill_s", r.prefill_s},
                           {"decode_s", r.decode_s},
                           {"e2e_s", r.e2e_s},
                           {"step_ms", r.step_ms},
                           {"tokens_per_s", r.tokens_per_s}});
    }
    for (const e2e_result & h : out) {
        if (h.policy != "hillinfer") continue;
        for (const e2e_result & b : out) {
            if (b.policy == "hillinfer" || b.ctx != h.ctx || b.batch != h.batch || b.cold != h.cold ||
                b.storage != h.storage)
                continue;
            speedups.push_back({{"ctx", h.ctx},
                                {"batch", h.batch},
                                {"cold", h.cold},
                                {"storage", h.storage},
                                {"baseline", b.policy},
                                {"decode_speedup", b.decode_s / h.decode_s},
                                {"e2e_reduction", 1.0 - h.e2e_s / b.e2e_s}});
            const double red = 1.0 - h.e2e_s / b.e2e_s;
            log(fmt::format(
                "ctx {:>7} batch {:>3} {:.0f}% cold {}: hillinfer decodes {:.2f}x as fast as {}; end to end {:.1f}% "
                "{}",
                h.ctx, h.batch, 100 * h.cold, h.storage, b.decode_s / h.decode_s, b.policy, 100 * std::abs(red),
                red >= 0 ? "lower" : "higher"));
        }
    }
    experiment_report rep;
    rep.json = {{"experiment", name},
                {"shape", shape.name},
                {"arch", shape.arch},
                {"layers", p.n_layer},
                {"layers_of_shape", shape.n_layer},
                {"n_embd", shape.n_embd},
                {"n_head", shape.n_head},
                {"n_head_kv", shape.n_head_kv},
                {"n_vocab", shape.n_vocab},
                {"weights", p.weights},
                {"alpha", p.alpha},
                {"gen", p.n_gen},
                {"profile", p.profile},
                {"text", p.text_dir.empty() ? "generated" : p.text_dir},
                {"prefill_note",
                 p.same_prompt ? "one prompt per length, prefilled once, densely in RAM, its KV imported for every sequence "
                                 "of every configuration; prefill_s counts its time once per sequence"
                               : "each prompt prefilled once, densely in RAM; its KV imported by every configuration"},
                {"same_prompt", p.same_prompt},
                {"results", results},
                {"speedups", speedups}};
    const bool by_batch = name == "batch";
    rep.plot.title =
        by_batch ? fmt::format(
                       "hillinfer bench batch: throughput, {} prompt + {} generated tokens ({} of {}'s {} "
                       "layers)",
                       p.ctxs.front(), p.n_gen, p.n_layer, shape.name, shape.n_layer)
                 : fmt::format("hillinfer bench latency: prefill + {} decode steps, batch {} ({} of {}'s {} layers)",
                               p.n_gen, p.batches.front(), p.n_layer, shape.name, shape.n_layer);
    rep.plot.xlabel = by_batch ? "batch size" : "context length (tokens, log)";
    rep.plot.ylabel = by_batch ? "tokens/s (generated, end to end)" : "end-to-end latency (s, log)";
    rep.plot.logx = !by_batch;
    rep.plot.logy = !by_batch;
    std::vector<std::string> labels;
    for (const e2e_result & r : out) {
        if (std::find(labels.begin(), labels.end(), label(r)) == labels.end()) labels.push_back(label(r));
    }
    for (const std::string & l : labels) {
        plot_series s{l, {}};
        for (const e2e_result & r : out) {
            if (label(r) != l) continue;
            if (by_batch && r.ctx == p.ctxs.front()) s.points.emplace_back(r.batch, r.tokens_per_s);
            if (!by_batch && r.batch == p.batches.front()) s.points.emplace_back(double(r.ctx), r.e2e_s);
        }
        rep.plot.series.push_back(std::move(s));
    }
    return rep;
}

}  // namespace hill
