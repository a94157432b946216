#include "tokenizer/bpe_pre_tokenizer.h"

#include "tokenizer/bpe_tokenizer.h"

namespace hill {

namespace {

// Pieces shared by several patterns. Code points are written \x{...}: some of these characters
// (U+2126 OHM SIGN, U+F900 CJK COMPATIBILITY IDEOGRAPH) change under Unicode normalization, which
// an editor may apply to a literal.

// Cased letters (Lu, Ll, Lt) as DeepSeek-LLM's tokenizer lists them (Unicode of its time).
#define HILL_DEEPSEEK_LETTERS                                                                                       \
    R"re(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})re"      \
    R"re(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})re"        \
    R"re(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})re"         \
    R"re(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})re" \
    R"re(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})re"  \
    R"re(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})re"  \
    R"re(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})re"  \
    R"re(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})re"   \
    R"re(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})re"   \
    R"re(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})re"  \
    R"re(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})re" \
    R"re(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})re"        \
    R"re(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})re"

// DeepSeek-LLM/Coder: CJK Unified Ideographs (to U+9FA5), U+0800..U+4E00, Hangul syllables.
#define HILL_DEEPSEEK_CJK R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re"
// DeepSeek-V3 and kin: CJK Unified Ideographs (to U+9FA5), Hiragana, Katakana.
#define HILL_DEEPSEEK3_CJK R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re"
// An ASCII punctuation character glued to the ASCII letters after it (DeepSeek-V3, AFMoE, Spark).
#define HILL_PUNCT_ASCII_WORD R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)re"
// Contractions, case-insensitive.
#define HILL_CONTRACTIONS R"re((?i:'s|'t|'re|'ve|'m|'ll|'d))re"
// GPT-4o's words: an optional leading non-letter, then an uppercase run and a lowercase run.
#define HILL_GPT4O_WORDS                                                                                    \
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)re" HILL_CONTRACTIONS \
    R"re(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)re" HILL_CONTRACTIONS "?"
// Poro, BLOOM, GPT-3-Finnish: runs of anything but whitespace and sentence punctuation.
#define HILL_PORO R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re"

// Regex lists, one per llama.cpp pre-type (several names share one).
constexpr const char * k_gpt2[] = {k_bpe_pattern_gpt2};
constexpr const char * k_llama3[] = {k_bpe_pattern_llama3};
constexpr const char * k_qwen2[] = {k_bpe_pattern_qwen2};
constexpr const char * k_default[] = {
    R"re([\p{P}\$\+<=>\^~\|]+)re",
    k_bpe_pattern_gpt2,
    R"re(\p{N}+)re",
    R"re([0-9][0-9][0-9])re",
};
constexpr const char * k_falcon[] = {
    R"re([\p{P}\$\+<=>\^~\|`]+)re",
    k_bpe_pattern_gpt2,
    R"re([0-9][0-9][0-9])re",
};
constexpr const char * k_starcoder[] = {R"re(\p{N})re", k_bpe_pattern_gpt2};  // digits one by one
constexpr const char * k_deepseek_llm[] = {
    R"re([\r\n])re",
    R"re(\s?[)re" HILL_DEEPSEEK_LETTERS R"re(]+)re",
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
    R"re(\s+$)re",
    HILL_DEEPSEEK_CJK,
    R"re(\p{N}+)re",
};
constexpr const char * k_deepseek_coder[] = {
    R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", HILL_DEEPSEEK_CJK, R"re(\p{N})re",
};
constexpr const char * k_deepseek3[] = {
    R"re(\p{N}{1,3})re",
    HILL_DEEPSEEK3_CJK,
    HILL_PUNCT_ASCII_WORD
    R"re(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_spark2_5[] = {
    R"re(\p{N}{1,3})re",
    HILL_DEEPSEEK3_CJK,
    HILL_PUNCT_ASCII_WORD R"re(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)re",
    R"re(\p{N})re",
};
constexpr const char * k_youtu[] = {
    // Hangul; CJK punctuation; Bopomofo; CJK ideographs and kana.
    R"re([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+)re"
    R"re(|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C})re"
    R"re(\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+)re"
    R"re(|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
    HILL_GPT4O_WORDS R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_jais2[] = {
    HILL_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)re"
    R"re(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S))re"
    R"re(|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re",
};
constexpr const char * k_qwen35[] = {
    HILL_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_poro[] = {HILL_PORO};
constexpr const char * k_viking[] = {HILL_PORO, R"re(\p{N})re"};
constexpr const char * k_tekken[] = {
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)re"
    R"re(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)re"
    R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_chameleon[] = {
    R"re(<sentinel:[0-9]+>)re",    R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re",
    R"re(([\t\n]|    |  ))re",     R"re(\p{N})re",
    R"re([\p{P}!-/:-@\[-`{-~])re", k_bpe_pattern_gpt2,
};
constexpr const char * k_gpt4o[] = {
    HILL_GPT4O_WORDS R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
// llama.cpp's own pattern (no original given): gpt-4o's with combining marks counted as letters.
constexpr const char * k_granite_embed_multi[] = {
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+)re"
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)re"
    R"re(|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*)re"
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)re"
    R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_tiny_aya[] = {
    R"re(\d{1,3}(?=(?:\d{3})*\b))re",
    HILL_GPT4O_WORDS R"re(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_kimi_k2[] = {
    R"re(\p{Han}+)re"
    R"re(|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*)re"
    R"re((?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+)re" HILL_CONTRACTIONS
    R"re(?|[^\r\n\p{L}\p{N}]?(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+)re"
    R"re((?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*)re" HILL_CONTRACTIONS
    R"re(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
// The second pattern matches only empty strings: it cuts digit runs into threes from the right.
constexpr const char * k_superbpe[] = {R"re(\p{N}+)re", R"re((?=(\d{3})+(?!\d)))re"};
constexpr const char * k_bailingmoe[] = {
    R"re('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re",
};
constexpr const char * k_seed_coder[] = {
    HILL_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_ufakzeka[] = {
    // Qwen2's without the contractions (Turkish suffixes stay)
    R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_afmoe[] = {
    R"re(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))re",
    // CJK, kana, Kangxi radicals, Thai, Lao, Khmer, Myanmar, Hangul.
    R"re([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F})re"
    R"re(\x{2F00}-\x{2FDF}\x{E00}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F})re"
    R"re(\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+)re",
    HILL_PUNCT_ASCII_WORD
    R"re(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};
constexpr const char * k_lines[] = {R"re([^\n]+|[\n]+)re"};  // SentencePiece style: lines, newline runs
constexpr const char * k_laguna[] = {R"re([^\n]+|[\n]+)re", k_bpe_pattern_qwen2};
constexpr const char * k_exaone_moe[] = {
    HILL_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+)re"
                      R"re(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re",
};
constexpr const char * k_minicpm5[] = {
    R"re(\p{N}{1,3})re",
    HILL_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
};

#undef HILL_DEEPSEEK_LETTERS
#undef HILL_DEEPSEEK_CJK
#undef HILL_DEEPSEEK3_CJK
#undef HILL_PUNCT_ASCII_WORD
#undef HILL_CONTRACTIONS
#undef HILL_GPT4O_WORDS
#undef HILL_PORO

// Shorthands for the table: name, patterns, then the flags.
constexpr bpe_pre_tokenizer pre(std::string_view name, std::span<const char * const> p) {
    return {name, p};
}
constexpr bpe_pre_tokenizer pre_im(std::string_view name, std::span<const char * const> p) {  // ignore_merges
    return {name, p, true};
}
constexpr bpe_pre_tokenizer pre_bos(std::string_view name, std::span<const char * const> p) {  // + add_bos
    return {name, p, true, true};
}
constexpr bpe_pre_tokenizer refused(std::string_view name, const char * why) {
    return {.name = name, .unsupported = why};
}

const bpe_pre_tokenizer k_pre_tokenizers[] = {
    pre("default", k_default),
    pre_im("minicpm5", k_minicpm5),
    // Llama-3 and the models that reuse its tokenizer.
    pre_bos("llama3", k_llama3),
    pre_bos("llama-v3", k_llama3),
    pre_bos("llama-bpe", k_llama3),
    pre_bos("falcon3", k_llama3),
    pre_bos("falcon-h1", k_llama3),
    pre_bos("pixtral", k_llama3),
    pre_bos("midm-2.0", k_llama3),
    pre_bos("lfm2", k_llama3),
    pre_bos("jina-v5-nano", k_llama3),
    pre("deepseek-llm", k_deepseek_llm),
    pre("deepseek-coder", k_deepseek_coder),
    pre("deepseek-v3", k_deepseek3),
    pre("spark2_5", k_spark2_5),
    pre_im("youtu", k_youtu),
    pre("falcon", k_falcon),
    pre("mpt", k_gpt2),
    pre("starcoder", k_starcoder),
    pre("gpt-2", k_gpt2),
    pre("phi-2", k_gpt2),
    pre("jina-es", k_gpt2),
    pre("jina-de", k_gpt2),
    pre("gigachat", k_gpt2),
    pre("jina-v2-es", k_gpt2),
    pre("jina-v2-de", k_gpt2),
    pre("a.x-4.0", k_gpt2),
    pre("mellum", k_gpt2),
    pre("modern-bert", k_gpt2),
    pre("jais-2", k_jais2),
    {.name = "gemma4",
     .patterns = k_lines,
     .add_bos = true,
     .byte_level = false,
     .force_bos = true,
     .whole_newline_runs = true},
    {.name = "granite-embed-multi-311m",
     .patterns = k_lines,
     .add_bos = true,
     .byte_level = false,
     .force_bos = true,
     .whole_newline_runs = true},
    {.name = "sarvam-moe", .patterns = k_lines, .byte_level = false},
    pre("jina-v1-en", k_gpt2),  // these three also append a separator token (embedding models)
    pre("jina-v2-code", k_gpt2),
    pre("roberta-bpe", k_gpt2),
    refused("whitespace", "the whitespace pre-tokenizer (an embedding model's, dropping whitespace) is not supported"),
    pre("refact", k_starcoder),
    pre("command-r", k_starcoder),
    pre("qwen2", k_qwen2),
    pre("deepseek-r1-qwen", k_qwen2),
    pre("kormo", k_qwen2),
    pre("f2llmv2", k_qwen2),
    pre("qwen35", k_qwen35),
    pre("stablelm2", k_qwen2),
    pre("olmo", k_gpt2),
    pre("dbrx", k_llama3),
    pre("smaug-bpe", k_llama3),
    pre("poro-chat", k_poro),
    {"glm4", k_llama3, false, false, true},
    {"chatglm-bpe", k_llama3, false, false, true},
    pre("viking", k_viking),
    pre("jais", k_gpt2),
    pre_bos("tekken", k_tekken),
    pre("smollm", k_starcoder),
    pre("codeshell", k_starcoder),
    pre("bloom", k_poro),
    pre("gpt3-finnish", k_poro),
    pre("exaone", k_starcoder),
    pre("exaone4", k_gpt2),
    pre("exaone-moe", k_exaone_moe),
    {"chameleon", k_chameleon, false, true},
    pre("minerva-7b", k_starcoder),
    pre("megrez", k_qwen2),
    pre("gpt-4o", k_gpt4o),
    pre("llama4", k_gpt4o),
    pre("kanana2", k_gpt4o),
    pre("talkie", k_gpt4o),
    pre_im("granite-embed-multi-97m", k_granite_embed_multi),
    pre("tiny_aya", k_tiny_aya),
    pre("cohere2moe", k_tiny_aya),
    pre("superbpe", k_superbpe),
    pre("trillion", k_gpt2),
    pre("granite-docling", k_gpt2),
    pre("bailingmoe", k_bailingmoe),
    pre("bailingmoe2", k_bailingmoe),
    pre("llada-moe", k_bailingmoe),
    pre("seed-coder", k_seed_coder),
    pre("hunyuan", k_qwen2),
    pre("hunyuan-dense", k_deepseek3),
    pre("hy_v4", k_deepseek3),
    pre("joyai-llm", k_deepseek3),
    pre("kimi-k2", k_kimi_k2),
    pre("ufakzeka", k_ufakzeka),
    pre("grok-2", k_qwen2),
    pre("afmoe", k_afmoe),
    pre("laguna", k_laguna),
    pre("minimax-m2", k_gpt4o),
    pre("solar-open", k_qwen2),
    pre("mellum2", k_starcoder),
};

}  // namespace

std::span<const bpe_pre_tokenizer> bpe_pre_tokenizers() {
    return k_pre_tokenizers;
}

const bpe_pre_tokenizer * find_bpe_pre_tokenizer(std::string_view name) {
    for (const bpe_pre_tokenizer & p : k_pre_tokenizers) {
        if (p.name == name) return &p;
    }
    return nullptr;
}

}  // namespace hill
