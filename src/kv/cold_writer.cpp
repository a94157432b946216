#include "kv/cold_writer.h"

#include "core/error.h"

#include <algorithm>

namespace hill {

cold_writer::cold_writer(cold_pool & pool, const io_queue_params & io) : pool_(pool), io_(io) {}

size_t cold_writer::write_pages(std::span<const page_write> batch, std::span<page_result> out) {
    HILL_ASSERT(out.size() == batch.size());
    const size_t n = batch.size();
    const uint64_t page_bytes = pool_.page_bytes();
    reqs_.resize(n);
    done_.resize(n);
    sums_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const page_write & w = batch[i];
        HILL_ASSERT(w.page < pool_.n_pages());
        HILL_ASSERT(reinterpret_cast<uintptr_t>(w.data) % 4096 == 0);
        sums_[i] = page_checksum(w.data, page_bytes);
        reqs_[i] = {io_op::write, pool_.fd_of(w.page), pool_.file_offset(w.page), page_bytes, const_cast<void *>(w.data), i};
    }
    const size_t n_io_failed = io_.run(reqs_, done_);
    for (size_t i = 0; i < n; ++i) {
        const uint32_t p = batch[i].page;
        page_result & r = out[i];
        r = {};
        r.page = p;
        r.io_result = done_[i].result;
        if (n_io_failed == 0) {
            pool_.mark_written(p, sums_[i]);
        } else {
            r.status = done_[i].result < 0 ? page_status::io_error : page_status::batch_failed;
            pool_.mark_unwritten(p);
        }
    }
    if (n_io_failed != 0) return n;
    write_bytes_ += uint64_t(n) * page_bytes;
    return 0;
}

}  // namespace hill
