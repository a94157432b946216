#include "sched/hint_gate.h"

#include "core/error.h"

#include <algorithm>

namespace hill {

hint_gate::hint_gate(int n_seq, int n_layer)
    : n_layer_(n_layer),
      hint_(size_t(n_seq) * size_t(n_layer)),
      named_(size_t(n_layer), 0),
      hits_(size_t(n_layer), 0),
      precision_(size_t(n_layer), 1.0f) {
    HILL_ASSERT(n_seq >= 1 && n_layer >= 1);
}

void hint_gate::named(int seq, int il, std::span<const int32_t> positions) {
    hint_[size_t(seq) * size_t(n_layer_) + size_t(il)].assign(positions.begin(), positions.end());
}

void hint_gate::wanted(int seq, int il, std::span<const int32_t> positions) {
    std::vector<int32_t> & h = hint_[size_t(seq) * size_t(n_layer_) + size_t(il)];
    if (h.empty()) return;
    uint64_t hits = 0;
    size_t i = 0, j = 0;
    while (i < h.size() && j < positions.size()) {  // both ascending
        if (h[i] < positions[j]) {
            ++i;
        } else if (positions[j] < h[i]) {
            ++j;
        } else {
            ++hits;
            ++i;
            ++j;
        }
    }
    named_[size_t(il)] += h.size();
    hits_[size_t(il)] += hits;
    h.clear();
}

void hint_gate::end_step() {
    for (size_t il = 0; il < size_t(n_layer_); ++il) {
        if (named_[il] > 0) {
            const float p = float(double(hits_[il]) / double(named_[il]));
            precision_[il] += 0.5f * (p - precision_[il]);
        }
    }
    discard_step();
}

void hint_gate::discard_step() {
    for (std::vector<int32_t> & h : hint_) h.clear();
    std::fill(named_.begin(), named_.end(), 0);
    std::fill(hits_.begin(), hits_.end(), 0);
}

}  // namespace hill
