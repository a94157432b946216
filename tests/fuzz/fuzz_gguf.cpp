// libFuzzer target: the GGUF reader must turn any input into either a parsed file or a
// hill::error; a crash, sanitizer report, other exception or leak is a bug. Build with
// -DHILL_BUILD_FUZZ=ON and clang; see tests/model.cmake.
#include "core/error.h"
#include "format/gguf_file.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    try {
        const auto f = hill::gguf_file::parse(data, size, "fuzz-input");
        // Touch what a loader would read, so that a bad pointer or size shows up here.
        uint64_t sum = 0;
        for (const hill::gguf_tensor_info & t : f->tensors()) {
            if (t.size_bytes > 0) sum += t.data[0] + t.data[t.size_bytes - 1];
        }
        for (const auto & kv : f->metadata()) sum += kv.first.size();
        (void)f->get_uint("general.alignment");
        (void)f->get_string("general.architecture");
        (void)f->get_string_array("tokenizer.ggml.tokens");
        (void)f->get_float_array("tokenizer.ggml.scores");
        (void)f->get_int_array("tokenizer.ggml.token_type");
        (void)sum;
    } catch (const hill::error &) {
    }
    return 0;
}
