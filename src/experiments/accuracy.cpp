// bench accuracy: perplexity, passkey retrieval and multiple-choice log-likelihood of every policy
// against `full` (experiments/experiments.h run_accuracy).
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/interrupt.h"
#include "engine/passkey.h"
#include "engine/perplexity.h"
#include "engine/session.h"
#include "experiments/experiments.h"
#include "format/json_file.h"
#include "model/model.h"
#include "model/synthetic_model.h"
#include "policy/policy.h"

namespace hill {

namespace {

std::string read_file(const std::string & path, const char * what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_usage("{} '{}' cannot be read", what, path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::string> lines_of(const std::string & text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
        if (!l.empty()) out.push_back(l);
    }
    return out;
}

// A JSON line of a task file; discarded (is_discarded()) when it is not valid JSON.
nlohmann::json parse_line(const std::string & l) {
    try {
        return json_parse(l);
    } catch (const nlohmann::json::exception &) {
        return nlohmann::json(nlohmann::json::value_t::discarded);
    }
}

// One decoding configuration: a policy at a retention ratio (full: alpha NaN).
struct config {
    std::string policy;
    double alpha = NAN;
    std::string label() const { return std::isnan(alpha) ? policy : fmt::format("{} {}", policy, alpha); }
    policy_params params() const {
        policy_params pp;
        pp.name = policy;
        if (!std::isnan(alpha)) pp.alpha = alpha;
        return pp;
    }
};

context_params in_ram(int64_t n_ctx, const policy_params & pp) {
    context_params cp;
    cp.n_ctx = int32_t(n_ctx);
    cp.policy = pp;
    return cp;
}

// The KV of a prompt's tokens [0, n), prefilled once (dense) for every configuration to start from, with
// its prefill importance (the same score params, window and sinks as every configuration's: the
// defaults), so that an import starts each policy from the state its own prefill would give (h2o's
// accumulated attention, context::import_kv).
struct prefilled {
    int64_t n = 0;
    std::vector<std::vector<uint8_t>> k, v;      // per layer: kv type [n, n_embd_kv]
    std::vector<std::vector<float>> importance;  // per layer: f32 [n]
};

prefilled prefill_once(const model & m, std::span<const int32_t> ids, thread_pool & pool) {
    prefilled out;
    out.n = int64_t(ids.size());
    context_params cp = in_ram(out.n, policy_params{});
    cp.keep_prefill_importance = true;
    session s(m, cp, pool);
    s.eval(ids, false, [](int64_t, int64_t) { throw_if_stopped("prefill"); });
    const size_t bytes = size_t(out.n) * size_t(m.hp().n_embd_kv()) * 2;  // f16
    out.k.resize(size_t(m.hp().n_layer));
    out.v.resize(size_t(m.hp().n_layer));
    out.importance.resize(size_t(m.hp().n_layer));
    for (int il = 0; il < m.hp().n_layer; ++il) {
        out.k[size_t(il)].resize(bytes);
        out.v[size_t(il)].resize(bytes);
        out.importance[size_t(il)].resize(size_t(out.n));
        s.ctx().export_layer(0, il, out.k[size_t(il)].data(), out.v[size_t(il)].data());
        s.ctx().export_importance(0, il, out.importance[size_t(il)].data());
    }
    return out;
}

// A session of n_ctx tokens under pp holding the prefill's KV.
std::unique_ptr<session> session_from(const model & m, const prefilled & kv, int64_t n_ctx, const policy_params & pp,
                                      thread_pool & pool) {
    auto s = std::make_unique<session>(m, in_ram(n_ctx, pp), pool);
    std::vector<const void *> kp, vp;
    std::vector<const float *> ip;
    for (size_t il = 0; il < kv.k.size(); ++il) {
        kp.push_back(kv.k[il].data());
        vp.push_back(kv.v[il].data());
        ip.push_back(kv.importance[il].data());
    }
    s->ctx().import_kv(0, kv.n, kp, vp, ip);
    return s;
}

// A multiple-choice item: the context's tokens and each choice's continuation tokens.
struct mc_item {
    std::vector<int32_t> context;
    std::vector<std::vector<int32_t>> choices;
    int label = 0;
};

// lm-eval-harness's split: whole = encode(context + continuation), the continuation = whole after
// encode(context)'s length. Contexts longer than n_max allows keep BOS and their last tokens.
mc_item make_item(const tokenizer & tok, const std::string & ctx, const std::vector<std::string> & conts, int label,
                  int64_t n_max) {
    mc_item it;
    it.label = label;
    it.context = tok.encode(ctx, true);
    size_t longest = 0;
    for (const std::string & c : conts) {
        const std::vector<int32_t> whole = tok.encode(ctx + c, true);
        std::vector<int32_t> cont(whole.begin() + int64_t(std::min(it.context.size(), whole.size())), whole.end());
        if (cont.empty()) cont.push_back(whole.back());
        longest = std::max(longest, cont.size());
        it.choices.push_back(std::move(cont));
    }
    const int64_t room = n_max - int64_t(longest) - 1;
    if (room < 2)
        fail_input("a multiple-choice continuation of {} tokens does not fit the {}-token context", longest, n_max);
    if (int64_t(it.context.size()) > room) {
        std::vector<int32_t> cut = {it.context.front()};
        cut.insert(cut.end(), it.context.end() - (room - 1), it.context.end());
        it.context = std::move(cut);
    }
    return it;
}

// The choice with the largest sum of log-probabilities of its continuation, each token predicted by a
// decode step of the session (which holds the item's context but its last token).
int choose(session & s, const mc_item & it) {
    const int32_t n_vocab = s.model().hp().n_vocab;
    const int64_t n0 = int64_t(it.context.size()) - 1;
    int best = -1;
    double best_ll = -INFINITY;
    for (size_t c = 0; c < it.choices.size(); ++c) {
        s.truncate(n0);
        s.eval(std::span<const int32_t>(&it.context.back(), 1));
        double ll = 0;
        const std::vector<int32_t> & cont = it.choices[c];
        for (size_t i = 0; i < cont.size(); ++i) {
            ll -= token_nll(s.logits(), n_vocab, cont[i]);
            if (i + 1 < cont.size()) s.eval(std::span<const int32_t>(&cont[i], 1));
        }
        if (ll > best_ll) {
            best_ll = ll;
            best = int(c);
        }
    }
    return best;
}

}  // namespace

experiment_report run_accuracy(const accuracy_params & p, thread_pool & pool, const experiment_log & log) {
    if (p.alphas.empty()) fail_usage("bench accuracy: --alphas needs at least one value");
    for (const double a : p.alphas) {
        if (!(a > 0.0 && a <= 1.0)) fail_usage("--alphas values must be in (0, 1], got {}", a);
    }
    if (p.ppl_ctx < 16) fail_usage("--ppl-ctx must be at least 16 tokens, got {}", p.ppl_ctx);
    if (p.ppl_windows < 1) fail_usage("--ppl-windows must be at least 1, got {}", p.ppl_windows);
    for (const int64_t n : p.passkey_ctxs) {
        if (n < 128 || n > passkey_n_ctx_max)
            fail_usage("passkey lengths must be in [128, {}], got {}", passkey_n_ctx_max, n);
    }
    const std::vector<std::string> policies = p.policies.empty() ? registered_policies() : p.policies;
    std::vector<config> configs = {{"full"}};
    for (const std::string & pol : policies) {
        (void)make_policy(policy_params{.name = pol}, 1);
        if (pol == "full") continue;
        for (const double a : p.alphas) configs.push_back({pol, a});
    }
    const std::string rte_path = p.eval_dir + "/rte/val.jsonl", piqa_path = p.eval_dir + "/piqa/valid.jsonl",
                      piqa_labels = p.eval_dir + "/piqa/valid-labels.lst";
    const std::string book = read_file(p.book_path, "perplexity text");
    const std::vector<std::string> rte_lines = lines_of(read_file(rte_path, "RTE file"));
    const std::vector<std::string> piqa_lines = lines_of(read_file(piqa_path, "PIQA file"));
    const std::vector<std::string> piqa_label_lines = lines_of(read_file(piqa_labels, "PIQA labels file"));
    if (piqa_lines.size() != piqa_label_lines.size()) {
        fail_input("'{}' has {} items but '{}' {} labels", piqa_path, piqa_lines.size(), piqa_labels,
                   piqa_label_lines.size());
    }
    const auto m = model::load(p.model_path, p.tokenizer_path);
    const tokenizer & tok = m->tokenizer();
    const int32_t bos = tok.vocab().bos;
    if (bos < 0) fail_input("model '{}' has no BOS token", p.model_path);
    log(fmt::format("model {}: {} layers, {} heads / {} KV heads, trained context {}", p.model_path, m->hp().n_layer,
                    m->hp().n_head, m->hp().n_head_kv, m->hp().n_ctx_train));

    struct scores {
        double ppl = NAN, passkey = NAN, rte = NAN, piqa = NAN, rte_agree = NAN, piqa_agree = NAN;
        int passkey_ok = 0, passkey_n = 0;
    };
    std::vector<scores> sc(configs.size());

    // Perplexity: windows of ppl_ctx tokens from the book (past its first tenth: the Gutenberg header).
    {
        const size_t chars = std::min(book.size() - book.size() / 10, size_t(p.ppl_ctx) * size_t(p.ppl_windows) * 8);
        const std::vector<int32_t> ids = tok.encode(std::string_view(book).substr(book.size() / 10, chars), false);
        for (size_t c = 0; c < configs.size(); ++c) {
            session s(*m, in_ram(p.ppl_ctx, configs[c].params()), pool);
            const perplexity_result r = evaluate_perplexity(s, ids, bos, p.ppl_windows, [](const perplexity_result &) {
                throw_if_stopped("bench accuracy");
                return true;
            });
            sc[c].ppl = r.perplexity;
            log(fmt::format("perplexity {:18} {:.4f} ({} tokens)", configs[c].label(), r.perplexity, r.n_tokens));
        }
    }

    // Passkey retrieval on the passkey model: each prompt prefilled once, decoded under every configuration.
    nlohmann::json passkey = nlohmann::json::array();
    if (!p.passkey_ctxs.empty() && !p.passkey_depths.empty()) {
        const int64_t n_max = *std::max_element(p.passkey_ctxs.begin(), p.passkey_ctxs.end()) + 16;
        std::error_code ec;
        std::filesystem::create_directories(p.kv_dir, ec);
        const std::string path =
            (std::filesystem::path(p.kv_dir) / fmt::format("hillinfer-passkey-{}.gguf", ::getpid())).string();
        write_passkey_model(path, passkey_model_params{.n_ctx = int32_t(n_max)});
        const auto pm = model::load(path);
        std::filesystem::remove(path, ec);
        uint64_t seed = 1;
        for (const int64_t n : p.passkey_ctxs) {
            for (const double depth : p.passkey_depths) {
                const passkey_prompt pr =
                    make_passkey_prompt(pm->tokenizer(), {.n_tokens = n, .depth = depth, .seed = seed++});
                const std::vector<int32_t> ids = pm->tokenizer().encode(pr.text, true);
                const prefilled kv = prefill_once(*pm, std::span<const int32_t>(ids.data(), ids.size() - 1), pool);
                std::string line = fmt::format("passkey ctx {:>6} depth {:.2f}:", n, depth);
                for (size_t c = 0; c < configs.size(); ++c) {
                    throw_if_stopped("bench accuracy");
                    const auto s = session_from(*pm, kv, int64_t(ids.size()) + 16, configs[c].params(), pool);
                    s->eval(std::span<const int32_t>(&ids.back(), 1));
                    const passkey_answer a = answer_passkey(*s, pr.passkey);
                    sc[c].passkey_ok += a.correct ? 1 : 0;
                    sc[c].passkey_n += 1;
                    line += fmt::format(" {} {}", configs[c].label(), a.correct ? "ok" : "MISS");
                    passkey.push_back({{"policy", configs[c].policy},
                                       {"alpha", number_or_null(configs[c].alpha)},
                                       {"ctx", n},
                                       {"depth", depth},
                                       {"correct", a.correct}});
                }
                log(line);
            }
        }
        for (scores & s : sc) s.passkey = double(s.passkey_ok) / double(s.passkey_n);
    }

    // RTE and PIQA: each item's context prefilled once; every configuration picks a choice from it.
    const int64_t n_mc = m->hp().n_ctx_train > 0 ? std::min<int64_t>(m->hp().n_ctx_train, p.ppl_ctx) : p.ppl_ctx;
    const auto run_mc = [&](const char * name, const std::vector<mc_item> & items, double scores::*acc,
                            double scores::*agree) {
        std::vector<int> right(configs.size()), same(configs.size());
        for (const mc_item & it : items) {
            const prefilled kv =
                prefill_once(*m, std::span<const int32_t>(it.context.data(), it.context.size() - 1), pool);
            int full_choice = -1;
            for (size_t c = 0; c < configs.size(); ++c) {
                throw_if_stopped("bench accuracy");
                const auto s = session_from(*m, kv, n_mc, configs[c].params(), pool);
                const int ch = choose(*s, it);
                if (c == 0) full_choice = ch;
                right[c] += ch == it.label ? 1 : 0;
                same[c] += ch == full_choice ? 1 : 0;
            }
        }
        for (size_t c = 0; c < configs.size(); ++c) {
            sc[c].*acc = double(right[c]) / double(items.size());
            sc[c].*agree = double(same[c]) / double(items.size());
            log(fmt::format("{} {:18} accuracy {:.3f} ({} items), same choice as full {:.3f}", name, configs[c].label(),
                            sc[c].*acc, items.size(), sc[c].*agree));
        }
    };
    {
        std::vector<mc_item> items;
        for (const std::string & l : rte_lines) {
            if (p.n_rte > 0 && int(items.size()) >= p.n_rte) break;
            const nlohmann::json j = parse_line(l);
            if (j.is_discarded() || !j.contains("premise") || !j.contains("hypothesis") || !j.contains("label")) {
                fail_input("'{}': expected JSON lines with premise, hypothesis and label, got '{}'", rte_path,
                           l.substr(0, 80));
            }
            const std::string ctx = j["premise"].get<std::string>() +
                                    "\nQuestion: " + j["hypothesis"].get<std::string>() + " True or False?\nAnswer:";
            items.push_back(make_item(tok, ctx, {" True", " False"}, j["label"] == "entailment" ? 0 : 1, n_mc));
        }
        run_mc("RTE", items, &scores::rte, &scores::rte_agree);
    }
    {
        std::vector<mc_item> items;
        for (size_t i = 0; i < piqa_lines.size(); ++i) {
            if (p.n_piqa > 0 && int(items.size()) >= p.n_piqa) break;
            const nlohmann::json j = parse_line(piqa_lines[i]);
            if (j.is_discarded() || !j.contains("goal") || !j.contains("sol1") || !j.contains("sol2")) {
                fail_input("'{}': expected JSON lines with goal, sol1 and sol2, got '{}'", piqa_path,
                           piqa_lines[i].substr(0, 80));
            }
            const int label = piqa_label_lines[i] == "1" ? 1 : 0;
            items.push_back(make_item(tok, "Question: " + j["goal"].get<std::string>() + "\nAnswer:",
                                      {" " + j["sol1"].get<std::string>(), " " + j["sol2"].get<std::string>()}, label,
                                      n_mc));
        }
        run_mc("PIQA", items, &scores::piqa, &scores::piqa_agree);
    }

    experiment_report rep;
    nlohmann::json results = nlohmann::json::array();
    plot_series ppl{"perplexity / full's", {}}, pk{"passkey retrieved", {}}, rte{"RTE accuracy", {}},
        piqa{"PIQA accuracy", {}};
    for (size_t c = 0; c < configs.size(); ++c) {
        results.push_back({{"policy", configs[c].policy},
                           {"alpha", number_or_null(configs[c].alpha)},
                           {"perplexity", number_or_null(sc[c].ppl)},
                           {"perplexity_ratio_to_full", number_or_null(sc[c].ppl / sc[0].ppl)},
                           {"passkey_accuracy", number_or_null(sc[c].passkey)},
                           {"rte_accuracy", number_or_null(sc[c].rte)},
                           {"piqa_accuracy", number_or_null(sc[c].piqa)},
                           {"rte_agreement", number_or_null(sc[c].rte_agree)},
                           {"piqa_agreement", number_or_null(sc[c].piqa_agree)}});
        rep.plot.categories.push_back(configs[c].label());
        ppl.points.emplace_back(double(c), sc[c].ppl / sc[0].ppl);
        pk.points.emplace_back(double(c), sc[c].passkey);
        rte.points.emplace_back(double(c), sc[c].rte);
        piqa.points.emplace_back(double(c), sc[c].piqa);
    }
    rep.json = {{"experiment", "accuracy"},
                {"model", p.model_path},
                {"book", p.book_path},
                {"ppl_ctx", p.ppl_ctx},
                {"ppl_windows", p.ppl_windows},
                {"mc_ctx", n_mc},
                {"passkey_ctxs", p.passkey_ctxs},
                {"passkey_depths", p.passkey_depths},
                {"results", results},
                {"passkey", passkey}};
    rep.plot.title = "hillinfer bench accuracy: every policy at each alpha against full";
    rep.plot.xlabel = "policy, alpha";
    rep.plot.ylabel = "accuracy; perplexity relative to full";
    rep.plot.series = {ppl, pk, rte, piqa};
    return rep;
}

}  // namespace hill
