// libFuzzer target: the safetensors reader must turn any input into either a parsed file or a
// hill::error; a crash, sanitizer report, other exception or leak is a bug. Build with
// -DHILL_BUILD_FUZZ=ON and clang; see tests/model.cmake.
#include "core/error.h"
#include "format/safetensors_file.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    try {
        const auto f = hill::safetensors_file::parse(data, size, "fuzz-input");
        // Touch what a loader would read, so that a bad pointer or size shows up here.
        uint64_t sum = 0;
        for (const hill::safetensors_tensor & t : f->tensors()) {
            const auto * p = static_cast<const uint8_t *>(t.data);
            if (t.size_bytes > 0) sum += p[0] + p[t.size_bytes - 1];
            sum += uint64_t(t.n_elements());
            if (f->find(t.name) != &t) __builtin_trap();
        }
        for (const auto & kv : f->metadata()) sum += kv.first.size() + kv.second.size();
        (void)sum;
    } catch (const hill::error &) {
    }
    return 0;
}
