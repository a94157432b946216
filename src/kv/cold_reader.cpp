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
    io_.finish();  // reads in flight land before their buffers may go
    for (const int fd : fds_) ::close(fd);
}

void cold_reader::issue(bool sort_by_offset) {
    const uint64_t page_bytes = pool_.page_bytes();
    const size_t n = batch_.size();
    reqs_.clear();
    req_of_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const page_read & rd = batch_[i];
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
    n_final_ = n_bad_ = 0;
    io_.start(reqs_, sort_by_offset);
}

void cold_reader::settle(size_t i, int64_t io_result) {
    const page_read & rd = batch_[i];
    page_result & r = out_[i];
    r = {};
    r.page = rd.page;
    if (req_of_[i] == cold_pool::no_page) {
        r.status = page_status::unwritten;
    } else {
        r.io_result = io_result;
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
        std::memset(rd.buffer, 0, pool_.page_bytes());
        ++n_bad_;
    }
}

size_t cold_reader::read_pages(std::span<const page_read> batch, std::span<page_result> out) {
    HILL_ASSERT(out.size() == batch.size() && !io_.busy());
    batch_ = batch;
    out_ = out;
    issue(true);
    done_.resize(reqs_.size());
    io_.finish(done_);
    for (size_t i = 0; i < batch.size(); ++i) settle(i, req_of_[i] == cold_pool::no_page ? 0 : done_[req_of_[i]].result);
    batch_ = {};
    out_ = {};
    return n_bad_;
}

void cold_reader::start_pages(std::span<const page_read> batch, std::span<page_result> out) {
    HILL_ASSERT(out.size() == batch.size() && !io_.busy());
    batch_ = batch;
    out_ = out;
    issue(false);
}

size_t cold_reader::pages_done(size_t at_least) {
    HILL_ASSERT(io_.busy() && at_least <= batch_.size());
    // Pages [n_final_, at_least) need requests up to the last written one among them.
    size_t need = 0;
    for (size_t i = at_least; i > n_final_; --i) {
        if (req_of_[i - 1] != cold_pool::no_page) {
            need = req_of_[i - 1] + 1;
            break;
        }
    }
    const size_t n_req = io_.wait(need);
    for (; n_final_ < batch_.size(); ++n_final_) {
        const uint32_t q = req_of_[n_final_];
        if (q != cold_pool::no_page && q >= n_req) break;
        settle(n_final_, q == cold_pool::no_page ? 0 : io_.result(q));
    }
    return n_final_;
}

void cold_reader::abandon_pages() {
    io_.finish();
    batch_ = {};
    out_ = {};
}

size_t cold_reader::finish_pages() {
    if (!io_.busy()) return 0;
    pages_done(batch_.size());
    io_.finish();
    batch_ = {};
    out_ = {};
    return n_bad_;
}

void cold_reader::check(std::span<const page_result> results, const char * what) const {
    for (const page_result & r : results) {
        if (r.status != page_status::ok) fail_input("cold pool: {} failed: {}", what, pool_.describe(r));
    }
}

}  // namespace hill
