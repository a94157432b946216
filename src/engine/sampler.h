// Next-token sampling from logits. Order of operations (as llama.cpp's default chain):
// banned tokens out (--ignore-eos) -> repetition penalty -> (temperature <= 0: argmax) -> top-k -> softmax(logits / temperature) ->
// top-p (nucleus, Holtzman et al. 2019) -> min-p (relative to the top probability) -> draw.
// Ties in argmax go to the lowest id. The candidate buffer is allocated once.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <utility>
#include <vector>

namespace hill {

struct sampler_params {
    float temperature = 0.8f;    // <= 0: greedy
    int32_t top_k = 40;          // <= 0: off
    float top_p = 0.95f;         // 1: off; (0, 1]
    float min_p = 0.05f;         // 0: off; [0, 1]
    float repeat_penalty = 1.0f; // 1: off; > 0. Logits of recent tokens: l > 0 ? l / p : l * p
    int32_t repeat_last_n = 64;  // how many recent tokens the penalty looks at
    uint64_t seed = 0;
    std::vector<int32_t> banned; // token ids never sampled (their logits become -inf; ids outside the vocabulary are
                                 // ignored): the end tokens under --ignore-eos
};

// Checks ranges; throws hill::error(exit_code::usage) naming the flag for a bad value.
void validate(const sampler_params & p);

class sampler {
public:
    sampler(const sampler_params & p, int32_t n_vocab);

    // Picks the next token from logits f32 [n_vocab] (modified in place by the penalty).
    int32_t sample(float * logits);

    // Records a token of the sequence (prompt or generated) for the repetition penalty.
    void accept(int32_t token);

private:
    sampler_params p_;
    int32_t n_vocab_;
    std::mt19937_64 rng_;
    std::vector<std::pair<float, int32_t>> cand_;  // [n_vocab] (logit or probability, id)
    std::deque<int32_t> recent_;                   // up to repeat_last_n tokens
    std::vector<int32_t> seen_;                    // scratch: distinct recent tokens
};

}  // namespace hill
