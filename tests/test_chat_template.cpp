// Chat templates (tokenizer/chat_template.h): each family's text for a multi-turn conversation with
// and without a system message against hand-written expected text; recognition from real templates'
// text (fixtures: the templates as their models ship them, abbreviated where long); errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/spm_tokenizer.h"

namespace hill {
namespace {

// The conversation llama.cpp's chat template tests use (a reply with spaces around it shows trimming).
const std::vector<chat_message> k_chat = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
const std::vector<chat_message> k_chat_no_system(k_chat.begin() + 1, k_chat.end());

// Real templates (Hugging Face tokenizer_config.json / GGUF tokenizer.chat_template).
// meta-llama/Llama-2-7b-chat-hf
const char * k_llama2 =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";
// meta-llama/Meta-Llama-3-8B-Instruct
const char * k_llama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}";
// teknium/OpenHermes-2.5-Mistral-7B
const char * k_chatml =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";
// Qwen/Qwen2.5-7B-Instruct (the branch without tools)
const char * k_qwen25 = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %})";
// Qwen/Qwen3 (abbreviated: the system branch and the reasoning split)
const char * k_qwen3 = R"({%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- elif message.role == "assistant" %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %})";
// mistralai/Mistral-7B-Instruct-v0.2 (the "v1" template with a system prompt, abbreviated)
const char * k_mistral_v1 = R"({{- bos_token }}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- endif %}
{%- endfor %})";
// mistralai/Mistral-7B-Instruct-v0.3 (abbreviated)
const char * k_mistral_v3 = R"({{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- endif %}
{%- endfor %})";
// mistralai/Mistral-Large-Instruct-2411 ("v7")
const char * k_mistral_v7 =
    R"({{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant roles are supported!') }}{% endif %}{% endfor %})";
// google/gemma-7b-it
const char * k_gemma =
    R"({% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})";
// microsoft/Phi-3-mini-4k-instruct
const char * k_phi3 =
    R"({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %})";
// microsoft/Phi-3-small-8k-instruct
const char * k_phi3_small =
    R"({{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %})";
// microsoft/phi-4
const char * k_phi4 =
    R"({% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %})";
// deepseek-ai/DeepSeek-R1-Distill-Qwen-32B (abbreviated: no tool calls)
const char * k_deepseek_r1 = R"({%- for message in messages -%}{%- if message['role'] == 'user' -%}
    {%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}
  {%- endif -%}
  {%- if message['role'] == 'assistant' and message['content'] is not none -%}
      {%- set content = message['content'] -%}
      {%- if '</think>' in content -%}
        {%- set content = content.split('</think>')[-1] -%}
      {%- endif -%}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt and not ns.is_tool -%}{{'<｜Assistant｜><think>\n'}}
{%- endif %})";

std::string fmt_chat(const chat_template & t, const std::vector<chat_message> & m) {
    return t.format(m, true);
}

TEST(ChatTemplate, Llama2) {
    const chat_template t = chat_template::recognize(k_llama2);
    EXPECT_EQ(t.family(), chat_family::llama2);
    EXPECT_EQ(
        fmt_chat(t, k_chat),
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you "
        "[/INST] I am an assistant </s><s>[INST] Another question [/INST]");
    EXPECT_EQ(fmt_chat(t, k_chat_no_system),
              "[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another "
              "question [/INST]");
}

TEST(ChatTemplate, Llama3) {
    const chat_template t = chat_template::recognize(k_llama3);
    EXPECT_EQ(t.family(), chat_family::llama3);
    const std::string tail =
        "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
        "\n\nHi "
        "there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|"
        "end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
        "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    EXPECT_EQ(fmt_chat(t, k_chat),
              "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>" + tail);
    EXPECT_EQ(fmt_chat(t, k_chat_no_system), tail);
}

TEST(ChatTemplate, ChatML) {
    const chat_template t = chat_template::recognize(k_chatml);
    EXPECT_EQ(t.family(), chat_family::chatml);
    const std::string tail =
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are "
        "you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother "
        "question<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_EQ(fmt_chat(t, k_chat), "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n" + tail);
    EXPECT_EQ(fmt_chat(t, k_chat_no_system), tail);
    // Without the generation prompt, the conversation so far.
    EXPECT_EQ(t.format(std::vector<chat_message>{{"user", "Hi"}}, false), "<|im_start|>user\nHi<|im_end|>\n");

    // Qwen2.5: its default system message when none is given.
    const chat_template q = chat_template::recognize(k_qwen25);
    EXPECT_EQ(q.family(), chat_family::chatml);
    EXPECT_EQ(
        fmt_chat(q, k_chat_no_system),
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n" + tail);
    EXPECT_EQ(fmt_chat(q, k_chat), fmt_chat(t, k_chat));

    // Qwen3: an earlier reply keeps its text after </think>; the reply being written is untouched.
    const chat_template q3 = chat_template::recognize(k_qwen3);
    const std::vector<chat_message> think = {
        {"user", "Hi"}, {"assistant", "<think>\nhm\n</think>\n\nHello!"}, {"user", "Bye"}};
    EXPECT_EQ(
        fmt_chat(q3, think),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
        "<|im_start|>assistant\n");
    EXPECT_NE(fmt_chat(t, think).find("<think>\nhm\n</think>\n\nHello!"), std::string::npos);  // plain ChatML keeps it
}

TEST(ChatTemplate, Mistral) {
    const chat_template v3 = chat_template::recognize(k_mistral_v3);
    EXPECT_EQ(v3.family(), chat_family::mistral);
    EXPECT_EQ(fmt_chat(v3, k_chat),
              "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
              "assistant</s>[INST] Another question[/INST]");
    EXPECT_EQ(fmt_chat(v3, k_chat_no_system),
              "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] Another "
              "question[/INST]");
    const chat_template v1 = chat_template::recognize(k_mistral_v1);
    EXPECT_EQ(fmt_chat(v1, k_chat),
              " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am an "
              "assistant   </s> [INST] Another question [/INST]");
    const chat_template v7 = chat_template::recognize(k_mistral_v7);
    EXPECT_EQ(
        fmt_chat(v7, k_chat),
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who are "
        "you[/INST]    I am an assistant   </s>[INST] Another question[/INST]");
    EXPECT_EQ(fmt_chat(v7, k_chat_no_system),
              "[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
              "question[/INST]");
    // The vocabulary's EOS text where the template writes eos_token.
    EXPECT_EQ(
        v3.format(std::vector<chat_message>{{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, true, "<s>", "<eos>"),
        "[INST] a[/INST] b<eos>[INST] c[/INST]");
}

TEST(ChatTemplate, Gemma) {
    const chat_template t = chat_template::recognize(k_gemma);
    EXPECT_EQ(t.family(), chat_family::gemma);
    const std::string rest =
        "<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are "
        "you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother "
        "question<end_of_turn>\n<start_of_turn>model\n";
    EXPECT_EQ(fmt_chat(t, k_chat), "<start_of_turn>user\nYou are a helpful assistant\n\nHello" + rest);
    EXPECT_EQ(fmt_chat(t, k_chat_no_system), "<start_of_turn>user\nHello" + rest);
}

TEST(ChatTemplate, Phi3AndPhi4) {
    const chat_template t = chat_template::recognize(k_phi3);
    EXPECT_EQ(t.family(), chat_family::phi3);
    const std::string tail =
        "<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am "
        "an "
        "assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n";
    EXPECT_EQ(fmt_chat(t, k_chat), "<|system|>\nYou are a helpful assistant<|end|>\n" + tail);
    EXPECT_EQ(fmt_chat(t, k_chat_no_system), tail);
    EXPECT_EQ(chat_template::recognize(k_phi3_small).family(), chat_family::phi3);

    const chat_template t4 = chat_template::recognize(k_phi4);
    EXPECT_EQ(t4.family(), chat_family::phi4);
    const std::string tail4 =
        "<|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi "
        "there<|im_end|><|im_start|>user<|im_"
        "sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   "
        "<|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>";
    EXPECT_EQ(fmt_chat(t4, k_chat), "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|>" + tail4);
    EXPECT_EQ(fmt_chat(t4, k_chat_no_system), tail4);
}

TEST(ChatTemplate, DeepSeek) {
    const chat_template t = chat_template::recognize(k_deepseek_r1);
    EXPECT_EQ(t.family(), chat_family::deepseek);
    const std::string tail =
        "<｜User｜>Hello<｜Assistant｜>Hi there<｜end▁of▁sentence｜><｜User｜>Who are you<｜Assistant｜>   I am an "
        "assistant   <｜end▁of▁sentence｜><｜User｜>Another question<｜Assistant｜><think>\n";
    EXPECT_EQ(fmt_chat(t, k_chat), "You are a helpful assistant" + tail);
    EXPECT_EQ(fmt_chat(t, k_chat_no_system), tail);
    // By name: the generation prompt without <think>; replies lose their reasoning.
    const chat_template n = chat_template::named("deepseek");
    EXPECT_EQ(
        n.format(std::vector<chat_message>{{"user", "a"}, {"assistant", "<think>x</think>b"}, {"user", "c"}}, true),
        "<｜User｜>a<｜Assistant｜>b<｜end▁of▁sentence｜><｜User｜>c<｜Assistant｜>");
}

TEST(ChatTemplate, ReferenceTemplatesAreRecognized) {
    for (const char * name : {"llama2", "llama3", "chatml", "mistral", "gemma", "phi3", "phi4", "deepseek"}) {
        const chat_template t = chat_template::named(name);
        EXPECT_EQ(t.name(), name);
        const chat_template r = chat_template::recognize(t.reference_jinja());
        EXPECT_EQ(r.family(), t.family()) << name;
        EXPECT_EQ(fmt_chat(r, k_chat), fmt_chat(t, k_chat)) << name;
    }
}

TEST(ChatTemplate, Errors) {
    // Vicuna: no marker of a known family.
    const char * vicuna =
        R"({%- for message in messages %}{%- if message['role'] == 'system' -%}{{- '' + message['content'] + '\n\n' -}}{%- else -%}{%- if message['role'] == 'user' -%}{{-'USER: ' + message['content'] + '\n'-}}{%- else -%}{{-'ASSISTANT: ' + message['content'] + '</s>\n' -}}{%- endif -%}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{-'ASSISTANT:'-}}{%- endif -%})";
    try {
        (void)chat_template::recognize(vicuna);
        FAIL() << "an unknown template was accepted";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        const std::string msg = e.what();
        EXPECT_NE(msg.find("llama2, llama3, chatml, mistral, gemma, phi3, phi4, deepseek"), std::string::npos) << msg;
        EXPECT_NE(msg.find("--chat-template"), std::string::npos) << msg;
    }
    EXPECT_THROW((void)chat_template::named("alpaca"), error);
    const chat_template t = chat_template::named("chatml");
    EXPECT_THROW((void)t.format(std::vector<chat_message>{{"user", "a"}, {"system", "b"}}, true), error);
    EXPECT_THROW((void)t.format(std::vector<chat_message>{{"tool", "a"}}, true), error);
}

vocab chat_vocab(const std::vector<std::string> & specials) {
    vocab v;
    for (const char * p : {"<unk>", "<s>", "</s>"}) v.pieces.emplace_back(p);
    v.kinds = {token_kind::unknown, token_kind::control, token_kind::control};
    for (const std::string & s : specials) {
        v.pieces.push_back(s);
        v.kinds.push_back(token_kind::control);
    }
    for (const char * p : {"\xE2\x96\x81", "a", "b",
                           "\xE2\x96\x81"
                           "a",
                           "\n"}) {
        v.pieces.emplace_back(p);
        v.kinds.push_back(token_kind::normal);
    }
    v.scores.assign(v.pieces.size(), 0.0f);
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
    return v;
}

TEST(ChatTemplate, EndOfTurnTokens) {
    const vocab v = chat_vocab({"<|im_start|>", "<|im_end|>"});
    EXPECT_EQ(chat_template::named("chatml").end_of_turn_tokens(v), (std::vector<int32_t>{4, 2}));
    EXPECT_EQ(chat_template::named("llama2").end_of_turn_tokens(v), (std::vector<int32_t>{2}));
    EXPECT_THROW((void)chat_template::named("gemma").end_of_turn_tokens(v), error);  // no <end_of_turn>
}

// SentencePiece with control tokens parsed: each stretch between them encoded with its own space
// prefix (llama.cpp's rule), control tokens as themselves, nothing else changed.
TEST(ChatTemplate, SpmEncodeWithSpecial) {
    const spm_tokenizer t(chat_vocab({"<|im_start|>", "<|im_end|>"}));
    // ids: 3 <|im_start|>, 4 <|im_end|>, 5 ▁, 6 a, 7 b, 8 ▁a, 9 \n
    EXPECT_EQ(t.encode_with_special("<|im_start|>a<|im_end|>\n", true), (std::vector<int32_t>{1, 3, 8, 4, 5, 9}));
    EXPECT_EQ(t.encode_with_special("ab", false), t.encode("ab", false));
    EXPECT_EQ(t.encode_with_special("a</s><s>", false), (std::vector<int32_t>{8, 2, 1}));
    // Plain encode() keeps control text as text.
    EXPECT_EQ(t.encode("<|im_end|>", false).size() > 1, true);
}

// The templates real models ship, from the data folder's tokenizer configs.
TEST(ChatTemplateData, RecognizesShippedTemplates) {
    const std::string dir = test::data_dir() + "/tokenizers";
    if (!std::filesystem::exists(dir + "/llama3/tokenizer_config.json")) GTEST_SKIP() << "no data at " << dir;
    EXPECT_EQ(chat_template::recognize(read_chat_template(dir + "/llama3")).family(), chat_family::llama3);
    const chat_template q = chat_template::recognize(read_chat_template(dir + "/qwen3"));
    EXPECT_EQ(q.family(), chat_family::chatml);
    EXPECT_EQ(fmt_chat(q, k_chat_no_system).rfind("<|im_start|>user\nHello", 0), 0u);  // Qwen3: no default system
    EXPECT_EQ(read_chat_template(dir + "/gpt2"), "");                                  // no tokenizer_config.json
}

}  // namespace
}  // namespace hill
