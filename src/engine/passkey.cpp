#include "engine/passkey.h"

#include "core/error.h"
#include "core/sys_info.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <random>

namespace hill {

namespace {

// Plain words for the generated haystack: no digits, no "pass", "key" or "is".
constexpr std::array<const char *, 58> haystack_words = {
    "garden", "river",  "morning", "house", "stone",  "light",  "quiet",  "window", "bread",  "winter",
    "yellow", "mountain", "little", "old",  "green",  "long",   "road",   "small",  "happy",  "bird",
    "tree",   "cloud",  "rain",    "soft",  "warm",   "cold",   "walk",   "slowly", "under",  "over",
    "friend", "blue",   "table",   "chair", "book",   "letter", "evening", "summer", "bright", "dark",
    "forest", "field",  "farmer",  "boat",  "the",    "a",      "and",    "of",     "to",     "in",
    "was",    "he",     "she",     "they",  "sat",    "went",   "came",   "saw"};

constexpr const char * question = " What is the pass key? The pass key is";

std::string needle(const std::string & key) { return " The pass key is " + key + ". Remember it. "; }

// Whitespace runs become one space (a book's line breaks and indentation).
std::string one_line(const std::string & text) {
    std::string out;
    out.reserve(text.size());
    bool space = false;
    for (const char c : text) {
        if (std::isspace(static_cast<unsigned char>(c)) != 0) {
            space = !out.empty();
        } else {
            if (space) out += ' ';
            out += c;
            space = false;
        }
    }
    return out;
}

}  // namespace

std::string generated_haystack(uint64_t seed, size_t n_chars) {
    std::mt19937_64 rng(seed);
    std::string out;
    while (out.size() < n_chars) {
        const int n = 5 + int(rng() % 8);
        std::string sentence;
        for (int i = 0; i < n; ++i) {
            if (i > 0) sentence += ' ';
            sentence += haystack_words[rng() % haystack_words.size()];
        }
        sentence[0] = char(std::toupper(static_cast<unsigned char>(sentence[0])));
        if (!out.empty()) out += ' ';
        out += sentence + '.';
    }
    return out;
}

passkey_prompt make_passkey_prompt(const tokenizer & tok, const passkey_prompt_params & p) {
    if (!(p.depth >= 0.0 && p.depth <= 1.0)) fail_usage("the needle's depth must be in [0, 1], got {}", p.depth);
    std::mt19937_64 rng(p.seed ^ 0x9e3779b97f4a7c15ULL);
    passkey_prompt out;
    for (int i = 0; i < 5; ++i) out.passkey += char('0' + rng() % 10);
    const int64_t fixed = int64_t(tok.encode(needle(out.passkey) + question, true).size());
    const int64_t budget = p.n_tokens - fixed - 2;  // margin: tokens can merge across the joins
    if (budget < 16) {
        fail_usage("a passkey prompt of {} tokens leaves no room for a haystack (the needle and question take {})",
                   p.n_tokens, fixed);
    }
    // Enough haystack text: a generated one of ~4 characters per token, or the given text repeated.
    std::string hay = p.haystack.empty() ? generated_haystack(p.seed, size_t(budget) * 4) : one_line(p.haystack);
    if (hay.empty()) fail_usage("the haystack text is empty");
    while (int64_t(tok.encode(hay, false).size()) < budget) hay += ' ' + hay;
    // The longest prefix of the haystack within the budget (binary search over characters).
    size_t lo = 0, hi = hay.size();
    while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2;
        if (int64_t(tok.encode(std::string_view(hay).substr(0, mid), false).size()) <= budget) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    hay.resize(lo);
    // The needle goes at `depth` of the haystack, on a space so that words stay whole.
    size_t cut = size_t(p.depth * double(hay.size()) + 0.5);
    while (cut > 0 && cut < hay.size() && hay[cut] != ' ') ++cut;
    std::string head = hay.substr(0, cut), tail = hay.substr(std::min(cut, hay.size()));
    while (!head.empty() && head.back() == ' ') head.pop_back();
    while (!tail.empty() && tail.front() == ' ') tail.erase(0, 1);
    while (!tail.empty() && tail.back() == ' ') tail.pop_back();
    out.text = head + needle(out.passkey) + tail;
    while (!out.text.empty() && out.text.back() == ' ') out.text.pop_back();
    out.text += question;
    while (!out.text.empty() && out.text.front() == ' ') out.text.erase(0, 1);
    out.n_tokens = int64_t(tok.encode(out.text, true).size());
    return out;
}

passkey_answer answer_passkey(session & s, const std::string & passkey, int n_new) {
    const hill::model & m = s.model();
    const int32_t n_vocab = m.hp().n_vocab;
    passkey_answer a;
    for (int i = 0; i < n_new && a.digits.size() < 5; ++i) {
        const float * l = s.logits();
        const auto id = int32_t(std::max_element(l, l + n_vocab) - l);
        if (id == m.tokenizer().vocab().eos) break;
        a.ids.push_back(id);
        a.text = m.tokenizer().decode(a.ids);
        a.digits.clear();
        for (const char c : a.text) {
            if (std::isdigit(static_cast<unsigned char>(c)) != 0 && a.digits.size() < 5) a.digits += c;
        }
        if (a.digits.size() == 5 || s.n_past() >= s.n_ctx()) break;
        const int64_t t0 = time_us();
        s.eval(std::span<const int32_t>(&id, 1));
        a.step_us.push_back(time_us() - t0);
    }
    a.correct = a.digits == passkey;
    return a;
}

}  // namespace hill
