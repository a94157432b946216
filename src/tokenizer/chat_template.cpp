#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "format/gguf_file.h"
#include "format/json_file.h"

namespace hill {

namespace {

struct family_info {
    chat_family family;
    const char * name;
};

constexpr std::array<family_info, 8> k_families = {{
    {chat_family::llama2, "llama2"},
    {chat_family::llama3, "llama3"},
    {chat_family::chatml, "chatml"},
    {chat_family::mistral, "mistral"},
    {chat_family::gemma, "gemma"},
    {chat_family::phi3, "phi3"},
    {chat_family::phi4, "phi4"},
    {chat_family::deepseek, "deepseek"},
}};

// DeepSeek V3/R1 markers: fullwidth vertical bars (U+FF5C) and U+2581 in place of spaces.
constexpr std::string_view k_ds_user = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
constexpr std::string_view k_ds_assistant =
    "<\xEF\xBD\x9C"
    "Assistant\xEF\xBD\x9C>";
constexpr std::string_view k_ds_eos =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

bool contains(std::string_view s, std::string_view what) {
    return s.find(what) != std::string_view::npos;
}

// Python's str.strip() / Jinja's trim: ASCII white space at both ends.
std::string_view trim(std::string_view s) {
    constexpr std::string_view ws = " \t\n\r\v\f";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A reply without its reasoning: the text after the last "</think>" (the whole text without one).
std::string_view after_reasoning(std::string_view s) {
    const size_t p = s.rfind("</think>");
    return p == std::string_view::npos ? s : s.substr(p + 8);
}

// The default system message a ChatML template writes as one literal, e.g. Qwen2.5's
// '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n':
// the text between the marker and <|im_end|> when it holds no quote (a quote means the template
// concatenates the user's system message there). Jinja's "\n" escapes are unescaped.
std::string chatml_default_system(std::string_view jinja) {
    constexpr std::string_view marker = "<|im_start|>system\\n";
    for (size_t p = jinja.find(marker); p != std::string_view::npos; p = jinja.find(marker, p + 1)) {
        const size_t b = p + marker.size();
        const size_t e = jinja.find("<|im_end|>", b);
        if (e == std::string_view::npos) break;
        const std::string_view text = jinja.substr(b, e - b);
        if (text.empty() || text.find_first_of("'\"{}") != std::string_view::npos) continue;
        std::string out;
        for (size_t i = 0; i < text.size(); ++i) {
            if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
                out += '\n';
                ++i;
            } else {
                out += text[i];
            }
        }
        return out;
    }
    return {};
}

}  // namespace

std::string chat_template::family_names() {
    std::string out;
    for (const family_info & f : k_families) out += (out.empty() ? "" : ", ") + std::string(f.name);
    return out;
}

std::string_view chat_template::name() const {
    for (const family_info & f : k_families) {
        if (f.family == family_) return f.name;
    }
    HILL_ASSERT(false);
    return {};
}

chat_template chat_template::named(std::string_view name) {
    for (const family_info & f : k_families) {
        if (name == f.name) return chat_template(f.family);
    }
    fail_usage("unknown chat template '{}'; known: {}", name, family_names());
}

chat_template chat_template::recognize(std::string_view jinja) {
    // Most specific markers first: phi4 writes <|im_start|> too, llama2 [INST] too.
    if (contains(jinja, "<|im_sep|>")) return chat_template(chat_family::phi4);
    if (contains(jinja, "<|im_start|>")) {
        chat_template t(chat_family::chatml);
        t.default_system_ = chatml_default_system(jinja);
        t.strip_reasoning_ = contains(jinja, "</think>");
        return t;
    }
    if (contains(jinja, "<|start_header_id|>")) return chat_template(chat_family::llama3);
    if (contains(jinja, "<start_of_turn>")) return chat_template(chat_family::gemma);
    if (contains(jinja, k_ds_user) && contains(jinja, k_ds_assistant)) {
        chat_template t(chat_family::deepseek);
        t.strip_reasoning_ = true;
        t.open_think_ = contains(jinja, std::string(k_ds_assistant) + "<think>");
        return t;
    }
    // Phi-3: <|user|> spelled out (mini, medium) or built from the role (small, vision, 3.5).
    if (contains(jinja, "<|end|>") &&
        (contains(jinja, "<|user|>") || contains(jinja, "'<|' + message['role'] + '|>'"))) {
        return chat_template(chat_family::phi3);
    }
    if (contains(jinja, "[INST]")) {
        if (contains(jinja, "<<SYS>>")) return chat_template(chat_family::llama2);
        chat_template t(chat_family::mistral);
        t.mistral_v7_ = contains(jinja, "[SYSTEM_PROMPT]");
        t.mistral_v1_ = !t.mistral_v7_ && contains(jinja, "' [INST] '");
        return t;
    }
    const std::string_view head = jinja.substr(0, 60);
    fail_usage(
        "the model's chat template is not one HillInfer knows (it starts '{}{}'); known families: {}; pass "
        "--chat-template NAME",
        head, jinja.size() > head.size() ? "..." : "", family_names());
}

std::string chat_template::format(std::span<const chat_message> messages, bool add_generation_prompt,
                                  std::string_view bos, std::string_view eos) const {
    std::string system = default_system_;
    bool has_system = !default_system_.empty();
    size_t first = 0;
    if (!messages.empty() && messages[0].role == "system") {
        system = messages[0].content;
        has_system = true;
        first = 1;
    }
    const std::span<const chat_message> turns = messages.subspan(first);
    size_t last_user = 0;  // index in turns of the last user message
    for (size_t i = 0; i < turns.size(); ++i) {
        const std::string & role = turns[i].role;
        if (role != "user" && role != "assistant") {
            fail_usage("chat message {} has role '{}', expected user or assistant{}", first + i + 1, role,
                       role == "system" ? " (a system message comes first, once)" : "");
        }
        if (role == "user") last_user = i;
    }
    // The content of turn i as the template writes it.
    const auto content = [&](size_t i) -> std::string_view {
        std::string_view c = turns[i].content;
        if (turns[i].role == "assistant" && strip_reasoning_ && i < last_user) {
            c = after_reasoning(c);
            if (family_ == chat_family::chatml) c.remove_prefix(std::min(c.size(), c.find_first_not_of('\n')));
        }
        return c;
    };
    // The first user message with the system message merged in, for the families that do that.
    const auto with_system = [&](size_t i, std::string_view sep) {
        std::string c(content(i));
        if (has_system && i == 0) c = system + std::string(sep) + c;
        return c;
    };

    std::string out;
    switch (family_) {
        case chat_family::llama2:
            for (size_t i = 0; i < turns.size(); ++i) {
                if (turns[i].role == "user") {
                    std::string c(content(i));
                    if (has_system && i == 0) c = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + c;
                    out += fmt::format("{}[INST] {} [/INST]", i > 0 ? bos : "", trim(c));
                } else {
                    out += fmt::format(" {} {}", trim(content(i)), eos);
                }
            }
            break;
        case chat_family::llama3: {
            const auto turn = [&](std::string_view role, std::string_view c) {
                out += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", role, trim(c));
            };
            if (has_system) turn("system", system);
            for (size_t i = 0; i < turns.size(); ++i) turn(turns[i].role, content(i));
            if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        }
        case chat_family::chatml:
            if (has_system) out += fmt::format("<|im_start|>system\n{}<|im_end|>\n", system);
            for (size_t i = 0; i < turns.size(); ++i) {
                out += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", turns[i].role, content(i));
            }
            if (add_generation_prompt) out += "<|im_start|>assistant\n";
            break;
        case chat_family::mistral:
            if (mistral_v7_ && has_system) out += fmt::format("[SYSTEM_PROMPT] {}[/SYSTEM_PROMPT]", system);
            for (size_t i = 0; i < turns.size(); ++i) {
                if (turns[i].role == "user") {
                    const std::string c = mistral_v7_ ? std::string(content(i)) : with_system(i, "\n\n");
                    out += mistral_v1_ ? fmt::format(" [INST] {} [/INST]", c) : fmt::format("[INST] {}[/INST]", c);
                } else {
                    out += fmt::format(" {}{}", mistral_v1_ || mistral_v7_ ? content(i) : trim(content(i)), eos);
                }
            }
            break;
        case chat_family::gemma:
            for (size_t i = 0; i < turns.size(); ++i) {
                const bool user = turns[i].role == "user";
                out += fmt::format("<start_of_turn>{}\n{}{}<end_of_turn>\n", user ? "user" : "model",
                                   has_system && i == 0 ? system + "\n\n" : std::string(), trim(content(i)));
            }
            if (add_generation_prompt) out += "<start_of_turn>model\n";
            break;
        case chat_family::phi3:
            if (has_system) out += fmt::format("<|system|>\n{}<|end|>\n", system);
            for (size_t i = 0; i < turns.size(); ++i)
                out += fmt::format("<|{}|>\n{}<|end|>\n", turns[i].role, content(i));
            if (add_generation_prompt) out += "<|assistant|>\n";
            break;
        case chat_family::phi4:
            if (has_system) out += fmt::format("<|im_start|>system<|im_sep|>{}<|im_end|>", system);
            for (size_t i = 0; i < turns.size(); ++i) {
                out += fmt::format("<|im_start|>{}<|im_sep|>{}<|im_end|>", turns[i].role, content(i));
            }
            if (add_generation_prompt) out += "<|im_start|>assistant<|im_sep|>";
            break;
        case chat_family::deepseek:
            if (has_system) out += system;
            for (size_t i = 0; i < turns.size(); ++i) {
                if (turns[i].role == "user") {
                    out += fmt::format("{}{}", k_ds_user, content(i));
                } else {
                    out += fmt::format("{}{}{}", k_ds_assistant, after_reasoning(content(i)), k_ds_eos);
                }
            }
            if (add_generation_prompt) out += fmt::format("{}{}", k_ds_assistant, open_think_ ? "<think>\n" : "");
            break;
    }
    return out;
}

std::vector<std::string> chat_template::special_tokens() const {
    switch (family_) {
        case chat_family::llama2:
        case chat_family::mistral:
            return {};
        case chat_family::llama3:
            return {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
        case chat_family::chatml:
            return {"<|im_start|>", "<|im_end|>"};
        case chat_family::gemma:
            return {"<start_of_turn>", "<end_of_turn>"};
        case chat_family::phi3:
            return {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
        case chat_family::phi4:
            return {"<|im_start|>", "<|im_sep|>", "<|im_end|>"};
        case chat_family::deepseek:
            return {std::string(k_ds_user), std::string(k_ds_assistant), std::string(k_ds_eos)};
    }
    return {};
}

std::string_view chat_template::end_of_turn() const {
    switch (family_) {
        case chat_family::llama2:
        case chat_family::mistral:
            return {};
        case chat_family::llama3:
            return "<|eot_id|>";
        case chat_family::chatml:
        case chat_family::phi4:
            return "<|im_end|>";
        case chat_family::gemma:
            return "<end_of_turn>";
        case chat_family::phi3:
            return "<|end|>";
        case chat_family::deepseek:
            return k_ds_eos;
    }
    return {};
}

std::vector<int32_t> chat_template::end_of_turn_tokens(const vocab & v) const {
    const std::string_view marker = end_of_turn();
    std::vector<int32_t> out;
    if (!marker.empty()) {
        for (int32_t id = 0; id < v.n_vocab(); ++id) {
            if (v.pieces[size_t(id)] == marker) {
                out.push_back(id);
                break;
            }
        }
        if (out.empty()) {
            fail_usage(
                "chat template {} ends a turn with '{}', which is not a token of the model's vocabulary: the model "
                "was not trained on this template (choose another with --chat-template; known: {})",
                name(), marker, family_names());
        }
    }
    if (v.eos >= 0 && (out.empty() || out[0] != v.eos)) out.push_back(v.eos);
    if (out.empty()) fail_usage("chat template {} ends a turn with EOS, and the model's vocabulary has none", name());
    return out;
}

std::string chat_template::reference_jinja() const {
    switch (family_) {
        case chat_family::llama2:
            return "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
                   "system_message = "
                   "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false "
                   "%}"
                   "{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}"
                   "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% "
                   "else %}"
                   "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
                   "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
                   "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
        case chat_family::llama3:
            return "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
                   "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if "
                   "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
        case chat_family::chatml:
            return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
                   "endif %}";
        case chat_family::mistral:
            return "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}{%- set "
                   "loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}{{- "
                   "bos_token "
                   "}}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}{%- if loop.first and "
                   "system_message is defined %}{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + "
                   "'[/INST]' "
                   "}}{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}{%- elif message['role'] "
                   "== "
                   "'assistant' %}{{- ' ' + message['content'] | trim + eos_token }}{%- endif %}{%- endfor %}";
        case chat_family::gemma:
            return "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
                   "messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set "
                   "first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in "
                   "loop_messages -%}{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else "
                   "-%}{%- set "
                   "role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if "
                   "loop.first else '') + message['content'] | trim + '<end_of_turn>\\n' }}{%- endfor -%}{%- if "
                   "add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}";
        case chat_family::phi3:
            return "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + "
                   "'<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ "
                   "eos_token }}{% endif %}";
        case chat_family::phi4:
            return "{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + "
                   "message['content'] + "
                   "'<|im_end|>'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% "
                   "endif %}";
        case chat_family::deepseek:
            return fmt::format(
                "{{{{ bos_token }}}}{{% for message in messages %}}{{% if message['role'] == 'system' %}}{{{{ "
                "message['content'] }}}}{{% elif message['role'] == 'user' %}}{{{{ '{0}' + message['content'] }}}}{{% "
                "else %}}{{% set content = message['content'] %}}{{% if '</think>' in content %}}{{% set content = "
                "content.split('</think>')[-1] %}}{{% endif %}}{{{{ '{1}' + content + '{2}' }}}}{{% endif %}}{{% "
                "endfor "
                "%}}{{% if add_generation_prompt %}}{{{{ '{1}' }}}}{{% endif %}}",
                k_ds_user, k_ds_assistant, k_ds_eos);
    }
    return {};
}

std::string read_chat_template(const std::string & model_path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(model_path, ec)) {
        const std::string cfg = (fs::path(model_path) / "tokenizer_config.json").string();
        if (!fs::exists(cfg, ec)) return {};
        const json_file doc = json_file::load(cfg, "a tokenizer config");
        const std::optional<json_value> t = doc.root().find("/chat_template");
        if (!t) return {};
        if (t->json().is_string()) return t->get<std::string>();
        // Several named templates: [{"name": "default", "template": "..."}, {"name": "tool_use", ...}].
        for (size_t i = 0; i < t->size(); ++i) {
            const json_value item = t->item(i);
            if (item.required<std::string>("/name") == "default") return item.required<std::string>("/template");
        }
        fail_input("{}: chat_template lists no template named 'default'", t->where());
    }
    // GGUF (magic "GGUF"); anything else (a llama2.c checkpoint) has no template.
    std::ifstream in(model_path, std::ios::binary);
    char magic[4] = {};
    if (!in.read(magic, 4) || std::string_view(magic, 4) != "GGUF") return {};
    return gguf_file::open(model_path)->get_string("tokenizer.chat_template").value_or("");
}

}  // namespace hill
