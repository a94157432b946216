#include "kv/cold_reader.h"

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace hill {

cold_reader::cold_reader(const cold_pool & pool, const io_queue_params & io) : pool_(pool), io_(io) {
    try {
        for (size_t f = 0; f < pool.n_files(); ++f) {
            const std::string & path = pool.file_path(uint32_t(f * pool.pages_per_file()));
            const io_open_result r = io_open_file(path, O_RDONLY, 0, pool.direct());
            if (r.fd < 0) fail_input("cannot open the cold-pool file '{}' for reading: {}", path, std::strerror(int(-r.fd)));
            fds_.push_back(r.fd);
        }
    } catch (...) {
        for (const int fd : fds_) ::close(fd);
        throw;
    }
}

cold_reader::~cold_reader() {
    for (const int fd : fds_) ::close(fd);
}

size_t cold_reader::read_pages(std::span<const page_read> batch, std::span<page_result> out) {
    HILL_ASSERT(out.size() == batch.size());
    const size_t n = batch.size();
    const uint64_t page_bytes = pool_.page_bytes();
    reqs_.clear();
    req_of_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const page_read & rd = batch[i];
        HILL_ASSERT(rd.page < pool_.n_pages());
        HILL_ASSERT(reinterpret_cast<uintptr_t>(rd.buffer) % 4096 == 0);
        if (!pool_.is_written(rd.page)) {
            req_of_[i] = cold_pool::no_page;
            continue;
        }
        req_of_[i] = uint32_t(reqs_.size());
        reqs_.push_back({io_op::read, fds_[rd.page / pool_.pages_per_file()], pool_.file_offset(rd.page), page_bytes,
                         rd.buffer, i});
    }
    done_.resize(reqs_.size());
    io_.run(reqs_, done_);

    size_t n_bad = 0;
    for (size_t i = 0; i < n; ++i) {
        const page_read & rd = batch[i];
        page_result & r = out[i];
        r = {};
        r.page = rd.page;
        if (req_of_[i] == cold_pool::no_page) {
            r.status = page_status::unwritten;
        } else {
            r.io_result = done_[req_of_[i]].result;
            if (r.io_result < 0) {
                r.status = page_status::io_error;
            } else {
                const uint64_t actual = pool_.checksum_of(rd.buffer);
                const uint64_t expected = pool_.checksum(rd.page);
                if (actual != expected) {
                    r.status = page_status::checksum_mismatch;
                    r.checksum_expected = expected;
                    r.checksum_actual = actual;
                }
            }
        }
        if (r.status != page_status::ok) {
            std::memset(rd.buffer, 0, page_bytes);
            ++n_bad;
        }
    }
    return n_bad;
}

void cold_reader::check(std::span<const page_result> results, const char * what) const {
    for (const page_result & r : results) {
        if (r.status != page_status::ok) fail_input("cold pool: {} failed: {}", what, pool_.describe(r));
    }
}

}  // namespace hill
