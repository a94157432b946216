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

int hint_gate::round_of(int64_t s) const {
    const int64_t k = s - probe_start_;
    return k >= 0 && k < 4 * probe_steps ? int(k / probe_steps) : -1;
}

bool hint_gate::arm_on(bool next_step) const {
    const int r = round_of(step_ + (next_step ? 1 : 0));
    const bool other = r == 1 || r == 2;  // A B B A
    return other ? !choice_on_ : choice_on_;
}

void hint_gate::end_step(double seconds_per_token) {
    HILL_ASSERT(seconds_per_token >= 0.0);
    for (size_t il = 0; il < size_t(n_layer_); ++il) {
        if (named_[il] > 0) {
            const float p = float(double(hits_[il]) / double(named_[il]));
            precision_[il] += 0.5f * (p - precision_[il]);
        }
    }
    discard_step();
    if (seconds_per_token == 0.0) return;
    const int r = round_of(step_);
    ++step_;
    if (r < 0) return;
    round_times_.push_back(seconds_per_token);
    if (int64_t(round_times_.size()) < probe_steps) return;
    // The round's median (the mean of the middle two of an even count): one stalled step does not decide.
    std::sort(round_times_.begin(), round_times_.end());
    const size_t m = round_times_.size() / 2;
    const double median =
        round_times_.size() % 2 == 1 ? round_times_[m] : 0.5 * (round_times_[m - 1] + round_times_[m]);
    round_times_.clear();
    arm_time_[r == 1 || r == 2 ? 1 : 0] += median;
    if (r < 3) return;
    if (arm_time_[1] < (1.0 - min_gain) * arm_time_[0]) choice_on_ = !choice_on_;
    arm_time_[0] = arm_time_[1] = 0.0;
    probe_start_ += reprobe_every;
}

void hint_gate::discard_step() {
    for (std::vector<int32_t> & h : hint_) h.clear();
    std::fill(named_.begin(), named_.end(), 0);
    std::fill(hits_.begin(), hits_.end(), 0);
}

}  // namespace hill
