// safetensors reader over a read-only memory map (Hugging Face checkpoints).
//
// Format (huggingface/safetensors, README "Format"; the reference reader's checks as its
// SafeTensorError variants name them):
//   - u64 little-endian N: the byte length of the header;
//   - N bytes: a UTF-8 JSON object. It must start with '{' and may be padded at the end with
//     spaces (0x20). Each key is a tensor name mapped to
//       {"dtype": "F32" | "F16" | "BF16" | ..., "shape": [d0, d1, ...] (outermost first, C order),
//        "data_offsets": [begin, end]}  (bytes, half-open, relative to the data start)
//     except the optional key "__metadata__", an object of string values;
//   - the rest of the file: the data section, starting at byte 8 + N. Little-endian values.
//
// Every number is validated before it is used; a corrupt file gives hill::error
// (exit_code::bad_input) naming the file, the tensor or field, the expected and the actual value,
// never an out-of-bounds read. Rejected:
//   - a file shorter than 8 bytes; a header length of 0, past the end of the file, or over
//     max_header_bytes (100 MiB, the reference reader's cap: no real header comes close, and the
//     cap bounds what a crafted length can make the JSON parser allocate);
//   - a header that does not start with '{', is not valid JSON, or is not an object;
//   - "__metadata__" that is not an object of strings;
//   - a tensor entry that is not an object, lacks dtype/shape/data_offsets, or has them of the
//     wrong JSON type; a dimension that is negative or not an integer; more than 8 dimensions;
//   - a dtype other than F32, F16, BF16 (the message names the tensor, its dtype and the supported
//     ones; the other safetensors dtypes — F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2, ... —
//     are valid safetensors but unsupported here);
//   - data_offsets that are not two non-negative integers with begin <= end;
//   - shape product × dtype size overflowing 64 bits or differing from end − begin;
//   - data offsets past the end of the data section; two tensors whose data overlap;
//   - a data section not entirely covered by the tensors: a gap between tensors, a first tensor
//     not at offset 0, or bytes after the last tensor. The format says the byte buffer "needs to
//     be entirely indexed, and cannot contain holes" (to prevent polyglot files), and the
//     reference reader rejects such files (MetadataIncompleteBuffer), so no valid writer makes them.
// The coverage rule as checked: in order of data offset, each tensor starts exactly where the
// previous one ended (earlier: "overlap", later: "gap"), the first at 0, the last ends at the end
// of the file.
// Allowed: a file with no tensors (header "{}" and an empty data section), zero-size tensors (a
// dimension of 0; they take [b, b) at a boundary between tensors), scalars (shape []: one element), extra
// keys inside a tensor entry (ignored). Duplicate keys in the JSON: the last one wins (as the JSON
// library parses them); safetensors writers never emit them.
#pragma once

#include "core/ggml_type.h"
#include "core/mapped_file.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hill {

struct safetensors_tensor {
    std::string name;
    ggml_type type = ggml_type::f32;  // f32, f16 or bf16
    std::vector<int64_t> shape;       // as stored: outermost first (C order); [] for a scalar
    // Into the mapping (or the parsed buffer). Not necessarily aligned to the element size: writers
    // pad the header so that the data start is 8-aligned, but the format does not require it.
    const void * data = nullptr;
    uint64_t size_bytes = 0;          // product(shape) * element size
    uint64_t offset = 0;              // data_offsets[0]: bytes from the start of the data section

    int64_t n_elements() const;
};

class safetensors_file {
public:
    // Cap on the header length N (bytes).
    static constexpr uint64_t max_header_bytes = uint64_t(100) << 20;
    static constexpr size_t max_dims = 8;

    // Maps and validates `path`. Errors: see the file comment (exit_code::bad_input); a missing
    // file or a directory is exit_code::usage (from mapped_file).
    static std::unique_ptr<safetensors_file> open(const std::string & path);

    // Parses a buffer the caller keeps alive (fuzzing, tests). `name` stands for the path in
    // messages and in path().
    static std::unique_ptr<safetensors_file> parse(const uint8_t * data, size_t size, const std::string & name);

    // nullptr when absent.
    const safetensors_tensor * find(std::string_view name) const;
    // In order of data offset (= file order for every known writer).
    const std::vector<safetensors_tensor> & tensors() const { return tensors_; }
    // The "__metadata__" object (empty when absent), e.g. {"format": "pt"}.
    const std::map<std::string, std::string> & metadata() const { return metadata_; }
    const std::string & path() const { return path_; }
    // Bytes of the header JSON (N) and of the data section.
    uint64_t header_bytes() const { return header_bytes_; }
    uint64_t data_bytes() const { return data_bytes_; }

    // safetensors dtype string for a supported type: "F32", "F16", "BF16".
    static std::string_view dtype_name(ggml_type t);
    // Element size of a supported dtype string ("F32" -> f32, ...); nullopt for any other string.
    static std::optional<ggml_type> type_from_dtype(std::string_view dtype);

private:
    safetensors_file() = default;
    void parse_all(const uint8_t * data, size_t size);

    std::string path_;
    std::optional<mapped_file> map_;
    uint64_t header_bytes_ = 0;
    uint64_t data_bytes_ = 0;
    std::vector<safetensors_tensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

// Serializes tensors as a safetensors file image (header + data), in the order given, with
// contiguous offsets from 0 and the header padded with spaces to a multiple of 8 bytes (as the
// reference writer does, so that the data start is aligned). For tests, the convert tool's test and
// tools that write tiny checkpoints. `data` of each entry must hold size_bytes bytes (asserted
// against shape × dtype size). Entries of `metadata` go to "__metadata__" (omitted when empty).
struct safetensors_entry {
    std::string name;
    ggml_type type = ggml_type::f32;
    std::vector<int64_t> shape;  // outermost first
    const void * data = nullptr;
    uint64_t size_bytes = 0;
};
std::vector<uint8_t> safetensors_serialize(const std::vector<safetensors_entry> & tensors,
                                           const std::map<std::string, std::string> & metadata = {});

}  // namespace hill
