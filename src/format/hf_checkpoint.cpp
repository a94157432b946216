#include "format/hf_checkpoint.h"

#include "core/error.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace hill {

namespace {

constexpr const char * config_name = "config.json";
constexpr const char * single_name = "model.safetensors";
constexpr const char * index_name = "model.safetensors.index.json";
constexpr const char * tokenizer_json_name = "tokenizer.json";
constexpr const char * tokenizer_config_name = "tokenizer_config.json";

bool is_file(const fs::path & p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec);
}

}  // namespace

hf_checkpoint::~hf_checkpoint() = default;

bool hf_checkpoint::is_checkpoint_dir(const std::string & path) {
    std::error_code ec;
    const fs::path d(path);
    if (!fs::is_directory(d, ec)) return false;
    return is_file(d / config_name) && (is_file(d / single_name) || is_file(d / index_name));
}

std::unique_ptr<hf_checkpoint> hf_checkpoint::open(const std::string & dir) {
    std::error_code ec;
    const fs::path d(dir);
    if (!fs::exists(d, ec)) fail_usage("cannot open checkpoint folder '{}': no such file or directory", dir);
    if (!fs::is_directory(d, ec)) fail_usage("'{}' is not a folder, expected a Hugging Face checkpoint folder", dir);
    if (!is_file(d / config_name)) {
        fail_usage("'{}' is not a Hugging Face checkpoint folder: {} is missing (expected {} and {} or {})", dir,
                   config_name, config_name, single_name, index_name);
    }
    std::unique_ptr<hf_checkpoint> c(new hf_checkpoint());
    c->dir_ = dir;
    c->config_.emplace(json_file::load(c->config_path(), "the model config"));
    c->config_->root().require_object();
    c->load_weights();
    return c;
}

std::string hf_checkpoint::config_path() const { return (fs::path(dir_) / config_name).string(); }

void hf_checkpoint::load_weights() {
    const fs::path d(dir_);
    const fs::path index_path = d / index_name;
    std::map<std::string, size_t> shard_of;  // tensor -> index into shards_ (from the shard headers)
    const auto add_shard_tensors = [&](size_t k) {
        for (const safetensors_tensor & t : shards_[k]->tensors()) {
            const auto [it, inserted] = shard_of.emplace(t.name, k);
            if (!inserted) {
                fail_input("{}: tensor '{}' is in two shards: '{}' and '{}'", dir_, t.name,
                           shards_[it->second]->path(), shards_[k]->path());
            }
            tensors_.emplace(t.name, &t);
        }
    };

    if (is_file(index_path)) {
        const json_file index = json_file::load(index_path.string(), "the shard index");
        const char * weight_map_expected = "an object mapping tensor names to shard files";
        const json_value wm = index.root().at("/weight_map", weight_map_expected);
        if (!wm.json().is_object()) wm.fail_expected(weight_map_expected);
        std::map<std::string, size_t> shard_index;  // shard file name -> index into shards_
        std::map<std::string, std::string> listed;  // tensor -> shard file name
        wm.for_each_member([&](const std::string & tensor, const json_value & shard) {
            if (!shard.json().is_string()) shard.fail_expected("a shard file name");
            const std::string name = shard.get<std::string>();
            if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
                fail_input("{}: \"{}\": expected a plain file name in the checkpoint folder", shard.where(), name);
            }
            listed.emplace(tensor, name);
            if (shard_index.count(name) == 0) {
                const fs::path sp = d / name;
                if (!is_file(sp)) {
                    fail_input("{}: shard '{}' is missing (listed in {} for tensor '{}')", dir_, sp.string(),
                               index_name, tensor);
                }
                shard_index.emplace(name, shards_.size());
                shards_.push_back(safetensors_file::open(sp.string()));
            }
        });
        for (size_t k = 0; k < shards_.size(); ++k) add_shard_tensors(k);
        for (const auto & [tensor, name] : listed) {
            const auto it = shard_of.find(tensor);
            const std::string & expected = shards_[shard_index.at(name)]->path();
            if (it == shard_of.end()) {
                fail_input("{}: tensor '{}' is listed in {} but missing from its shard '{}'", dir_, tensor, index_name,
                           expected);
            }
            if (it->second != shard_index.at(name)) {
                fail_input("{}: tensor '{}' is listed in {} for shard '{}' but found in '{}'", dir_, tensor,
                           index_name, expected, shards_[it->second]->path());
            }
        }
        for (const auto & [tensor, k] : shard_of) {
            if (listed.count(tensor) == 0) {
                fail_input("{}: tensor '{}' in shard '{}' is not listed in {}", dir_, tensor, shards_[k]->path(),
                           index_name);
            }
        }
        return;
    }

    const fs::path single = d / single_name;
    if (is_file(single)) {
        shards_.push_back(safetensors_file::open(single.string()));
        add_shard_tensors(0);
        return;
    }

    // No weights we read: say what is there.
    std::vector<std::string> other;
    std::error_code ec;
    for (const fs::directory_entry & e : fs::directory_iterator(d, ec)) {
        const std::string n = e.path().filename().string();
        if (n.ends_with(".safetensors") || n.ends_with(".bin") || n.ends_with(".pt") || n.ends_with(".pth") ||
            n.ends_with(".gguf")) {
            other.push_back(n);
        }
    }
    std::sort(other.begin(), other.end());
    fail_usage("'{}': no weights: expected {} or {} (only safetensors checkpoints are supported; PyTorch .bin/.pt "
               "files must be converted to safetensors first){}{}",
               dir_, single_name, index_name, other.empty() ? "" : "; found: ", fmt::format("{}", fmt::join(other, ", ")));
}

const safetensors_tensor * hf_checkpoint::find(std::string_view name) const {
    const auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : it->second;
}

std::vector<std::string> hf_checkpoint::tensor_names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto & kv : tensors_) out.push_back(kv.first);
    return out;
}

uint64_t hf_checkpoint::data_bytes() const {
    uint64_t n = 0;
    for (const auto & s : shards_) n += s->data_bytes();
    return n;
}

std::string hf_checkpoint::tokenizer_json_path() const {
    const fs::path p = fs::path(dir_) / tokenizer_json_name;
    return is_file(p) ? p.string() : std::string();
}

std::string hf_checkpoint::tokenizer_config_path() const {
    const fs::path p = fs::path(dir_) / tokenizer_config_name;
    return is_file(p) ? p.string() : std::string();
}

}  // namespace hill
