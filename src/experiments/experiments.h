// The paper's experiments (HillInfer paper §5; DESIGN.md §7), one function each, behind
// `hillinfer bench latency|batch|beta|ablation|accuracy` (docs/experiments.md):
//
//   beta      step time over a sweep of the hot/cold capacity ratio β, the planner's β beside it (§5.5)
//   ablation  the prefetch-based baseline, + HKM, + HKM & APP (§5.4, Figure 16)
//   latency   end-to-end latency (prefill + N decode steps) and decode speedup per policy against the
//             context length, batch 8 (§5.2)
//   batch     latency and throughput over batch sizes at 1,920 prompt + 128 generated tokens (§5.3)
//   accuracy  perplexity, passkey retrieval, RTE and PIQA log-likelihood accuracy of every policy at
//             α 0.1 and 0.2 against `full` (§5.1, Figure 11)
//
// beta and ablation run the decode-step benchmark (experiments/step_bench.h) over its synthetic
// workload; latency and batch run a random model of a paper model's shape through the engine
// (engine/context.h); accuracy runs the trained models. Each returns an experiment_report: the
// results as JSON (numbers as numbers, null where undefined), a plot and the printed table.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "experiments/plot.h"
#include "experiments/step_bench.h"
#include "sched/calibration.h"

namespace hill {

struct experiment_report {
    nlohmann::json json;  // {"experiment": name, ..., "results": [...]}
    plot_spec plot;
};

// Progress lines (one finished configuration each) for the caller to print.
using experiment_log = std::function<void(const std::string &)>;

// Every registered policy (policy/registry.cpp), in registry order.
std::vector<std::string> registered_policies();

// ---- beta and ablation: the decode-step benchmark --------------------------------------------------

struct beta_params {
    workload_params workload;  // attention shape (default: LLaMA-2-7B's heads, 2 layers)
    int64_t ctx = 32768;
    double cold = 0.75;
    std::string profile = "smartssd";                                        // emulator device profile
    std::vector<double> betas = {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 1.0 / 3};  // 75% cold: M0 holds at most 1/3
    int n_steps = 5, n_warmup = 24;
    std::string kv_dir;
    std::function<calibration(const csd::device_profile &)> calibrate;  // empty: default_calibration
};
// Runs policy hillinfer on the emulator at each β and at the planner's. JSON: points [{beta_config, beta,
// step_ms}], planner {beta, step_ms, beta_eq4}, best {beta, step_ms}, planner_off_best. Errors: as
// run_step_bench.
experiment_report run_beta(const beta_params & p, thread_pool & pool, const experiment_log & log);

struct ablation_params {
    workload_params workload;
    std::vector<int64_t> ctxs = {32768, 131072};
    double cold = 0.75;
    std::string profile = "smartssd";
    int n_steps = 5, n_warmup = 24;
    std::string kv_dir;
    std::function<calibration(const csd::device_profile &)> calibrate;
};
// Per context length three configurations, 75% of the KV cold:
//   baseline   infinigen (the prefetch-based baseline) over the plain SSD with the pipeline's prefetch;
//   +HKM       hillinfer (hkm placement) on the emulator with the hot pool at the whole budget (β fixed
//              at what M0 holds: no APP balance);
//   +HKM&APP   hillinfer on the emulator with the planner's β (the system).
// JSON results [{ctx, variant, policy, storage, step_ms, reduction_vs_baseline}].
experiment_report run_ablation(const ablation_params & p, thread_pool & pool, const experiment_log & log);

// ---- latency and batch: end to end through the engine ----------------------------------------------

// A paper model's shape, written as a random llama-family model (model/synthetic_model.h).
struct model_shape {
    const char * name;
    const char * arch;
    int32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv;
};
// opt-6.7b, llama-2-7b (= longchat-7b), llama-13b, qwen-7b, and tiny (tests and --quick). OPT is written
// as a llama-architecture model of OPT's shape (the shape is what the KV cache sees).
const std::vector<model_shape> & model_shapes();
// Errors: an unknown name (usage, listing them).
const model_shape & find_shape(const std::string & name);

struct e2e_params {
    std::string shape = "llama-2-7b";
    int n_layer = 2;               // layers written (the shape's count reduced to fit; stated)
    std::string weights = "q4_0";  // weight type of the matrices
    std::vector<int64_t> ctxs = {4096, 8192, 16384, 32768, 65536, 131072};  // prompt tokens per sequence
    std::vector<int> batches = {8};
    int n_gen = 32;                     // decode steps after the prompt
    std::vector<std::string> policies;  // empty: every registered policy
    double alpha = 0.2;
    std::vector<double> colds = {0.0, 0.75};
    std::vector<std::string> storages = {"plain", "emulator"};
    std::string profile = "smartssd";
    std::string text_dir;  // *.txt books, read in name order and cycled; empty: generated text
    std::string kv_dir;
    std::function<calibration(const csd::device_profile &)> calibrate;
    // Every sequence of a batch gets the first sequence's prompt: one prefill per prompt length, counted
    // once per sequence in prefill_s (what distinct prompts would cost, minus the attention's dependence on
    // the text, which a random model does not have); for lengths whose dense prefill of every prompt would
    // take hours on the machine.
    bool same_prompt = false;
};
// For each prompt length, each sequence of the largest batch gets its own slice of the books (tokens
// [i·ctx, (i+1)·ctx) of their concatenation), prefilled once, densely and in RAM, with its time measured
// and its KV kept; every configuration (policy, cold share, storage, batch size) then imports that KV
// (context::import_kv) into a context of `batch` sequences under its host budget (cold share c: (1 − c)
// of the tokens hot, at least the sinks, windows and appends, plus the policy's scoring copy) and decodes n_gen steps
// of the whole batch (greedy). End-to-end latency = the batch's prefill times + its decode time. JSON
// results [{ctx, batch, cold, storage, policy, prefill_s, decode_s, e2e_s, step_ms, tokens_per_s}] and
// speedups [{ctx, batch, cold, storage, baseline, decode_speedup, e2e_reduction}] of hillinfer over each
// other policy. The KV of the largest batch's prompts is held in RAM: batch·ctx·(KV bytes per token).
// Errors: usage for bad parameters; what the engine throws.
experiment_report run_e2e(const std::string & name, const e2e_params & p, thread_pool & pool,
                          const experiment_log & log);

// ---- accuracy -------------------------------------------------------------------------------------

struct accuracy_params {
    std::string model_path;             // a trained model (GGUF or llama2.c with its tokenizer)
    std::string tokenizer_path;         // llama2.c: its tokenizer.bin
    std::string book_path;              // perplexity text
    std::string eval_dir;               // holds rte/val.jsonl, piqa/valid.jsonl, piqa/valid-labels.lst
    std::vector<std::string> policies;  // empty: every registered policy
    std::vector<double> alphas = {0.1, 0.2};
    int32_t ppl_ctx = 512;  // perplexity window (BOS included)
    int ppl_windows = 4;
    std::vector<int64_t> passkey_ctxs = {1024, 4096, 16384};
    std::vector<double> passkey_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
    int n_rte = 0, n_piqa = 0;  // items (0: all)
    std::string kv_dir;         // where the passkey model is written
};
// Every policy at every α and `full` (once). Perplexity windows as engine/perplexity.h; passkey prompts
// (engine/passkey.h) on the passkey model, prefilled once per (length, depth) and decoded under every
// policy from that prefill (truncated back in between); RTE and PIQA scored as lm-eval-harness does
// (the sum of the continuation's log-probabilities per choice, the larger wins; RTE: "{premise}\nQuestion:
// {hypothesis} True or False?\nAnswer:" with " True" / " False"; PIQA: "Question: {goal}\nAnswer:" with
// " {sol}"), each item's context prefilled once and every policy's continuation scored by decode steps
// from it. JSON results [{policy, alpha, perplexity, passkey_accuracy, rte_accuracy, piqa_accuracy,
// rte_agreement, piqa_agreement (share of items where the choice equals full's)}] and passkey [{policy,
// alpha, ctx, depth, correct}]. Errors: missing files (usage, naming them); what the engine throws.
experiment_report run_accuracy(const accuracy_params & p, thread_pool & pool, const experiment_log & log);

}  // namespace hill
