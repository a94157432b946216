// A Hugging Face checkpoint folder: config.json, the weights as safetensors (one file or shards),
// and optionally tokenizer.json / tokenizer_config.json.
//
// Layout (as transformers' save_pretrained writes it):
//   config.json                      model hyperparameters (JSON object)
//   model.safetensors                all weights, or
//   model.safetensors.index.json     {"metadata": {...}, "weight_map": {tensor name: shard file}}
//   model-00001-of-0000N.safetensors the shards the index names (files in the same folder)
//   tokenizer.json, tokenizer_config.json (optional here; the tokenizer factory decides)
// When both model.safetensors and the index exist, the index wins (transformers does the same).
//
// Errors (hill::error): a path that is not a folder, or a folder without config.json or without
// weights, is exit_code::usage; the message says what was expected and, when the folder holds
// pytorch_model.bin-style weights, that only safetensors is supported. Everything below is
// exit_code::bad_input and names the file:
//   - config.json that is not valid JSON or not an object;
//   - an index that is not valid JSON, without a "weight_map" object, or with a shard name that is
//     not a string or not a plain file name in the folder (no '/', no "..");
//   - a missing shard (named, with the index that lists it); any corrupt shard (safetensors_file);
//   - a tensor listed in the index but not in its shard; a tensor found in two shards; a tensor in
//     a shard but not in the index (index and shards must agree exactly).
//
// The shards stay mapped for the lifetime of the object: tensor views point into the mappings.
//
// nlohmann/json: only <nlohmann/json_fwd.hpp> is included here (the full header is heavy to
// compile), so config() can be passed around by reference; the typed getters below are the
// convenient way to read it, with error messages naming config.json, the key, the expected type and
// the actual value. Include <nlohmann/json.hpp> where you use config() directly.
#pragma once

#include "format/safetensors_file.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hill {

class hf_checkpoint {
public:
    // Opens `dir` and validates config.json, the index (if any) and every shard. Errors: see the
    // file comment.
    static std::unique_ptr<hf_checkpoint> open(const std::string & dir);
    ~hf_checkpoint();

    // True when `path` is a folder holding config.json and model.safetensors or
    // model.safetensors.index.json. Never throws (use it to pick a loader: GGUF file vs folder).
    static bool is_checkpoint_dir(const std::string & path);

    const std::string & dir() const { return dir_; }
    const nlohmann::json & config() const { return *config_; }
    std::string config_path() const;

    // --- config.json getters ----------------------------------------------------------------
    // `key` is a top-level key, or a path into sub-objects separated by '.', e.g.
    // "rope_scaling.factor", "text_config.hidden_size". The *_opt variants return nullopt when the
    // key is absent or JSON null; the plain ones throw hill::error(bad_input) "config.json: missing
    // key" naming the file. A present key of the wrong type (a float for an int, a string for a
    // number, ...) throws naming the key, the expected type and the actual value. Integers accept
    // JSON integers (and floats with an integral value, e.g. 1e4 as written by some exporters);
    // floats accept any JSON number.
    bool config_has(std::string_view key) const;
    int64_t config_int(std::string_view key) const;
    // config_int within [lo, hi]; outside it, hill::error(bad_input) naming the file, key, value and range.
    int32_t config_int_in(std::string_view key, int64_t lo, int64_t hi) const;
    std::optional<int64_t> config_int_opt(std::string_view key) const;
    double config_float(std::string_view key) const;
    std::optional<double> config_float_opt(std::string_view key) const;
    std::string config_string(std::string_view key) const;
    std::optional<std::string> config_string_opt(std::string_view key) const;
    bool config_bool(std::string_view key) const;
    std::optional<bool> config_bool_opt(std::string_view key) const;
    // A string array, e.g. "architectures"; nullopt when absent or null.
    std::optional<std::vector<std::string>> config_string_array_opt(std::string_view key) const;
    // A sub-object (e.g. "rope_scaling"); nullptr when absent or null; throws when not an object.
    const nlohmann::json * config_object(std::string_view key) const;

    // --- tensors ------------------------------------------------------------------------------
    // Lookup across shards; nullptr when absent.
    const safetensors_tensor * find(std::string_view name) const;
    // All tensor names, sorted.
    std::vector<std::string> tensor_names() const;
    size_t n_tensors() const { return tensors_.size(); }
    // The shard files in the order the index first names them (one entry for model.safetensors).
    const std::vector<std::unique_ptr<safetensors_file>> & shards() const { return shards_; }
    // Sum of the shards' data sections (bytes).
    uint64_t data_bytes() const;

    // --- tokenizer files ----------------------------------------------------------------------
    // Full paths, or "" when the file is absent.
    std::string tokenizer_json_path() const;
    std::string tokenizer_config_path() const;

private:
    hf_checkpoint() = default;
    void load_config();
    void load_weights();
    const nlohmann::json * lookup(std::string_view key) const;

    std::string dir_;
    std::unique_ptr<nlohmann::json> config_;
    std::vector<std::unique_ptr<safetensors_file>> shards_;
    std::map<std::string, const safetensors_tensor *, std::less<>> tensors_;
};

}  // namespace hill
