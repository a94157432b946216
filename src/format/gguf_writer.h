// GGUF v3 writer. Builds metadata and tensors in memory, then writes the file atomically
// (core/atomic_file.h): a failed write never leaves a partial file under the final name.
#pragma once

#include "core/ggml_type.h"
#include "format/gguf_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace hill {

class gguf_writer {
public:
    // Setting a key twice replaces its value (keys stay unique, in first-set order). Setting
    // `general.alignment` (must be a u32 nonzero power of two, asserted) also sets the alignment.
    void set_u32(const std::string & key, uint32_t v);
    void set_i32(const std::string & key, int32_t v);
    void set_u64(const std::string & key, uint64_t v);
    void set_f32(const std::string & key, float v);
    void set_bool(const std::string & key, bool v);
    void set_string(const std::string & key, const std::string & v);
    void set_string_array(const std::string & key, const std::vector<std::string> & v);
    void set_f32_array(const std::string & key, const std::vector<float> & v);
    void set_i32_array(const std::string & key, const std::vector<int32_t> & v);
    // Any value, e.g. copied from a reader; array elements must all have `array_type` (asserted).
    void set_value(const std::string & key, const gguf_value & v);

    // Data alignment (power of two, asserted); also written as `general.alignment` when not 32.
    void set_alignment(uint32_t alignment);

    // Adds a tensor; `ne` innermost first (ne[0] = row length), 1 to 4 dims, each > 0, ne[0] a
    // multiple of the block size, `name` not used yet (all asserted). `data` holds exactly
    // ggml_row_bytes(type, ne[0]) * ne[1] * ... bytes and is copied. Tensors are laid out in the
    // order added, each at an offset that is a multiple of the alignment.
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
