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
//   g.end_step();                       // a completed step: folds its counts into the precisions
//   g.discard_step();                   // a failed step: forgets them
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

    hint_gate(int n_seq, int n_layer);

    // True when layer il's hints are sent.
    bool open(int il) const { return precision_[size_t(il)] >= min_precision; }
    // Layer il's precision so far (1 before any hint was measured).
    float precision(int il) const { return precision_[size_t(il)]; }

    // This step's hint of (seq, il): the cold positions it names, ascending (copied).
    void named(int seq, int il, std::span<const int32_t> positions);
    // (seq, il)'s read pass wants `positions` (ascending): the hint's positions among them are its hits.
    // The hint is then forgotten (a second pass of the same step counts nothing).
    void wanted(int seq, int il, std::span<const int32_t> positions);
    // The step completed: each layer with a measured hint takes the step's precision into its average.
    void end_step();
    // The step failed: its hints and counts are forgotten, the precisions stay.
    void discard_step();

private:
    int n_layer_;
    std::vector<std::vector<int32_t>> hint_;  // [n_seq, n_layer] the step's hint, ascending
    std::vector<uint64_t> named_, hits_;      // [n_layer] this step's hinted positions measured, and hits
    std::vector<float> precision_;            // [n_layer]
};

}  // namespace hill
