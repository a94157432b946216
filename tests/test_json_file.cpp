// JSON files with error paths (src/format/json_file.h): files that cannot be read, parse errors
// with their position, typed getters at nested JSON Pointers, missing and optional keys, and the
// exact messages, which name the file, the pointer, the expected and the actual value.
#include "core/error.h"
#include "format/json_file.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

namespace hill {
namespace {

using test::error_of;

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

void write_text(const std::string & path, const std::string & text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    ASSERT_TRUE(f.good()) << path;
}

// A config.json in the shape of a Hugging Face one, parsed under the name "config.json".
constexpr const char * k_config = R"({
  "model_type": "llama", "hidden_size": 4096, "rms_norm_eps": 1e-05, "tie_word_embeddings": false,
  "max_position_embeddings": 2048.0, "bad_int": 1.5, "big": 18446744073709551615, "bos_token_id": null,
  "architectures": ["LlamaForCausalLM"], "mixed": ["a", 7],
  "rope_scaling": {"rope_type": "llama3", "factor": "8", "low_freq_factor": 1.0},
  "weird/key~": {"x": 1}
})";

json_file config() {
    return json_file::parse(k_config, "config.json", "the model config");
}

TEST(json_file, load_reads_and_names_the_file) {
    test::temp_dir dir;
    const std::string path = dir.file("profile.json");
    write_text(path, R"({"name": "slow", "link_gbps": 0.5})");
    const json_file f = json_file::load(path, "the device profile");
    EXPECT_EQ(f.name(), path);
    EXPECT_EQ(f.root().name(), path);
    EXPECT_EQ(f.root().pointer(), "");
    EXPECT_EQ(f.root().where(), path);
    EXPECT_EQ(f.root().required<std::string>("/name"), "slow");
    EXPECT_EQ(f.root().required<double>("/link_gbps"), 0.5);
}

TEST(json_file, unreadable_file_is_a_usage_error_with_the_reason) {
    test::temp_dir dir;
    for (const std::string & path : {dir.file("absent.json"), dir.path.string()}) {
        try {
            json_file::load(path, "the device profile");
            ADD_FAILURE() << "no error for " << path;
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::usage) << e.what();
            const std::string msg = e.what();
            EXPECT_HAS(msg, path);
            EXPECT_HAS(msg, "the device profile");
        }
    }
    try {
        json_file::load(dir.file("absent.json"), "the device profile");
        ADD_FAILURE() << "no error";
    } catch (const error & e) {
        EXPECT_EQ(std::string(e.what()),
                  "cannot open the device profile '" + dir.file("absent.json") + "': No such file or directory");
    }
}

TEST(json_file, parse_error_names_the_file_and_the_position) {
    test::temp_dir dir;
    const std::string path = dir.file("tokenizer.json");
    write_text(path, "{\"model\": {\n  \"type\": \"BPE\",\n  \"vocab\": {\"a\": 0,}\n}}");
    const std::string msg = error_of([&] { json_file::load(path, "the tokenizer"); });
    // The stray '}' after "0," is byte 49 (12 + 17 bytes of lines 1 and 2, then column 20).
    EXPECT_HAS(msg, path + ": the tokenizer is not valid JSON (byte 49): ");
    EXPECT_HAS(msg, "line 3, column 20");
    EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;

    write_text(path, "");
    EXPECT_HAS(error_of([&] { json_file::load(path, "the tokenizer"); }), "not valid JSON (byte 1)");
    EXPECT_HAS(error_of([&] { json_file::parse("{} trailing", "h", "the header"); }),
               "h: the header is not valid JSON");
    EXPECT_HAS(error_of([&] { json_file::parse("[1e999]", "h", "the header"); }), "not valid JSON");
}

TEST(json_file, nesting_is_bounded) {
    // json_max_depth levels parse; one more is refused before anything walks the document (dump and
    // json_describe recurse once per level: 100,000 levels overflowed the stack).
    const auto nested = [](int depth, char open, char close) {
        return std::string(size_t(depth), open) + std::string(size_t(depth), close);
    };
    EXPECT_EQ(json_file::parse(nested(json_max_depth, '[', ']'), "h", "the header").root().json().dump().size(),
              size_t(2 * json_max_depth));
    for (const std::string & deep :
         {nested(json_max_depth + 1, '[', ']'), nested(100000, '[', ']'), "{\"a\":" + nested(100000, '[', ']') + "}"}) {
        const std::string msg = error_of([&] { json_file::parse(deep, "h", "the header"); });
        EXPECT_HAS(msg, "h: the header is not valid JSON: nested deeper than 512 levels (arrays and objects)");
        EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
    }
    std::string objects;
    for (int i = 0; i <= json_max_depth; ++i) objects += "{\"k\":";
    objects += "1" + std::string(size_t(json_max_depth + 1), '}');
    EXPECT_HAS(error_of([&] { json_file::parse(objects, "h", "the header"); }), "nested deeper than 512 levels");
}

// nlohmann's lexer ends the input at a NUL byte: '{"a":1}\0garbage' parsed as '{"a":1}'.
TEST(json_file, a_nul_byte_is_refused) {
    using namespace std::string_literals;
    for (const std::string & text : {"{\"a\":1}\0garbage"s, "{\"a\":1}\0"s, "{\"a\":\"x\0y\"}"s}) {
        const std::string msg = error_of([&] { json_file::parse(text, "h", "the header"); });
        EXPECT_HAS(msg, "h: the header is not valid JSON: a NUL byte at byte ");
    }
    EXPECT_HAS(error_of([&] { json_file::parse("{\"a\":1}\0garbage"s, "h", "x"); }), "at byte 8 ");
    EXPECT_EQ(json_file::parse("{\"a\":\"x\\u0000y\"}", "h", "x").root().required<std::string>("/a"),
              std::string("x\0y", 3));  // escaped, it is a string's character
}

TEST(json_file, typed_getters_at_nested_pointers) {
    const json_file f = config();
    const json_value c = f.root();
    EXPECT_EQ(c.required<std::string>("/model_type"), "llama");
    EXPECT_EQ(c.required<int64_t>("/hidden_size"), 4096);
    EXPECT_EQ(c.required<int64_t>("/max_position_embeddings"), 2048);  // an integral float is an integer
    EXPECT_EQ(c.required<double>("/hidden_size"), 4096.0);             // an integer is a number
    EXPECT_EQ(c.required<double>("/rms_norm_eps"), 1e-5);
    EXPECT_EQ(c.required<bool>("/tie_word_embeddings"), false);
    EXPECT_EQ(c.required<std::vector<std::string>>("/architectures"), std::vector<std::string>{"LlamaForCausalLM"});
    EXPECT_EQ(c.required<std::string>("/rope_scaling/rope_type"), "llama3");
    EXPECT_EQ(c.required_int("/hidden_size", 1, 1 << 20), 4096);
    EXPECT_EQ(c.required<int64_t>("/weird~1key~0/x"), 1);  // RFC 6901 escapes

    // A value found once and read relative to it carries its full pointer.
    const json_value scaling = c.at("/rope_scaling");
    EXPECT_EQ(scaling.pointer(), "/rope_scaling");
    EXPECT_EQ(scaling.where(), "config.json: /rope_scaling");
    EXPECT_EQ(scaling.required<double>("/low_freq_factor"), 1.0);
    const json_value archs = c.at("/architectures");
    ASSERT_EQ(archs.size(), 1u);
    EXPECT_EQ(archs.item(0).pointer(), "/architectures/0");
    EXPECT_EQ(archs.item(0).get<std::string>(), "LlamaForCausalLM");
}

TEST(json_file, wrong_type_names_the_pointer_expected_and_actual) {
    const json_file f = config();
    const json_value c = f.root();
    EXPECT_EQ(error_of([&] { c.required<double>("/rope_scaling/factor"); }),
              "config.json: /rope_scaling/factor: expected a number, got a string \"8\"");
    EXPECT_EQ(error_of([&] { c.at("/rope_scaling").required<double>("/factor"); }),
              "config.json: /rope_scaling/factor: expected a number, got a string \"8\"");
    EXPECT_EQ(error_of([&] { c.required<int64_t>("/bad_int"); }),
              "config.json: /bad_int: expected an integer, got a number 1.5");
    EXPECT_EQ(error_of([&] { c.required<int64_t>("/big"); }),
              "config.json: /big: expected an integer, got a number 18446744073709551615");
    EXPECT_EQ(error_of([&] { c.required<bool>("/hidden_size"); }),
              "config.json: /hidden_size: expected true or false, got a number 4096");
    EXPECT_EQ(error_of([&] { c.required<std::string>("/rope_scaling"); }),
              "config.json: /rope_scaling: expected a string, got an object "
              "{\"factor\":\"8\",\"low_freq_factor\":1.0,\"rope_type\":\"llama3\"}");
    EXPECT_EQ(error_of([&] { c.required<std::vector<std::string>>("/model_type"); }),
              "config.json: /model_type: expected an array of strings, got a string \"llama\"");
    EXPECT_EQ(error_of([&] { c.required<std::vector<std::string>>("/mixed"); }),
              "config.json: /mixed/1: expected a string, got a number 7");
    EXPECT_EQ(error_of([&] { c.required_int("/hidden_size", 1, 1024); }),
              "config.json: /hidden_size: expected an integer in [1, 1024], got a number 4096");
    EXPECT_EQ(error_of([&] { c.at("/model_type").size(); }),
              "config.json: /model_type: expected an array, got a string \"llama\"");
    EXPECT_EQ(error_of([&] { c.at("/architectures").require_object(); }),
              "config.json: /architectures: expected an object, got an array [\"LlamaForCausalLM\"]");
    EXPECT_EQ(error_of([&] { c.at("/hidden_size").fail_expected("a power of two below 1024"); }),
              "config.json: /hidden_size: expected a power of two below 1024, got a number 4096");
    // A non-object on the way to a key.
    EXPECT_EQ(error_of([&] { c.find("/hidden_size/x"); }),
              "config.json: /hidden_size: expected an object (to look up /hidden_size/x), got a number 4096");
    const json_file list = json_file::parse("[1]", "list.json", "a list");
    EXPECT_EQ(error_of([&] { list.root().find("/a"); }),
              "list.json: expected an object (to look up /a), got an array [1]");
    // Long values are cut.
    const json_file long_string = json_file::parse("{\"s\": \"" + std::string(200, 'x') + "\"}", "l.json", "x");
    const std::string msg = error_of([&] { long_string.root().required<int64_t>("/s"); });
    EXPECT_HAS(msg, "got a string \"xxx");
    EXPECT_HAS(msg, "...");
    EXPECT_LT(msg.size(), 130u) << msg;
}

TEST(json_file, missing_key) {
    const json_file f = config();
    const json_value c = f.root();
    EXPECT_EQ(error_of([&] { c.required<int64_t>("/num_hidden_layers"); }),
              "config.json: /num_hidden_layers: missing key, expected an integer");
    EXPECT_EQ(error_of([&] { c.required<double>("/rope_scaling/high_freq_factor"); }),
              "config.json: /rope_scaling/high_freq_factor: missing key, expected a number");
    EXPECT_EQ(error_of([&] { c.at("/rope_scaling").required<double>("/high_freq_factor"); }),
              "config.json: /rope_scaling/high_freq_factor: missing key, expected a number");
    EXPECT_EQ(error_of([&] { c.required<int64_t>("/text_config/vocab_size"); }),
              "config.json: /text_config/vocab_size: missing key, expected an integer");
    EXPECT_EQ(error_of([&] { c.required<int64_t>("/bos_token_id"); }),  // null counts as absent
              "config.json: /bos_token_id: missing key, expected an integer");
    EXPECT_EQ(error_of([&] { c.required_int("/num_hidden_layers", 1, 4096); }),
              "config.json: /num_hidden_layers: missing key, expected an integer in [1, 4096]");
    EXPECT_EQ(error_of([&] { c.at("/weight_map", "an object mapping tensor names to shard files"); }),
              "config.json: /weight_map: missing key, expected an object mapping tensor names to shard files");
}

TEST(json_file, optional_key) {
    const json_file f = config();
    const json_value c = f.root();
    EXPECT_EQ(c.optional<int64_t>("/num_key_value_heads"), std::nullopt);
    EXPECT_EQ(c.optional<int64_t>("/bos_token_id"), std::nullopt);  // null counts as absent
    EXPECT_EQ(c.optional<double>("/rope_scaling/high_freq_factor"), std::nullopt);
    EXPECT_EQ(c.optional<double>("/text_config/vocab_size"), std::nullopt);  // absent on the way
    EXPECT_EQ(c.optional<bool>("/tie_word_embeddings"), false);
    EXPECT_EQ(c.optional<std::string>("/model_type"), "llama");
    EXPECT_EQ(c.optional_int("/hidden_size", 1, 1 << 20), 4096);
    EXPECT_EQ(c.optional_int("/num_key_value_heads", 1, 4096), std::nullopt);
    EXPECT_FALSE(c.find("/nothing").has_value());
    EXPECT_TRUE(c.find("/rope_scaling").has_value());
    // Present but of the wrong type is an error, not absent.
    EXPECT_EQ(error_of([&] { c.optional<double>("/rope_scaling/factor"); }),
              "config.json: /rope_scaling/factor: expected a number, got a string \"8\"");
    EXPECT_EQ(error_of([&] { c.optional_int("/hidden_size", 1, 8); }),
              "config.json: /hidden_size: expected an integer in [1, 8], got a number 4096");
}

TEST(json_file, members_in_key_order_with_escaped_pointers) {
    const json_file f = json_file::parse(R"({"vocab": {"b": 1, "a/b": 2, "~": 3}})", "vocab.json", "the vocabulary");
    std::vector<std::string> keys, pointers;
    f.root().at("/vocab").for_each_member([&](const std::string & key, const json_value & v) {
        keys.push_back(key);
        pointers.push_back(v.pointer());
        EXPECT_EQ(v.name(), "vocab.json");
    });
    EXPECT_EQ(keys, (std::vector<std::string>{"a/b", "b", "~"}));
    EXPECT_EQ(pointers, (std::vector<std::string>{"/vocab/a~1b", "/vocab/b", "/vocab/~0"}));
    EXPECT_EQ(error_of([&] { f.root().at("/vocab/a~1b").get<std::string>(); }),
              "vocab.json: /vocab/a~1b: expected a string, got a number 2");
    EXPECT_EQ(error_of([&] { f.root().for_each_member([](const std::string &, const json_value & v) { v.size(); }); }),
              "vocab.json: /vocab: expected an array, got an object {\"a/b\":2,\"b\":1,\"~\":3}");
}

TEST(json_file, values_stay_valid_when_the_file_moves) {
    json_file f = config();
    const json_value c = f.root();
    const json_file moved = std::move(f);
    EXPECT_EQ(c.required<std::string>("/model_type"), "llama");
    EXPECT_EQ(c.name(), "config.json");
    EXPECT_EQ(&moved.root().json(), &c.json());
}

TEST(json_file, describe) {
    EXPECT_EQ(json_describe(nlohmann::json(nullptr)), "null");
    EXPECT_EQ(json_describe(nlohmann::json(true)), "a boolean true");
    EXPECT_EQ(json_describe(nlohmann::json(3)), "a number 3");
    EXPECT_EQ(json_describe(nlohmann::json("x")), "a string \"x\"");
    EXPECT_EQ(json_describe(nlohmann::json::array()), "an array []");
    EXPECT_EQ(json_describe(nlohmann::json::object()), "an object {}");
}

}  // namespace
}  // namespace hill
