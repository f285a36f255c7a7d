#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/model/safetensors.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::safetensors_bytes;
using testing::TempDir;
using testing::write_file;

TEST(Safetensors, ReadsF32F16Bf16Values) {
  TempDir dir;
  const auto a = at::arange(6, at::kFloat).reshape({2, 3});
  const auto b = at::tensor({1.5, -2.25}).to(at::kHalf);
  const auto c = at::tensor({0.5, 3.0, -1.0}).to(at::kBFloat16);
  testing::write_safetensors(dir / "m.safetensors", {{"a", a}, {"b", b}, {"c", c}});
  const auto f = SafetensorsFile::open(dir / "m.safetensors");
  EXPECT_EQ(f->entries().size(), 3u);
  EXPECT_TRUE(at::equal(f->view("a"), a));
  EXPECT_TRUE(at::equal(f->view("b"), b));
  EXPECT_TRUE(at::equal(f->view("c"), c));
  EXPECT_EQ(f->view("c").scalar_type(), at::kBFloat16);
}

TEST(Safetensors, ViewOutlivesTheFileHandle) {
  TempDir dir;
  testing::write_safetensors(dir / "m.safetensors", {{"a", at::ones({4})}});
  at::Tensor v;
  {
    auto f = SafetensorsFile::open(dir / "m.safetensors");
    v = f->view("a");
  }
  EXPECT_FLOAT_EQ(v.sum().item<float>(), 4.0f);
}

struct BadCase {
  std::string name;
  std::string bytes;
  std::string expected;
};

std::vector<BadCase> bad_cases() {
  const std::string eight(8, '\0');
  auto hdr = [](nlohmann::json h) { return h; };
  return {
      {"too_short", "abc", "truncated"},
      {"header_longer_than_file", std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) + "{}",
       "exceeds"},
      {"not_json", safetensors_bytes(nlohmann::json::object(), "").replace(8, 2, "{["),
       "not valid JSON"},
      {"not_object", safetensors_bytes(nlohmann::json::array({1, 2}), ""),
       "expected a JSON object"},
      {"missing_fields", safetensors_bytes(hdr({{"w", {{"dtype", "F32"}}}}), ""),
       "must have dtype"},
      {"unknown_dtype",
       safetensors_bytes(hdr({{"w", {{"dtype", "F7"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}),
                         "abcd"),
       "unsupported dtype 'F7'"},
      {"out_of_range",
       safetensors_bytes(
           hdr({{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}}), eight),
       "out of range"},
      {"size_mismatch",
       safetensors_bytes(hdr({{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}}}),
                         eight),
       "needs 12"},
      {"overlap",
       safetensors_bytes(hdr({{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                              {"b", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4, 8}}}}}),
                         eight),
       "overlaps"},
      {"hole",
       safetensors_bytes(hdr({{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4, 8}}}}}),
                         eight),
       "hole"},
      {"trailing_bytes",
       safetensors_bytes(hdr({{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}),
                         eight),
       "trailing"},
      // 2^62 x 4 floats wraps to 0 bytes in 64 bits; 2^63 does not fit a tensor dimension.
      {"size_overflow",
       safetensors_bytes(
           hdr({{"a",
                 {{"dtype", "F32"}, {"shape", {uint64_t{1} << 62, 4}}, {"data_offsets", {0, 0}}}}}),
           ""),
       "shape [4611686018427387904,4] is too large: its size overflows 64 bits"},
      {"dimension_overflow",
       safetensors_bytes(
           hdr({{"a",
                 {{"dtype", "F32"}, {"shape", {uint64_t{1} << 63, 0}}, {"data_offsets", {0, 0}}}}}),
           ""),
       "is too large"},
      {"negative_shape",
       safetensors_bytes(
           hdr({{"a", {{"dtype", "F32"}, {"shape", {-1}}, {"data_offsets", {0, 4}}}}}), "abcd"),
       "non-negative"},
  };
}

void PrintTo(const BadCase& b, std::ostream* os) { *os << b.name; }

class SafetensorsBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(SafetensorsBadInput, IsRefusedNamingFileAndDefect) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  write_file(path, GetParam().bytes);
  const std::string msg = error_of([&] { SafetensorsFile::open(path); });
  EXPECT_THAT(msg, HasSubstr(path.string()));
  EXPECT_THAT(msg, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(Defects, SafetensorsBadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Safetensors, MissingFileIsNamed) {
  EXPECT_THAT(error_of([] { SafetensorsFile::open("/nonexistent/x.safetensors"); }),
              HasSubstr("/nonexistent/x.safetensors"));
}

TEST(Checkpoint, ShardIndexMustPointAtExistingTensors) {
  TempDir dir;
  testing::write_safetensors(dir / "s1.safetensors", {{"a", at::ones({2})}});
  write_file(dir / "model.safetensors.index.json",
             R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})");
  EXPECT_THAT(error_of([&] { Checkpoint::open_folder(dir.path()); }),
              HasSubstr("places tensor 'b' in 's1.safetensors', which does not contain it"));
  write_file(dir / "model.safetensors.index.json", R"({"weight_map": {"a": "s2.safetensors"}})");
  EXPECT_THAT(error_of([&] { Checkpoint::open_folder(dir.path()); }), HasSubstr("does not exist"));
}

TEST(Checkpoint, FolderWithoutWeightsIsRefused) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { Checkpoint::open_folder(dir.path()); }),
              HasSubstr("found neither model.safetensors nor model.safetensors.index.json"));
}

}  // namespace
}  // namespace gengraph
