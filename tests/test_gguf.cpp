// GGUF reader and writer: writer -> reader round trips, exact bytes against a hand-built file,
// and one hand-made corrupt file per validation rule (src/format/gguf_file.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>

#include "core/error.h"
#include "format/gguf_file.h"
#include "format/gguf_writer.h"
#include "test_util.h"

namespace hill {
namespace {

// Little-endian byte builder for hand-made GGUF files.
struct bytes {
    std::vector<uint8_t> b;

    template <class T>
    bytes & put(T v) {
        uint8_t x[sizeof(T)];
        std::memcpy(x, &v, sizeof(T));
        b.insert(b.end(), x, x + sizeof(T));
        return *this;
    }
    bytes & u8(uint8_t v) { return put(v); }
    bytes & u32(uint32_t v) { return put(v); }
    bytes & u64(uint64_t v) { return put(v); }
    bytes & str(const std::string & s) {
        u64(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    bytes & raw(std::initializer_list<uint8_t> v) {
        b.insert(b.end(), v);
        return *this;
    }
    bytes & zeros(size_t n) {
        b.resize(b.size() + n, 0);
        return *this;
    }
    bytes & pad_to(size_t alignment) { return zeros((alignment - b.size() % alignment) % alignment); }

    // Header {magic, version, n_tensors, n_kv}.
    bytes & header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
        raw({'G', 'G', 'U', 'F'});
        return u32(version).u64(n_tensors).u64(n_kv);
    }
    bytes & kv_u32(const std::string & key, uint32_t v) { return str(key).u32(4).u32(v); }
    bytes & kv_string(const std::string & key, const std::string & v) { return str(key).u32(8).str(v); }
    // Tensor info {name, n_dims, ne[], type, offset}.
    bytes & tensor(const std::string & name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
        str(name).u32(uint32_t(ne.size()));
        for (uint64_t n : ne) u64(n);
        return u32(type).u64(offset);
    }
};

constexpr const char * file_name = "hand-made.gguf";

std::unique_ptr<gguf_file> parse(const bytes & f) { return gguf_file::parse(f.b.data(), f.b.size(), file_name); }

// Parses `f`, expecting hill::error(bad_input) whose message names the file and contains every word.
void expect_bad(const bytes & f, std::initializer_list<std::string> words) {
    try {
        parse(f);
        ADD_FAILURE() << "expected a hill::error containing '" << *words.begin() << "'";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input) << e.what();
        const std::string msg = e.what();
        EXPECT_NE(msg.find(file_name), std::string::npos) << msg;
        for (const std::string & w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    }
}

// A valid file with one f32 tensor of `n` elements, for variants that corrupt one field.
bytes one_tensor_file(std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    bytes f;
    f.header(1, 1).kv_string("general.architecture", "llama").tensor("w", std::move(ne), type, offset);
    f.pad_to(32).zeros(data_bytes);
    return f;
}

std::vector<uint8_t> read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

gguf_value make(gguf_value_type t) {
    gguf_value v;
    v.type = t;
    return v;
}
gguf_value make_u(gguf_value_type t, uint64_t u) {
    gguf_value v = make(t);
    v.u = u;
    return v;
}
gguf_value make_i(gguf_value_type t, int64_t i) {
    gguf_value v = make(t);
    v.i = i;
    return v;
}
gguf_value make_f(gguf_value_type t, double f) {
    gguf_value v = make(t);
    v.f = f;
    return v;
}
gguf_value make_array(gguf_value_type et, std::vector<gguf_value> elems) {
    gguf_value v = make(gguf_value_type::array);
    v.array_type = et;
    v.array = std::move(elems);
    return v;
}

// Deep comparison of two values (floats bit for bit through their stored type).
void expect_same(const gguf_value & a, const gguf_value & b, const std::string & where) {
    SCOPED_TRACE(where);
    ASSERT_EQ(a.type, b.type);
    switch (a.type) {
        case gguf_value_type::u8:
        case gguf_value_type::u16:
        case gguf_value_type::u32:
        case gguf_value_type::u64: EXPECT_EQ(a.u, b.u); break;
        case gguf_value_type::i8:
        case gguf_value_type::i16:
        case gguf_value_type::i32:
        case gguf_value_type::i64: EXPECT_EQ(a.i, b.i); break;
        case gguf_value_type::f32: EXPECT_EQ(float(a.f), float(b.f)); break;
        case gguf_value_type::f64: EXPECT_EQ(a.f, b.f); break;
        case gguf_value_type::boolean: EXPECT_EQ(a.b, b.b); break;
        case gguf_value_type::string: EXPECT_EQ(a.str, b.str); break;
        case gguf_value_type::array:
            ASSERT_EQ(a.array_type, b.array_type);
            ASSERT_EQ(a.array.size(), b.array.size());
            for (size_t k = 0; k < a.array.size(); ++k) expect_same(a.array[k], b.array[k], where + "[" + std::to_string(k) + "]");
            break;
    }
}

// Every value type, with edge values, including nested arrays.
std::vector<std::pair<std::string, gguf_value>> all_value_types() {
    using t = gguf_value_type;
    std::vector<std::pair<std::string, gguf_value>> kv;
    kv.emplace_back("t.u8", make_u(t::u8, 255));
    kv.emplace_back("t.i8", make_i(t::i8, -128));
    kv.emplace_back("t.u16", make_u(t::u16, 65535));
    kv.emplace_back("t.i16", make_i(t::i16, -32768));
    kv.emplace_back("t.u32", make_u(t::u32, 4294967295u));
    kv.emplace_back("t.i32", make_i(t::i32, std::numeric_limits<int32_t>::min()));
    kv.emplace_back("t.f32", make_f(t::f32, double(1.5e-38f)));
    gguf_value b = make(t::boolean);
    b.b = true;
    kv.emplace_back("t.bool", b);
    gguf_value s = make(t::string);
    s.str = std::string("caf\xc3\xa9 \0 nul", 11);
    kv.emplace_back("t.string", s);
    kv.emplace_back("t.empty_string", make(t::string));
    kv.emplace_back("t.u64", make_u(t::u64, std::numeric_limits<uint64_t>::max()));
    kv.emplace_back("t.i64", make_i(t::i64, std::numeric_limits<int64_t>::min()));
    kv.emplace_back("t.f64", make_f(t::f64, 1e300));
    kv.emplace_back("t.array_u8", make_array(t::u8, {make_u(t::u8, 0), make_u(t::u8, 7)}));
    kv.emplace_back("t.array_i8", make_array(t::i8, {make_i(t::i8, -1)}));
    kv.emplace_back("t.array_u16", make_array(t::u16, {make_u(t::u16, 513)}));
    kv.emplace_back("t.array_i16", make_array(t::i16, {make_i(t::i16, -513)}));
    kv.emplace_back("t.array_u32", make_array(t::u32, {make_u(t::u32, 70000), make_u(t::u32, 1)}));
    kv.emplace_back("t.array_i32", make_array(t::i32, {make_i(t::i32, -70000)}));
    kv.emplace_back("t.array_f32", make_array(t::f32, {make_f(t::f32, -0.25), make_f(t::f32, 3.0)}));
    kv.emplace_back("t.array_bool", make_array(t::boolean, {b, make(t::boolean)}));
    kv.emplace_back("t.array_string", make_array(t::string, {s, make(t::string)}));
    kv.emplace_back("t.array_u64", make_array(t::u64, {make_u(t::u64, 1ull << 40)}));
    kv.emplace_back("t.array_i64", make_array(t::i64, {make_i(t::i64, -(1ll << 40))}));
    kv.emplace_back("t.array_f64", make_array(t::f64, {make_f(t::f64, 0.1)}));
    kv.emplace_back("t.array_empty", make_array(t::f32, {}));
    kv.emplace_back("t.array_nested",
                    make_array(t::array, {make_array(t::i32, {make_i(t::i32, 1), make_i(t::i32, 2)}),
                                          make_array(t::i32, {}), make_array(t::i32, {make_i(t::i32, 3)})}));
    return kv;
}

// ---------------------------------------------------------------------------------------------
// Round trips

TEST(gguf_writer, round_trips_every_metadata_type) {
    test::temp_dir dir;
    const auto kv = all_value_types();
    gguf_writer w;
    for (const auto & [k, v] : kv) w.set_value(k, v);
    w.write(dir.file("m.gguf"));

    const auto f = gguf_file::open(dir.file("m.gguf"));
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_TRUE(f->tensors().empty());
    ASSERT_EQ(f->metadata().size(), kv.size());
    for (size_t k = 0; k < kv.size(); ++k) {
        EXPECT_EQ(f->metadata()[k].first, kv[k].first);  // file order kept
        expect_same(f->metadata()[k].second, kv[k].second, kv[k].first);
        ASSERT_NE(f->find(kv[k].first), nullptr);
    }
    EXPECT_EQ(f->find("absent"), nullptr);
}

TEST(gguf_writer, typed_setters_and_getters) {
    test::temp_dir dir;
    gguf_writer w;
    w.set_u32("a.u32", 7);
    w.set_i32("a.i32", -7);
    w.set_u64("a.u64", 1ull << 63);
    w.set_f32("a.f32", 0.5f);
    w.set_bool("a.bool", true);
    w.set_string("a.string", "hello");
    w.set_string_array("a.strings", {"x", "", "zz"});
    w.set_f32_array("a.floats", {1.0f, -2.5f});
    w.set_i32_array("a.ints", {-1, 0, 2147483647});
    w.set_u32("a.u32", 8);  // replaces, keeps its place
    w.write(dir.file("t.gguf"));

    const auto f = gguf_file::open(dir.file("t.gguf"));
    ASSERT_EQ(f->metadata().size(), 9u);
    EXPECT_EQ(f->metadata()[0].first, "a.u32");
    EXPECT_EQ(f->get_uint("a.u32"), 8u);
    EXPECT_EQ(f->get_int("a.u32"), 8);
    EXPECT_EQ(f->get_int("a.i32"), -7);
    EXPECT_EQ(f->get_uint("a.u64"), 1ull << 63);
    EXPECT_EQ(f->get_float("a.f32"), 0.5);
    EXPECT_EQ(f->get_bool("a.bool"), true);
    EXPECT_EQ(f->get_string("a.string"), "hello");
    EXPECT_EQ(f->get_string_array("a.strings"), (std::vector<std::string>{"x", "", "zz"}));
    EXPECT_EQ(f->get_float_array("a.floats"), (std::vector<float>{1.0f, -2.5f}));
    EXPECT_EQ(f->get_int_array("a.ints"), (std::vector<int64_t>{-1, 0, 2147483647}));
    EXPECT_FALSE(f->get_uint("absent").has_value());
    EXPECT_FALSE(f->get_string_array("absent").has_value());

    // Wrong type or out of range: bad_input naming the key, expected and actual.
    auto expect_getter_error = [](auto fn, std::initializer_list<std::string> words) {
        try {
            fn();
            ADD_FAILURE() << "expected a hill::error";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input);
            for (const std::string & w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
        }
    };
    expect_getter_error([&] { f->get_uint("a.i32"); }, {"a.i32", "non-negative", "-7"});
    expect_getter_error([&] { f->get_int("a.u64"); }, {"a.u64", "9223372036854775808"});
    expect_getter_error([&] { f->get_uint("a.string"); }, {"a.string", "integer", "string"});
    expect_getter_error([&] { f->get_float("a.u32"); }, {"a.u32", "f32", "u32"});
    expect_getter_error([&] { f->get_bool("a.u32"); }, {"bool", "u32"});
    expect_getter_error([&] { f->get_string("a.strings"); }, {"a.strings", "array of string"});
    expect_getter_error([&] { f->get_string_array("a.ints"); }, {"array of string", "array of i32"});
    expect_getter_error([&] { f->get_float_array("a.ints"); }, {"array of f32", "array of i32"});
    expect_getter_error([&] { f->get_int_array("a.floats"); }, {"array of integers", "array of f32"});
}

TEST(gguf_writer, get_int_array_rejects_u64_above_int64) {
    bytes f;
    f.header(0, 1).str("big").u32(9).u32(10).u64(1).u64(std::numeric_limits<uint64_t>::max());
    const auto g = parse(f);
    EXPECT_THROW(g->get_int_array("big"), error);
    EXPECT_EQ(g->find("big")->array[0].u, std::numeric_limits<uint64_t>::max());
}

struct tensor_case {
    std::string name;
    ggml_type type;
    std::vector<int64_t> ne;
};

void round_trip_tensors(uint32_t alignment) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    const uint32_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::vector<tensor_case> cases = {
        {"f32", ggml_type::f32, {3, 2}},
        {"f16", ggml_type::f16, {5}},
        {"bf16", ggml_type::bf16, {2, 3, 4}},
        {"q8_0", ggml_type::q8_0, {64, 3}},
        {"q4_0", ggml_type::q4_0, {32, 1, 1, 3}},
        {"f32.scalar", ggml_type::f32, {1}},
    };
    test::temp_dir dir;
    gguf_writer w;
    if (alignment != 32) w.set_alignment(alignment);
    w.set_string("general.architecture", "llama");
    std::vector<std::vector<uint8_t>> data;
    for (const tensor_case & c : cases) {
        size_t n = *ggml_row_bytes(c.type, c.ne[0]);
        for (size_t d = 1; d < c.ne.size(); ++d) n *= size_t(c.ne[d]);
        std::vector<uint8_t> d(n);
        for (auto & x : d) x = uint8_t(rng());
        w.add_tensor(c.name, c.type, c.ne, d.data());
        data.push_back(std::move(d));
    }
    const std::string path = dir.file("t.gguf");
    w.write(path);

    const std::vector<uint8_t> file = read_all(path);
    for (int pass = 0; pass < 2; ++pass) {
        // pass 0: mmap via open(); pass 1: parse() of a copy in memory.
        const auto f = pass == 0 ? gguf_file::open(path) : gguf_file::parse(file.data(), file.size(), path);
        EXPECT_EQ(f->version(), 3u);
        EXPECT_EQ(f->alignment(), alignment);
        EXPECT_EQ(f->get_uint("general.alignment"),
                  alignment == 32 ? std::nullopt : std::optional<uint64_t>(alignment));
        ASSERT_EQ(f->tensors().size(), cases.size());
        const uint8_t * base = pass == 0 ? f->tensors()[0].data - f->tensors()[0].offset : file.data();
        size_t data_start = 0;
        for (size_t k = 0; k < cases.size(); ++k) {
            const gguf_tensor_info & t = f->tensors()[k];
            SCOPED_TRACE(t.name);
            EXPECT_EQ(t.name, cases[k].name);
            EXPECT_EQ(t.type, cases[k].type);
            ASSERT_EQ(t.n_dims, int(cases[k].ne.size()));
            for (int d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < t.n_dims ? cases[k].ne[size_t(d)] : 1);
            EXPECT_EQ(t.size_bytes, data[k].size());
            EXPECT_EQ(t.offset % alignment, 0u);
            ASSERT_EQ(std::memcmp(t.data, data[k].data(), t.size_bytes), 0);
            if (pass == 0) {
                // The mapping is page aligned, so file alignment is pointer alignment.
                EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % alignment, 0u);
            } else {
                const size_t at = size_t(t.data - base);
                EXPECT_EQ((at - t.offset) % alignment, 0u);
                if (k == 0) data_start = at - t.offset;
                EXPECT_EQ(at, data_start + t.offset);
                EXPECT_EQ(0, std::memcmp(file.data() + at, data[k].data(), data[k].size()));
                if (k + 1 == cases.size()) {
                    EXPECT_EQ(at + t.size_bytes, file.size());  // no trailing padding
                }
            }
            EXPECT_EQ(f->find_tensor(t.name), &t);
        }
        EXPECT_EQ(f->find_tensor("absent"), nullptr);
    }
}

TEST(gguf_writer, round_trips_every_tensor_type_alignment_32) { round_trip_tensors(32); }
TEST(gguf_writer, round_trips_every_tensor_type_alignment_64) { round_trip_tensors(64); }
TEST(gguf_writer, round_trips_every_tensor_type_alignment_1) { round_trip_tensors(1); }
TEST(gguf_writer, round_trips_every_tensor_type_alignment_4096) { round_trip_tensors(4096); }

TEST(gguf_writer, writes_the_exact_bytes_of_the_spec) {
    // One key and two tensors, built by hand from the spec and compared byte for byte.
    test::temp_dir dir;
    const float a[3] = {1.0f, 2.0f, 3.0f};
    const uint16_t h[2] = {0x3c00, 0xc000};
    gguf_writer w;
    w.set_u32("general.quantization_version", 2);
    w.add_tensor("a", ggml_type::f32, {3}, a);
    w.add_tensor("h", ggml_type::f16, {2, 1}, h);
    w.write(dir.file("x.gguf"));

    bytes e;
    e.header(2, 1).kv_u32("general.quantization_version", 2);
    e.tensor("a", {3}, 0, 0).tensor("h", {2, 1}, 1, 32);
    e.pad_to(32).put(1.0f).put(2.0f).put(3.0f).zeros(32 - 12).put(uint16_t(0x3c00)).put(uint16_t(0xc000));
    EXPECT_EQ(read_all(dir.file("x.gguf")), e.b);
}

TEST(gguf_writer, alignment_key_and_layout_agree) {
    test::temp_dir dir;
    gguf_writer w;
    gguf_value v = make_u(gguf_value_type::u32, 128);
    w.set_value("general.alignment", v);  // e.g. copied from another file
    const float x = 1.0f;
    w.add_tensor("a", ggml_type::f32, {1}, &x);
    w.add_tensor("b", ggml_type::f32, {1}, &x);
    w.write(dir.file("a.gguf"));
    const auto f = gguf_file::open(dir.file("a.gguf"));
    EXPECT_EQ(f->alignment(), 128u);
    EXPECT_EQ(f->tensors()[1].offset, 128u);

    w.set_alignment(32);  // back to the default: the key stays, with the new value
    w.write(dir.file("b.gguf"));
    const auto g = gguf_file::open(dir.file("b.gguf"));
    EXPECT_EQ(g->get_uint("general.alignment"), 32u);
    EXPECT_EQ(g->tensors()[1].offset, 32u);
}

TEST(gguf_writer, unwritable_directory_is_bad_input) {
    gguf_writer w;
    w.set_u32("x", 1);
    try {
        w.write("/nonexistent-dir-for-hill-tests/x.gguf");
        FAIL() << "expected hill::error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        EXPECT_NE(std::string(e.what()).find("/nonexistent-dir-for-hill-tests/x.gguf"), std::string::npos);
    }
    EXPECT_FALSE(std::filesystem::exists("/nonexistent-dir-for-hill-tests"));
}

TEST(gguf_writer, leaves_no_temporary_file) {
    test::temp_dir dir;
    gguf_writer w;
    w.set_u32("x", 1);
    w.write(dir.file("x.gguf"));
    size_t n = 0;
    for (const auto & e : std::filesystem::directory_iterator(dir.path)) n += e.is_regular_file();
    EXPECT_EQ(n, 1u);
}

// ---------------------------------------------------------------------------------------------
// Valid hand-made files

TEST(gguf_file, accepts_version_2) {
    bytes f;
    f.header(1, 1, 2).kv_string("general.architecture", "llama").tensor("w", {4}, 0, 0).pad_to(32).put(1.0f).zeros(12);
    const auto g = parse(f);
    EXPECT_EQ(g->version(), 2u);
    EXPECT_EQ(g->get_string("general.architecture"), "llama");
    ASSERT_EQ(g->tensors().size(), 1u);
    EXPECT_EQ(g->tensors()[0].data, f.b.data() + f.b.size() - 16);
}

TEST(gguf_file, vocab_only_file_without_padding_is_valid) {
    bytes f;
    f.header(0, 1).kv_string("tokenizer.ggml.model", "llama");
    const auto g = parse(f);
    EXPECT_TRUE(g->tensors().empty());
    EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "llama");
}

TEST(gguf_file, empty_header_only_file_is_valid) {
    bytes f;
    f.header(0, 0);
    EXPECT_NO_THROW(parse(f));
}

TEST(gguf_file, tensors_follow_each_other_with_alignment_padding_only) {
    bytes f;  // 16 bytes, padding to 32, 64 bytes touching, padding to 128 (the last tensor's is optional)
    f.header(3, 0).tensor("a", {4}, 0, 0).tensor("b", {16}, 0, 32).tensor("c", {2}, 1, 96).pad_to(32).zeros(100);
    const auto g = parse(f);
    EXPECT_EQ(g->find_tensor("b")->offset, 32u);
    EXPECT_EQ(g->find_tensor("c")->offset, 96u);
    f.zeros(28);
    EXPECT_NO_THROW(parse(f));
}

TEST(gguf_file, missing_file_is_usage_error) {
    try {
        gguf_file::open("/nonexistent/model.gguf");
        FAIL() << "expected hill::error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::usage);
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos);
    }
}

TEST(gguf_file, open_names_the_path_in_errors) {
    test::temp_dir dir;
    const std::string path = dir.file("bad.gguf");
    std::ofstream(path, std::ios::binary) << "GGML-not-gguf-at-all-xxxxxxxx";
    try {
        gguf_file::open(path);
        FAIL() << "expected hill::error";
    } catch (const error & e) {
        EXPECT_EQ(e.code(), exit_code::bad_input);
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos);
    }
    // An empty file is truncated, not a crash on a null mapping.
    std::ofstream(dir.file("empty.gguf"), std::ios::binary).flush();
    EXPECT_THROW(gguf_file::open(dir.file("empty.gguf")), error);
}

// ---------------------------------------------------------------------------------------------
// Corrupt hand-made files: one per rule

TEST(gguf_corrupt, bad_magic) {
    bytes f;
    f.raw({'G', 'G', 'M', 'L'}).u32(3).u64(0).u64(0);
    expect_bad(f, {"bad magic", "GGUF", "47 47 4d 4c"});
    bytes g;
    g.raw({'g', 'g'});  // shorter than the magic
    expect_bad(g, {"truncated header", "2 bytes"});
}

TEST(gguf_corrupt, version_1_is_unsupported) {
    bytes f;
    f.header(0, 0, 1);
    expect_bad(f, {"unsupported", "version 1"});
    bytes g;  // a short v1 file is reported as v1, not as truncated
    g.header(0, 0, 1).b.resize(10);
    expect_bad(g, {"unsupported", "version 1"});
}

TEST(gguf_corrupt, unknown_version) {
    bytes f;
    f.header(0, 0, 4);
    expect_bad(f, {"unknown", "version 4", "expected 2 or 3"});
    bytes g;
    g.header(0, 0, 0);
    expect_bad(g, {"unknown", "version 0"});
}

TEST(gguf_corrupt, big_endian_file) {
    bytes f;
    f.header(0, 0, 0x03000000u);
    expect_bad(f, {"big-endian"});
}

TEST(gguf_corrupt, truncated_header) {
    expect_bad(bytes{}, {"truncated header", "0 bytes"});
    bytes f;
    f.raw({'G', 'G', 'U', 'F'}).u32(3).u64(0);  // n_kv missing
    expect_bad(f, {"truncated header", "16 bytes", "24"});
}

TEST(gguf_corrupt, count_past_end_of_file) {
    bytes f;
    f.header(0, 1ull << 60);
    expect_bad(f, {"n_kv", "1152921504606846976", "past the end"});
    bytes g;
    g.header(std::numeric_limits<uint64_t>::max(), 0);
    expect_bad(g, {"n_tensors", "past the end"});
    bytes h;  // passes the first check, fails after the metadata used up the bytes
    h.header(1, 1).kv_string("k", std::string(40, 'x'));
    expect_bad(h, {"n_tensors", "after the metadata"});
}

TEST(gguf_corrupt, string_length_past_end_of_file) {
    bytes f;
    f.header(0, 1).u64(1ull << 40).raw({'a', 'b'}).zeros(16);
    expect_bad(f, {"metadata pair #0", "key", "string length 1099511627776", "past the end"});
    bytes g;
    g.header(0, 1).str("k").u32(8).u64(std::numeric_limits<uint64_t>::max());
    expect_bad(g, {"metadata key 'k'", "string value", "string length 18446744073709551615", "past the end"});
    bytes h;
    h.header(1, 0).u64(100).raw({'w'}).zeros(40);
    expect_bad(h, {"tensor info #0", "name", "string length 100"});
}

TEST(gguf_corrupt, array_length_past_end_of_file_allocates_nothing) {
    // Counts this large would throw std::bad_alloc (not hill::error) if they were reserved.
    for (uint32_t et : {0u, 4u, 8u, 9u, 12u}) {
        bytes f;
        f.header(0, 1).str("arr").u32(9).u32(et).u64(1ull << 61).zeros(64);
        expect_bad(f, {"metadata key 'arr'", "array length 2305843009213693952", "past the end"});
    }
    bytes g;  // one element short
    g.header(0, 1).str("arr").u32(9).u32(4).u64(3).u32(1).u32(2);
    expect_bad(g, {"array length 3", "past the end"});
}

TEST(gguf_corrupt, truncated_value) {
    bytes f;
    f.header(0, 1).str("k").u32(10).u32(7);  // u64 value cut short
    expect_bad(f, {"truncated file", "metadata key 'k'", "u64 value", "needs 8 bytes", "only 4 remain"});
    bytes g;
    g.header(0, 1).str("kkkkk");  // no value type
    expect_bad(g, {"truncated file", "value type"});
}

TEST(gguf_corrupt, unknown_value_type) {
    bytes f;
    f.header(0, 1).str("k").u32(13).u32(0);
    expect_bad(f, {"metadata key 'k'", "unknown value type 13"});
    bytes g;
    g.header(0, 1).str("k").u32(9).u32(99).u64(0);
    expect_bad(g, {"metadata key 'k'", "unknown value type 99"});
}

TEST(gguf_corrupt, bool_other_than_0_or_1) {
    bytes f;
    f.header(0, 1).str("k").u32(7).u8(2);
    expect_bad(f, {"metadata key 'k'", "bool", "is 2", "0 or 1"});
}

TEST(gguf_corrupt, arrays_nested_too_deep) {
    bytes f;
    f.header(0, 1).str("deep").u32(9);
    for (int d = 0; d < 20; ++d) f.u32(9).u64(1);
    f.u32(0).u64(0);
    expect_bad(f, {"metadata key 'deep'", "nested deeper than 8"});

    bytes ok;  // 8 levels are fine
    ok.header(0, 1).str("deep").u32(9);
    for (int d = 0; d < 7; ++d) ok.u32(9).u64(1);
    ok.u32(0).u64(1).u8(42);
    const auto g = parse(ok);
    const gguf_value * v = g->find("deep");
    for (int d = 0; d < 7; ++d) v = &v->array.at(0);
    EXPECT_EQ(v->array.at(0).u, 42u);
}

TEST(gguf_corrupt, duplicate_metadata_key) {
    bytes f;
    f.header(0, 2).kv_u32("general.alignment", 32).kv_u32("general.alignment", 64);
    expect_bad(f, {"duplicate metadata key 'general.alignment'"});
}

TEST(gguf_corrupt, bad_alignment) {
    for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
        bytes f;
        f.header(0, 1).kv_u32("general.alignment", a);
        expect_bad(f, {"general.alignment", "power of two", std::to_string(a)});
    }
    bytes g;
    g.header(0, 1).str("general.alignment").u32(10).u64(32);
    expect_bad(g, {"general.alignment", "expected type u32", "u64"});
    bytes h;
    h.header(0, 1).str("general.alignment").u32(8).str("32");
    expect_bad(h, {"general.alignment", "expected type u32", "string"});
}

TEST(gguf_corrupt, duplicate_tensor_name) {
    bytes f;
    f.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad_to(32).zeros(64);
    expect_bad(f, {"duplicate tensor name 'w'"});
}

TEST(gguf_corrupt, unsupported_tensor_type) {
    expect_bad(one_tensor_file({32}, 16, 0, 1024), {"tensor 'w'", "unsupported tensor type 16", "IQ2_XXS", "Q4_K"});
    expect_bad(one_tensor_file({32}, 1000, 0, 1024), {"tensor 'w'", "unsupported tensor type 1000"});
    expect_bad(one_tensor_file({32}, 31, 0, 1024), {"unsupported tensor type 31"});
}

TEST(gguf_corrupt, n_dims_out_of_range) {
    expect_bad(one_tensor_file({1, 1, 1, 1, 1}, 0, 0, 64), {"tensor 'w'", "n_dims = 5", "1..4"});
    expect_bad(one_tensor_file({}, 0, 0, 64), {"tensor 'w'", "n_dims = 0", "1..4"});
    bytes f;  // a huge n_dims must not be used as a count
    f.header(1, 0).str("w").u32(0xffffffffu).zeros(64);
    expect_bad(f, {"n_dims = 4294967295"});
}

TEST(gguf_corrupt, non_positive_dimension) {
    expect_bad(one_tensor_file({4, 0}, 0, 0, 64), {"tensor 'w'", "ne[1] = 0", "positive"});
    expect_bad(one_tensor_file({std::numeric_limits<uint64_t>::max()}, 0, 0, 64), {"ne[0] = -1"});
    expect_bad(one_tensor_file({1ull << 63}, 0, 0, 64), {"ne[0] = -9223372036854775808"});
}

TEST(gguf_corrupt, shape_overflow) {
    expect_bad(one_tensor_file({1ull << 32, 1ull << 32}, 0, 0, 64), {"tensor 'w'", "overflows", "element count"});
    expect_bad(one_tensor_file({1ull << 40, 1ull << 30, 1ull << 40}, 0, 0, 64), {"overflows", "element count"});
    // Element count fits in 63 bits, bytes do not: 2^62 f32 = 2^64 bytes.
    expect_bad(one_tensor_file({1ull << 62}, 0, 0, 64), {"overflows", "byte size", "F32"});
    expect_bad(one_tensor_file({1ull << 60, 4}, 0, 0, 64), {"overflows", "byte size"});
}

TEST(gguf_corrupt, row_not_a_multiple_of_the_block_size) {
    expect_bad(one_tensor_file({33, 2}, 8, 0, 1024), {"tensor 'w'", "ne[0] = 33", "block size 32", "Q8_0"});
    expect_bad(one_tensor_file({16}, 2, 0, 1024), {"ne[0] = 16", "Q4_0"});
}

TEST(gguf_corrupt, tensor_data_past_end_of_file) {
    expect_bad(one_tensor_file({16}, 0, 0, 63), {"tensor 'w'", "past the end of the file"});
    expect_bad(one_tensor_file({16}, 0, 1ull << 62, 64), {"tensor 'w'", "past the end of the file"});
    expect_bad(one_tensor_file({16}, 0, std::numeric_limits<uint64_t>::max() - 31, 64), {"past the end"});
    bytes f;  // data section (after the padding) is missing altogether
    f.header(1, 0).tensor("w", {1}, 0, 0);
    expect_bad(f, {"tensor 'w'", "past the end of the file"});
    EXPECT_NO_THROW(parse(one_tensor_file({16}, 0, 0, 64)));
}

TEST(gguf_corrupt, misaligned_tensor_offset) {
    expect_bad(one_tensor_file({4}, 0, 16, 64), {"tensor 'w'", "misaligned", "16", "alignment 32"});
    bytes f;
    f.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {4}, 0, 32).pad_to(64).zeros(128);
    expect_bad(f, {"misaligned", "offset 32", "alignment 64"});
}

TEST(gguf_corrupt, overlapping_tensors) {
    bytes f;
    f.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad_to(32).zeros(96);
    expect_bad(f, {"tensor 'b' (F32 [16], 64 bytes)", "offset 32, expected 64", "overlapping",
                   "'a' (F32 [16], 64 bytes at offset 0)"});
    bytes g;  // same offset
    g.header(2, 0).tensor("a", {1}, 0, 0).tensor("b", {1}, 0, 0).pad_to(32).zeros(32);
    expect_bad(g, {"tensor 'b'", "offset 0, expected 32", "overlapping"});
}

// The tensors' data follow each other in the order of the tensor infos, the first at 0, each at the
// end of the one before rounded up to the alignment (llama.cpp's reader: "has offset X, expected Y").
TEST(gguf_corrupt, tensor_data_not_at_the_running_offset) {
    bytes f;  // listed out of offset order
    f.header(2, 0).tensor("second", {8}, 0, 32).tensor("first", {8}, 0, 0).pad_to(32).zeros(64);
    expect_bad(f, {"tensor 'second' (F32 [8], 32 bytes)", "offset 32, expected 0", "first tensor"});
    bytes g;  // a gap beyond the alignment padding
    g.header(2, 0).tensor("a", {4}, 0, 0).tensor("b", {4}, 0, 64).pad_to(32).zeros(96);
    expect_bad(g, {"tensor 'b'", "offset 64, expected 32", "gap of 32 bytes", "'a' (F32 [4], 16 bytes at offset 0)",
                   "alignment 32"});
    bytes h;  // first tensor not at 0
    h.header(1, 0).tensor("w", {4}, 0, 32).pad_to(32).zeros(64);
    expect_bad(h, {"tensor 'w'", "offset 32, expected 0"});
}

// A file of token_embd.weight (F32 [8, 4]) and output_norm.weight (F32 [8]), in that order or the
// other, whose tensor info then says token_embd.weight is F16: half the bytes of its data.
bytes embedding_retyped_as_f16(bool embedding_last) {
    test::temp_dir dir;
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    const std::vector<float> x(32, 1.0f);
    if (!embedding_last) w.add_tensor("token_embd.weight", ggml_type::f32, {8, 4}, x.data());
    w.add_tensor("output_norm.weight", ggml_type::f32, {8}, x.data());
    if (embedding_last) w.add_tensor("token_embd.weight", ggml_type::f32, {8, 4}, x.data());
    w.write(dir.file("m.gguf"));
    bytes f;
    f.b = read_all(dir.file("m.gguf"));
    EXPECT_NO_THROW(parse(f));
    // The type follows the name, n_dims and the two dimensions.
    const std::string name = "token_embd.weight";
    const auto at = std::search(f.b.begin(), f.b.end(), name.begin(), name.end());
    EXPECT_NE(at, f.b.end());
    const size_t type_at = size_t(at - f.b.begin()) + name.size() + 4 + 2 * 8;
    uint32_t type = 0;
    std::memcpy(&type, f.b.data() + type_at, 4);
    EXPECT_EQ(type, 0u);  // F32
    type = 1;             // F16
    std::memcpy(f.b.data() + type_at, &type, 4);
    return f;
}

// The bug: a tensor info's type changed to a smaller one (token_embd.weight F32 -> F16) was
// accepted, every offset aligned and in bounds, and the model read half the embedding as F16.
TEST(gguf_corrupt, tensor_type_changed_to_a_smaller_type) {
    expect_bad(embedding_retyped_as_f16(false),
               {"tensor 'output_norm.weight' (F32 [8], 32 bytes)", "offset 128, expected 64",
                "'token_embd.weight' (F16 [8, 4], 64 bytes at offset 0)"});
}

// The same change on the last tensor moves no offset: the data section then runs on past the last
// tensor's end by more than the alignment padding.
TEST(gguf_corrupt, last_tensor_type_changed_to_a_smaller_type) {
    expect_bad(
        embedding_retyped_as_f16(true),
        {"64 bytes after the last tensor 'token_embd.weight' (F16 [8, 4], 64 bytes at offset 32)", "alignment 32"});
    // Padding short of the alignment after the last tensor stays valid (writers pad after every tensor).
    bytes g;
    g.header(1, 0).tensor("w", {4}, 0, 0).pad_to(32).zeros(16 + 31);
    EXPECT_NO_THROW(parse(g));
    g.zeros(1);
    expect_bad(g, {"32 bytes after the last tensor 'w'"});
}

TEST(gguf_corrupt, truncated_tensor_info) {
    bytes f;
    f.header(1, 0).str("token_embd.weight").u32(2).u64(4);  // second ne, type and offset missing
    expect_bad(f, {"truncated file", "tensor 'token_embd.weight'", "ne"});
}

TEST(gguf_corrupt, every_truncation_of_a_valid_file_is_an_error) {
    test::temp_dir dir;
    gguf_writer w;
    for (const auto & [k, v] : all_value_types()) w.set_value(k, v);
    const float x[32] = {};
    w.add_tensor("a", ggml_type::f32, {32}, x);
    w.add_tensor("b", ggml_type::q8_0, {32}, x);
    w.write(dir.file("v.gguf"));
    const std::vector<uint8_t> file = read_all(dir.file("v.gguf"));
    ASSERT_NO_THROW(gguf_file::parse(file.data(), file.size(), "v"));
    for (size_t n = 0; n < file.size(); ++n) {
        std::vector<uint8_t> cut(file.begin(), file.begin() + std::ptrdiff_t(n));  // own buffer: ASan sees overreads
        try {
            gguf_file::parse(cut.data(), cut.size(), "cut");
            ADD_FAILURE() << "a file cut to " << n << " of " << file.size() << " bytes parsed";
        } catch (const error & e) {
            EXPECT_EQ(e.code(), exit_code::bad_input);
        }
    }
}

TEST(gguf_corrupt, every_single_byte_flip_is_parsed_or_rejected) {
    // Not a fuzzer, but covers every field of a real layout in every build.
    test::temp_dir dir;
    gguf_writer w;
    w.set_string("general.architecture", "llama");
    w.set_i32_array("ints", {1, 2});
    w.set_string_array("strs", {"a", "bc"});
    const uint8_t q[34 * 2] = {};
    w.add_tensor("q", ggml_type::q8_0, {32, 2}, q);
    w.add_tensor("f", ggml_type::f16, {4}, q);
    w.write(dir.file("v.gguf"));
    const std::vector<uint8_t> file = read_all(dir.file("v.gguf"));
    for (size_t at = 0; at < file.size(); ++at) {
        for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
            std::vector<uint8_t> m = file;
            m[at] ^= flip;
            try {
                gguf_file::parse(m.data(), m.size(), "flip");
            } catch (const error & e) {
                EXPECT_EQ(e.code(), exit_code::bad_input);
            }
        }
    }
}

// Inputs in the fuzz corpus (seeds and the inputs of fixed crashes) parse or fail cleanly.
TEST(gguf_corrupt, fuzz_corpus_replays_cleanly) {
    const std::filesystem::path dir = std::filesystem::path(HILL_SOURCE_DIR) / "tests/fuzz/corpus/gguf";
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " not found";
    size_t n = 0;
    for (const auto & e : std::filesystem::directory_iterator(dir)) {
        const std::vector<uint8_t> b = read_all(e.path().string());
        SCOPED_TRACE(e.path().string());
        try {
            gguf_file::parse(b.data(), b.size(), e.path().string());
        } catch (const error & err) {
            EXPECT_EQ(err.code(), exit_code::bad_input);
        }
        ++n;
    }
    EXPECT_GT(n, 0u);
}

}  // namespace
}  // namespace hill
