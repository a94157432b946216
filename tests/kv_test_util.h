// Fault hooks shared by the io queue and cold pool tests.
#pragma once

#include "kv/io_queue.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace hill::test {

// Cuts every transfer longer than one block to half its length in whole blocks (what O_DIRECT
// can return), for reads and, when `writes` is set, writes too. A shortened read's buffer is
// scribbled over past the cut, so a remainder that did not refill it would show.
inline io_fault_hook short_transfers(uint64_t block, bool writes) {
    return [block, writes](const io_issue & is, int64_t r) -> int64_t {
        if (r <= int64_t(block) || (is.op == io_op::write && !writes)) return r;
        const int64_t shortened = (r / 2) / int64_t(block) * int64_t(block);  // whole blocks, > 0
        if (is.op == io_op::read) {
            int64_t pos = 0;
            for (int i = 0; i < is.n_iov; ++i) {
                const int64_t len = int64_t(is.iov[i].iov_len);
                if (pos + len > shortened) {
                    const int64_t skip = std::max<int64_t>(0, shortened - pos);
                    std::memset(static_cast<uint8_t *>(is.iov[i].iov_base) + skip, 0xAA, size_t(len - skip));
                }
                pos += len;
            }
        }
        return shortened;
    };
}

// The I/O backends a parameterized suite runs on: io_uring or the forced pread/pwrite fallback, on
// a disk (O_DIRECT) or tmpfs (no O_DIRECT), and the four together with names for the test list.
struct backend_config {
    bool force_sync;
    bool tmpfs;
};

inline std::string backend_name(const testing::TestParamInfo<backend_config> & info) {
    return std::string(info.param.force_sync ? "sync" : "uring") + (info.param.tmpfs ? "_tmpfs" : "_disk");
}

inline auto all_backends() {
    return testing::Values(backend_config{false, false}, backend_config{true, false}, backend_config{false, true},
                           backend_config{true, true});
}

}  // namespace hill::test
