// Cold-pool read throughput (DESIGN.md §3 step 4: gathers of selected cold KV), against fio.
//
//   bench_cold_pool [--dir /var/tmp] [--page-bytes 4096,16384] [--qd 128] [--pool-mb 1024]
//                   [--read-mb 256] [--batch 1024] [--reps 5] [--coalesce-kb 1024] [--sync] [--json FILE]
//
// For each page size it fills a cold pool of --pool-mb in --dir (io_uring, O_DIRECT) through a cold_writer,
// then times the reads of a cold_reader (kv/cold_reader.h: the reads of the host and of the storage
// device emulator):
//   (a) gather: batches of --batch distinct random page ids (the scattered cold reads of a decode step),
//   (b) scan:   batches of consecutive pages (coalesced by the io queue into ops of up to 1 MiB;
//               --coalesce-kb 0 issues one op per page, as fio does with the same block size),
// each reading --read-mb per repetition, checksums checked as in real use. It prints MB/s (1e6
// bytes) and IOPS (pages/s), median with min and max over --reps, and the fio command line for the
// same directory, block size, queue depth and pattern. O_DIRECT keeps the page cache out of the
// numbers; if the file system refuses it, the bench says so (the numbers are then of the cache).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "bench_stats.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/sys_info.h"
#include "kv/cold_pool.h"
#include "kv/cold_reader.h"
#include "kv/cold_writer.h"

namespace {

using namespace hill;

using bench::stat3;
using bench::summarize;

struct result {
    std::string pattern;
    uint64_t page_bytes;
    stat3 mbps;
    stat3 iops;
    double ops_per_request;  // io ops issued per page read (coalescing < 1)
    std::string fio;
};

}  // namespace

int main(int argc, char ** argv) {
    CLI::App app{"HillInfer cold-pool read throughput (gathers and scans) against fio"};
    std::string dir = "/var/tmp", json_path;
    std::vector<uint64_t> page_sizes{4096, 16384};
    uint32_t qd = 128, batch = 1024, reps = 5;
    uint64_t pool_mb = 1024, read_mb = 256;
    uint64_t coalesce_kb = 1024;
    bool force_sync = false;
    app.add_option("--dir", dir, "directory of the cold pool (the SSD to measure)")->capture_default_str();
    app.add_option("--page-bytes", page_sizes, "page sizes (multiples of 4096)")->delimiter(',')->capture_default_str();
    app.add_option("--qd", qd, "io_uring queue depth")->capture_default_str();
    app.add_option("--pool-mb", pool_mb, "cold pool size in MiB (larger than any device cache)")->capture_default_str();
    app.add_option("--read-mb", read_mb, "MiB read per repetition and pattern")->capture_default_str();
    app.add_option("--batch", batch, "pages per read_pages call")->capture_default_str();
    app.add_option("--reps", reps, "repetitions (median reported)")->capture_default_str();
    app.add_option("--coalesce-kb", coalesce_kb, "largest coalesced op in KiB (0: off, one op per page as fio)")
        ->capture_default_str();
    app.add_flag("--sync", force_sync, "use the pread fallback instead of io_uring");
    app.add_option("--json", json_path, "also write the results as JSON");
    CLI11_PARSE(app, argc, argv);

    try {
        std::vector<result> results;
        std::mt19937_64 rng(12345);
        for (const uint64_t page_bytes : page_sizes) {
            cold_pool_params p;
            p.kv_dir = dir;
            p.page_bytes = page_bytes;
            p.n_pages = uint32_t(pool_mb * (1u << 20) / page_bytes);
            io_queue_params io;
            io.queue_depth = qd;
            io.force_sync = force_sync;
            io.max_coalesce_bytes = coalesce_kb * 1024;
            cold_pool pool(p);
            cold_writer writer(pool, io);
            if (!pool.direct()) {
                fmt::print("warning: the file system of '{}' refuses O_DIRECT: these numbers are of the page cache\n",
                           dir);
            }

            // Fill the pool with random bytes (the checksums must be real ones).
            const uint32_t n_pages = pool.n_pages();
            const uint32_t batch_pages = std::min(batch, n_pages);
            aligned_buffer buf(size_t(batch_pages) * page_bytes);
            for (size_t i = 0; i < buf.size(); i += 8) {
                const uint64_t v = rng();
                std::memcpy(buf.data() + i, &v, 8);
            }
            std::vector<page_write> wr;
            std::vector<page_result> res(batch_pages);
            for (uint32_t i = 0; i < n_pages; ++i) pool.alloc();
            for (uint32_t p0 = 0; p0 < n_pages; p0 += batch_pages) {
                wr.clear();
                for (uint32_t i = p0; i < std::min(n_pages, p0 + batch_pages); ++i) {
                    buf.data()[size_t(i - p0) * page_bytes] = uint8_t(i);  // pages differ
                    wr.push_back({i, buf.data() + size_t(i - p0) * page_bytes});
                }
                if (writer.write_pages(wr, std::span(res).first(wr.size())) != 0) {
                    fail_input("cannot fill the cold pool: {}", pool.describe(res[0]));
                }
            }

            const uint64_t n_read = std::min<uint64_t>(read_mb * (1u << 20) / page_bytes, n_pages);
            std::vector<page_read> rd(batch_pages);
            for (const char * pattern : {"gather", "scan"}) {
                const bool gather = pattern[0] == 'g';
                std::vector<double> mbps, iops;
                cold_reader reader(pool, io);  // fresh io statistics per pattern
                std::vector<uint32_t> ids(n_pages);
                for (uint32_t r = 0; r < reps; ++r) {
                    std::iota(ids.begin(), ids.end(), 0u);
                    if (gather) std::shuffle(ids.begin(), ids.end(), rng);
                    const uint64_t start_page = gather ? 0 : (uint64_t(r) * n_read) % (n_pages - n_read + 1);
                    const int64_t t0 = time_us();
                    for (uint64_t k = 0; k < n_read; k += batch_pages) {
                        const size_t n = size_t(std::min<uint64_t>(batch_pages, n_read - k));
                        for (size_t i = 0; i < n; ++i) {
                            rd[i] = {ids[start_page + k + i], buf.data() + i * page_bytes};
                        }
                        if (reader.read_pages(std::span(rd).first(n), std::span(res).first(n)) != 0) {
                            fail_input("cold-pool read failed: {}", pool.describe(res[0]));
                        }
                    }
                    const double s = double(time_us() - t0) * 1e-6;
                    mbps.push_back(double(n_read * page_bytes) / s / 1e6);
                    iops.push_back(double(n_read) / s);
                }
                const auto & st = reader.io().stats();
                result out;
                out.pattern = pattern;
                out.page_bytes = page_bytes;
                out.mbps = summarize(mbps);
                out.iops = summarize(iops);
                out.ops_per_request = double(st.n_ops) / double(std::max<uint64_t>(1, st.n_requests));
                out.fio = fmt::format(
                    "fio --name={} --filename={}/hill-fio.dat --size={}M --rw={} --bs={} --iodepth={} "
                    "--ioengine=io_uring --direct=1 --numjobs=1 --time_based --runtime=15 --group_reporting",
                    pattern, dir, pool_mb, gather ? "randread" : "read", page_bytes, qd);
                fmt::print(
                    "{:6} page {:6} B  qd {:3}  {:8.1f} MB/s (min {:.1f}, max {:.1f})  {:9.0f} IOPS  "
                    "{:.3f} ops/page  [{}{}]\n",
                    pattern, page_bytes, qd, out.mbps.median, out.mbps.lo, out.mbps.hi, out.iops.median,
                    out.ops_per_request, reader.io().backend() == io_backend::uring ? "io_uring" : "pread",
                    pool.direct() ? ", O_DIRECT" : ", page cache");
                fmt::print("  same with fio: {}\n", out.fio);
                results.push_back(out);
            }
        }
        if (!json_path.empty()) {
            nlohmann::json j = nlohmann::json::array();
            for (const result & r : results) {
                j.push_back({{"pattern", r.pattern},
                             {"page_bytes", r.page_bytes},
                             {"queue_depth", qd},
                             {"mbps_median", r.mbps.median},
                             {"mbps_min", r.mbps.lo},
                             {"mbps_max", r.mbps.hi},
                             {"iops_median", r.iops.median},
                             {"ops_per_page", r.ops_per_request},
                             {"fio", r.fio},
                             {"dir", dir}});
            }
            std::ofstream(json_path) << j.dump(2) << "\n";
        }
    } catch (const hill::error & e) {
        fmt::print(stderr, "bench_cold_pool: error: {}\n", e.what());
        return int(e.code());
    }
    return 0;
}
