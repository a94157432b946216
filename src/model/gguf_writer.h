// GGUF v3 writer. Builds metadata and tensors in memory, then writes the file atomically
// (core/atomic_file.h): a failed write never leaves a partial file under the final name.
#pragma once

#include "core/ggml_type.h"
#include "model/gguf_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hill {

class gguf_writer {
public:
    // Setting a key twice replaces its value (keys stay unique, in first-set order).
    void set_u32(const std::string & key, uint32_t v);
    void set_i32(const std::string & key, int32_t v);
    void set_u64(const std::string & key, uint64_t v);
    void set_f32(const std::string & key, float v);
    void set_bool(const std::string & key, bool v);
    void set_string(const std::string & key, const std::string & v);
    void set_string_array(const std::string & key, const std::vector<std::string> & v);
    void set_f32_array(const std::string & key, const std::vector<float> & v);
    void set_i32_array(const std::string & key, const std::vector<int32_t> & v);
    void set_value(const std::string & key, const gguf_value & v);  // any value, e.g. copied from a reader

    // Data alignment (power of two, asserted); also written as `general.alignment` when not 32.
    void set_alignment(uint32_t alignment);

    // Adds a tensor; `ne` innermost first (ne[0] = row length), 1 to 4 dims. `data` holds exactly
    // ggml_row_bytes(type, ne[0]) * ne[1] * ... bytes (asserted) and is copied.
    void add_tensor(const std::string & name, ggml_type type, const std::vector<int64_t> & ne, const void * data);

    // Writes the file. Errors: hill::error(exit_code::bad_input) naming the path (unwritable
    // directory, disk full).
    void write(const std::string & path) const;

private:
    struct tensor {
        std::string name;
        ggml_type type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> data;
    };
    std::vector<std::pair<std::string, gguf_value>> kv_;
    std::vector<tensor> tensors_;
    uint32_t alignment_ = 32;
};

}  // namespace hill
