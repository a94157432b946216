#include "format/hf_checkpoint.h"

#include "core/error.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
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

// Whole file as a string. Errors name the file.
std::string read_text(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail_input("cannot open '{}'", p.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail_input("cannot read '{}'", p.string());
    return ss.str();
}

nlohmann::json parse_json_file(const fs::path & p, const char * what) {
    const std::string text = read_text(p);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception & e) {
        fail_input("{}: {} is not valid JSON: {}", p.string(), what, e.what());
    }
}

std::string describe(const nlohmann::json & v) {
    std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return fmt::format("{} {}", v.type_name(), s);
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
    c->load_config();
    c->load_weights();
    return c;
}

std::string hf_checkpoint::config_path() const { return (fs::path(dir_) / config_name).string(); }

void hf_checkpoint::load_config() {
    const fs::path p = fs::path(dir_) / config_name;
    nlohmann::json j = parse_json_file(p, "the model config");
    if (!j.is_object()) fail_input("{}: expected a JSON object, got {}", p.string(), j.type_name());
    config_ = std::make_unique<nlohmann::json>(std::move(j));
}

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
        const nlohmann::json index = parse_json_file(index_path, "the shard index");
        if (!index.is_object()) fail_input("{}: expected a JSON object, got {}", index_path.string(), index.type_name());
        const auto wm = index.find("weight_map");
        if (wm == index.end() || !wm->is_object()) {
            fail_input("{}: \"weight_map\" is {}, expected an object mapping tensor names to shard files",
                       index_path.string(), wm == index.end() ? std::string("missing") : describe(*wm));
        }
        std::map<std::string, size_t> shard_index;  // shard file name -> index into shards_
        std::map<std::string, std::string> listed;  // tensor -> shard file name
        for (const auto & [tensor, shard] : wm->items()) {
            if (!shard.is_string()) {
                fail_input("{}: weight_map[\"{}\"] is {}, expected a shard file name", index_path.string(), tensor,
                           describe(shard));
            }
            const std::string name = shard.get<std::string>();
            if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
                fail_input("{}: weight_map[\"{}\"] = \"{}\": expected a plain file name in the checkpoint folder",
                           index_path.string(), tensor, name);
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
        }
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

// --- config getters ---------------------------------------------------------------------------

const nlohmann::json * hf_checkpoint::lookup(std::string_view key) const {
    const nlohmann::json * cur = config_.get();
    size_t p = 0;
    while (true) {
        const size_t dot = key.find('.', p);
        const std::string part(key.substr(p, dot == std::string_view::npos ? std::string_view::npos : dot - p));
        if (!cur->is_object()) {
            fail_input("{}: key '{}': '{}' is {}, expected an object", config_path(), key, key.substr(0, p - 1),
                       describe(*cur));
        }
        const auto it = cur->find(part);
        if (it == cur->end() || it->is_null()) return nullptr;
        cur = &*it;
        if (dot == std::string_view::npos) return cur;
        p = dot + 1;
    }
}

bool hf_checkpoint::config_has(std::string_view key) const { return lookup(key) != nullptr; }

std::optional<int64_t> hf_checkpoint::config_int_opt(std::string_view key) const {
    const nlohmann::json * v = lookup(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_unsigned()) {
        if (v->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max())) return v->get<int64_t>();
    } else if (v->is_number_integer()) {
        return v->get<int64_t>();
    } else if (v->is_number_float()) {
        const double f = v->get<double>();
        if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.0e18) return int64_t(f);
    }
    fail_input("{}: key '{}': expected an integer, got {}", config_path(), key, describe(*v));
}

int64_t hf_checkpoint::config_int(std::string_view key) const {
    const std::optional<int64_t> v = config_int_opt(key);
    if (!v) fail_input("{}: missing key '{}' (an integer)", config_path(), key);
    return *v;
}

int32_t hf_checkpoint::config_int_in(std::string_view key, int64_t lo, int64_t hi) const {
    HILL_ASSERT(lo <= hi && lo >= INT32_MIN && hi <= INT32_MAX);
    const int64_t v = config_int(key);
    if (v < lo || v > hi) fail_input("'{}': {} is {}, expected {}..{}", config_path(), key, v, lo, hi);
    return int32_t(v);
}

std::optional<double> hf_checkpoint::config_float_opt(std::string_view key) const {
    const nlohmann::json * v = lookup(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail_input("{}: key '{}': expected a number, got {}", config_path(), key, describe(*v));
    return v->get<double>();
}

double hf_checkpoint::config_float(std::string_view key) const {
    const std::optional<double> v = config_float_opt(key);
    if (!v) fail_input("{}: missing key '{}' (a number)", config_path(), key);
    return *v;
}

std::optional<std::string> hf_checkpoint::config_string_opt(std::string_view key) const {
    const nlohmann::json * v = lookup(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail_input("{}: key '{}': expected a string, got {}", config_path(), key, describe(*v));
    return v->get<std::string>();
}

std::string hf_checkpoint::config_string(std::string_view key) const {
    const std::optional<std::string> v = config_string_opt(key);
    if (!v) fail_input("{}: missing key '{}' (a string)", config_path(), key);
    return *v;
}

std::optional<bool> hf_checkpoint::config_bool_opt(std::string_view key) const {
    const nlohmann::json * v = lookup(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail_input("{}: key '{}': expected true or false, got {}", config_path(), key, describe(*v));
    return v->get<bool>();
}

bool hf_checkpoint::config_bool(std::string_view key) const {
    const std::optional<bool> v = config_bool_opt(key);
    if (!v) fail_input("{}: missing key '{}' (true or false)", config_path(), key);
    return *v;
}

std::optional<std::vector<std::string>> hf_checkpoint::config_string_array_opt(std::string_view key) const {
    const nlohmann::json * v = lookup(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) fail_input("{}: key '{}': expected an array of strings, got {}", config_path(), key, describe(*v));
    std::vector<std::string> out;
    for (const nlohmann::json & e : *v) {
        if (!e.is_string()) {
            fail_input("{}: key '{}': expected an array of strings, got an element {}", config_path(), key,
                       describe(e));
        }
        out.push_back(e.get<std::string>());
    }
    return out;
}

const nlohmann::json * hf_checkpoint::config_object(std::string_view key) const {
    const nlohmann::json * v = lookup(key);
    if (v == nullptr) return nullptr;
    if (!v->is_object()) fail_input("{}: key '{}': expected an object, got {}", config_path(), key, describe(*v));
    return v;
}

}  // namespace hill
