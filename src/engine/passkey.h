// Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention"): a 5-digit key is hidden in a
// long haystack at a chosen depth and asked for at the end. A model answers only if attention
// finds the few needle tokens among all the others, so the task tests that sparse attention over a
// KV cache that lives mostly on SSD still finds what matters (docs/passkey.md).
//
// Prompt: haystack[0, cut) + " The pass key is NNNNN. Remember it. " + haystack[cut, end) +
// " What is the pass key? The pass key is" — the haystack cut on a space at `depth` of its length,
// and trimmed so that the whole prompt is at most n_tokens tokens under the model's tokenizer.
#pragma once

#include "engine/session.h"
#include "tokenizer/tokenizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hill {

struct passkey_prompt_params {
    int64_t n_tokens = 4096;   // the prompt's length at most, in tokens (BOS included)
    double depth = 0.5;        // where the needle goes, in [0, 1] of the haystack
    uint64_t seed = 1;         // the generated haystack and the key
    std::string haystack;      // text to take the haystack from (repeated when short); empty: generated
};

struct passkey_prompt {
    std::string text;          // the prompt
    std::string passkey;       // 5 digits
    int64_t n_tokens = 0;      // tokens of text, BOS included
};

// Random sentences of common words from a built-in word list, about n_chars long. The list holds no
// digits and none of the needle's words ("pass", "key", "is"), so no part of the haystack resembles
// the needle.
std::string generated_haystack(uint64_t seed, size_t n_chars);

// Errors (exit_code::usage): depth outside [0, 1]; n_tokens too small for the needle and question.
passkey_prompt make_passkey_prompt(const tokenizer & tok, const passkey_prompt_params & p);

struct passkey_answer {
    std::string text;          // the greedy continuation, decoded
    std::string digits;        // the first 5 digits in it (fewer if it has fewer)
    bool correct = false;      // digits == the passkey
    std::vector<int32_t> ids;  // the tokens of text, in order
    // Wall time of each decode step the answer ran (us): step i evaluated ids[i] (the last token of
    // ids is predicted but not evaluated when the answer stopped on it), so replaying ids[0, n) with
    // n = step_us.size() repeats the same steps.
    std::vector<int64_t> step_us;
};

// Greedy continuation of the session after the prompt (the caller evaluated it): up to n_new tokens,
// stopping early at EOS, the context's end, or once 5 digits were produced.
passkey_answer answer_passkey(session & s, const std::string & passkey, int n_new = 8);

}  // namespace hill
