// Chat templates: the prompt text a chat model was trained on, for the common families, recognized
// from the model's Jinja template (GGUF `tokenizer.chat_template`, Hugging Face tokenizer_config.json
// `chat_template`) by its markers and formatted by our own code — no Jinja engine.
//
// Families (what each produces; S system, U user, A assistant message, [B]/[E] the vocabulary's BOS
// and EOS text; sources: the families' published templates, checked against the template texts in
// tests/test_chat_template.cpp):
//   llama2   [INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A [E][B][INST] U [/INST]    (U and A stripped)
//   llama3   <|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|> ... user ... then
//            <|start_header_id|>assistant<|end_header_id|>\n\n                 (contents trimmed)
//   chatml   <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n
//            (Qwen: a default system message written in the template is used without --system; Qwen3
//            and other templates that mention </think>: an earlier reply keeps only its text after
//            the last </think>, stripped of leading newlines)
//   mistral  [INST] S\n\nU[/INST] A[E][INST] U[/INST]                          (A trimmed)
//            variants seen in the template: ' [INST] ' (v1: " [INST] S\n\nU [/INST] A[E]") and
//            [SYSTEM_PROMPT] (v7: "[SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] U[/INST] A[E]")
//   gemma    <start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n
//            <start_of_turn>model\n                                       (contents trimmed)
//   phi3     <|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\nA<|end|>\n<|assistant|>\n
//   phi4     <|im_start|>system<|im_sep|>S<|im_end|><|im_start|>user<|im_sep|>U<|im_end|>
//            <|im_start|>assistant<|im_sep|>
//   deepseek S<｜User｜>U<｜Assistant｜>A<｜end▁of▁sentence｜><｜User｜>U<｜Assistant｜>
//            (V3/R1; a reply keeps only its text after the last </think>; a template whose
//            generation prompt opens <think>\n adds it)
//
// Where this deliberately differs from a published template:
// - The text never starts with BOS: the tokenizer adds it at the start of the conversation (its
//   vocab().add_bos), as llama.cpp does; a BOS inside the text (llama2's later turns) is written as
//   the vocabulary's BOS text, which encode_with_special() turns into the token.
// - The system message goes where the family's older templates put it, once, at the start (Mistral
//   v3 templates move it into the last user message on every turn, which would re-prefill the whole
//   conversation each turn); families without a system role (gemma, mistral) merge it into the first
//   user message.
// - Llama 3.1+ templates add a "Cutting Knowledge Date" system preamble and tool blocks: not written.
//
// Errors: an unknown family name or an unrecognized template is exit_code::usage naming the known
// families; a message with a role other than system (first only), user, assistant is exit_code::usage.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hill {

enum class chat_family { llama2, llama3, chatml, mistral, gemma, phi3, phi4, deepseek };

struct chat_message {
    std::string role;  // "system" (first message only), "user" or "assistant"
    std::string content;
};

class chat_template {
public:
    // The family named `name` (chat_template::family_names()), with its plain variant.
    static chat_template named(std::string_view name);
    // The family whose markers the Jinja text holds, with the variant details it shows (see the file
    // comment). Errors: no family recognized (exit_code::usage), naming the families and what to pass.
    static chat_template recognize(std::string_view jinja);
    // "llama2, llama3, chatml, mistral, gemma, phi3, phi4, deepseek"
    static std::string family_names();

    chat_family family() const { return family_; }
    std::string_view name() const;

    // The prompt text of `messages` (an optional system message first, then user and assistant
    // messages), followed, when add_generation_prompt, by what opens the assistant's reply. `bos` and
    // `eos` are the vocabulary's BOS and EOS texts, written where the family's template writes
    // bos_token / eos_token (llama2, mistral).
    std::string format(std::span<const chat_message> messages, bool add_generation_prompt, std::string_view bos = "<s>",
                       std::string_view eos = "</s>") const;

    // The family's own end-of-turn token ("<|im_end|>", "<|eot_id|>", ...); "" where it is the EOS.
    std::string_view end_of_turn() const;
    // The tokens that end an assistant turn in `v`: the family's end-of-turn token and the EOS.
    // Errors: the family's end-of-turn token is not in the vocabulary (exit_code::usage: the model
    // was not trained on this template), or neither it nor an EOS exists.
    std::vector<int32_t> end_of_turn_tokens(const vocab & v) const;
    // The control tokens the family's text holds (e.g. "<|im_start|>", "<|im_end|>"), BOS and EOS
    // aside: what a vocabulary needs to speak it (make-model's chat models).
    std::vector<std::string> special_tokens() const;
    // A short Jinja template of the family that recognize() maps back to it (what make-model writes).
    std::string reference_jinja() const;

private:
    explicit chat_template(chat_family f) : family_(f) {}

    chat_family family_;
    std::string default_system_;    // chatml: the template's own system message, used without one
    bool strip_reasoning_ = false;  // chatml, deepseek: earlier replies lose their <think> part
    bool open_think_ = false;       // deepseek: the generation prompt opens "<think>\n"
    bool mistral_v1_ = false;       // mistral: " [INST] U [/INST]"
    bool mistral_v7_ = false;       // mistral: [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT]
};

// The chat template a model ships: GGUF metadata `tokenizer.chat_template`, or in a Hugging Face
// folder tokenizer_config.json's `chat_template` (a string, or a list of {name, template} of which
// "default" is taken). "" when there is none (llama2.c checkpoints have none). Errors: an unreadable
// or malformed file (exit_code::bad_input, naming it and the field).
std::string read_chat_template(const std::string & model_path);

}  // namespace hill
