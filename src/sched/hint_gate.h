// Whether the pipeline's prefetch hints pay, per layer (HillInfer paper §4.3). The decode step hints the
// storage device with the previous step's selection of a layer, which pays when consecutive steps select
// mostly the same tokens (about 90% on a trained model: docs/benchmarks.md). Where the selection jumps
// from step to step — a random model's layers, a layer of diffuse attention — most hinted tokens are read
// in vain, and on a plain SSD those reads take the bandwidth the step's own reads need (a random
// LLaMA-2-7B-shaped model at 8K tokens: 81% of the prefetched tokens unused, docs/kv.md).
//
// The gate measures each layer's precision: of the cold tokens a hint names, the share that the layer's
// read pass then wants. It is an exponential moving average over steps (weight 1/2 for the newest step,
// starting at 1), and a layer whose precision is below min_precision is not hinted: a hint that reads
// more pages in vain than it reads ahead costs more disk time than it hides. The hint is still formed
// and measured every step while the gate is shut, so hinting resumes when the selection settles.
//
//   hint_gate g(n_seq, n_layer);
//   g.named(seq, il, disk_positions);   // the step's hint of (seq, il) (ascending), sent or not
//   if (g.open(il)) device.prefetch(...);
//   g.wanted(seq, il, read_positions);  // the layer's read pass (ascending): counts the hint's hits
//   g.end_step(seconds / tokens);       // a completed step: folds its counts into the precisions, its
//                                       // time per decoded token into the cost probe
//   g.discard_step();                   // a failed step: forgets them
//
// Whether reading ahead pays on this machine (the cost probe). Precision says whether a hint reads what
// its layer then wants, not whether reading it early saves time: where a read costs the CPU a lot (a
// virtualized disk, whose I/O takes kernel time on the cores the host scores on), reads running beside
// the host's scoring slow it more than they shorten the read pass that follows — on the 2-core test VM
// the hint doubled the 128K scoring stage and `--no-prefetch` was faster in every configuration of one
// session, while on the slower disk of another the hint paid (docs/benchmarks.md, "Where a 2-core
// machine's time goes"). So the gate measures it. A probe is 4 rounds of probe_steps completed steps in
// the order A B B A, A the current choice (hints on at first, the paper's pipeline), B the other; the
// order cancels a drift that is linear in time, such as a context growing by a token per step. Each
// round's median of the step times per decoded token is taken, each arm's two rounds averaged, and the
// choice turns to B when B's steps were faster by min_gain or more. Probes start at step 0 and then
// every reprobe_every steps, so a wrong choice (the VM's speed changed, the batch changed) is undone.
// Per layer, hints are sent when the step's arm has them on and the layer's precision is at least
// min_precision; results never depend on it (a hint is never wrong).
//
// Thread-safety: none; the decode step's owner thread calls it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace hill {

class hint_gate {
public:
    // Below this precision a layer's hints read more unused pages than used ones.
    static constexpr float min_precision = 0.5f;
    // The cost probe: completed steps per round, steps from one probe's start to the next's, and the share
    // by which the other arm's steps must be faster to be chosen (a smaller difference is noise on a VM).
    static constexpr int64_t probe_steps = 4;
    static constexpr int64_t reprobe_every = 512;
    static constexpr double min_gain = 0.05;

    hint_gate(int n_seq, int n_layer);

    // True when layer il's hints are sent in this step (next_step: in the next one, for the pipeline's
    // wrap-around hint): that step's arm has hints on and the layer's precision is at least min_precision.
    bool open(int il, bool next_step = false) const {
        return arm_on(next_step) && precision_[size_t(il)] >= min_precision;
    }
    // This step's (or the next one's) arm of the cost probe: hints on, or off for every layer.
    bool arm_on(bool next_step = false) const;
    // Whether this step is one of a probe's.
    bool probing() const { return round_of(step_) >= 0; }
    // The cost probe's choice so far: the steps with hints were not slower (true before any probe ended).
    bool hints_pay() const { return choice_on_; }
    // Layer il's precision so far (1 before any hint was measured).
    float precision(int il) const { return precision_[size_t(il)]; }

    // This step's hint of (seq, il): the cold positions it names, ascending (copied).
    void named(int seq, int il, std::span<const int32_t> positions);
    // (seq, il)'s read pass wants `positions` (ascending): the hint's positions among them are its hits.
    // The hint is then forgotten (a second pass of the same step counts nothing).
    void wanted(int seq, int il, std::span<const int32_t> positions);
    // The step completed in seconds_per_token (its time over the tokens it decoded): each layer with a
    // measured hint takes the step's precision into its average, and the cost probe the time; 0: the step
    // could send no hint (no cold tier, hints ignored), and the probe does not count it. Asserts: >= 0.
    void end_step(double seconds_per_token);
    // The step failed: its hints and counts are forgotten, the precisions stay.
    void discard_step();

private:
    int n_layer_;
    std::vector<std::vector<int32_t>> hint_;  // [n_seq, n_layer] the step's hint, ascending
    std::vector<uint64_t> named_, hits_;      // [n_layer] this step's hinted positions measured, and hits
    std::vector<float> precision_;            // [n_layer]
    // The cost probe.
    int64_t step_ = 0;         // completed steps
    int64_t probe_start_ = 0;  // the current or next probe's first step
    bool choice_on_ = true;
    std::vector<double> round_times_;  // the current round's step times per token
    double arm_time_[2] = {0.0, 0.0};  // [A, B]: the sum of the probe's round medians
    // The probe round step s falls in (0..3, A B B A), or -1 outside a probe.
    int round_of(int64_t s) const;
};

}  // namespace hill
