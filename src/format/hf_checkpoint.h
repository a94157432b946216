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
//   - config.json that is not valid JSON or not an object (format/json_file.h);
//   - an index that is not valid JSON, without a "weight_map" object, or with a shard name that is
//     not a string or not a plain file name in the folder (no '/', no "..");
//   - a missing shard (named, with the index that lists it); any corrupt shard (safetensors_file);
//   - a tensor listed in the index but not in its shard; a tensor found in two shards; a tensor in
//     a shard but not in the index (index and shards must agree exactly).
//
// The shards stay mapped for the lifetime of the object: tensor views point into the mappings.
#pragma once

#include "format/json_file.h"
#include "format/safetensors_file.h"

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
    // config.json, an object. Read it with json_value's typed getters, which name config.json, the
    // key's JSON Pointer, the expected type and the actual value in their errors:
    //   config().required_int("/num_hidden_layers", 1, 4096), config().optional<double>("/rope_theta"),
    //   config().required<std::string>("/rope_scaling/type").
    json_value config() const { return config_->root(); }
    std::string config_path() const;

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
    void load_weights();

    std::string dir_;
    std::optional<json_file> config_;
    std::vector<std::unique_ptr<safetensors_file>> shards_;
    std::map<std::string, const safetensors_tensor *, std::less<>> tensors_;
};

}  // namespace hill
