// The trace backend beyond conformance: the on-disk cache, files traced elsewhere, bad files.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/codegen/fuser/interface.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/export.h>

#include <functional>

#include "backends/register_builtin.h"
#include "backends/trace/traced_step.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/util/json_at.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

std::shared_ptr<const CausalLM> tiny(at::ScalarType dtype = at::kFloat) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.seed = 5;
  s.load.dtype = dtype;
  return load_model(s).model;
}

std::unique_ptr<ForwardBackend> make(const std::string& name, std::shared_ptr<const CausalLM> m,
                                     std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  return BackendRegistry::instance().create(name, std::move(m),
                                            BackendOptions(name, std::move(options)));
}

ResolvedSettings greedy(int64_t n) {
  ResolvedSettings g;
  g.max_new_tokens = n;
  return g;
}

const std::vector<std::vector<int64_t>> kPrompts = {{1, 2, 3, 4}, {5, 6}};

TEST(TraceBackend, SavesTracesAndASecondRunLoadsThem) {
  TempDir dir;
  const auto m = tiny();
  auto first = make("trace", m, {{"cache_dir", dir.path().string()}});
  const auto a = Generator(greedy(6)).generate(*first, kPrompts);
  EXPECT_EQ(first->report().at("traces_built"), 1.0);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    files += e.path().extension() == ".pt";
  EXPECT_EQ(files, 1);
  auto second = make("trace", m, {{"cache_dir", dir.path().string()}});
  const auto b = Generator(greedy(6)).generate(*second, kPrompts);
  EXPECT_EQ(second->report().at("traces_built"), 0.0);
  EXPECT_EQ(second->report().at("traces_loaded"), 1.0);
  for (size_t i = 0; i < kPrompts.size(); ++i)
    EXPECT_EQ(a.outputs[i][0].tokens, b.outputs[i][0].tokens);
  // The cached file passed as `file:` runs for the same weights, and is refused for others: the
  // trace holds its weights, so it would silently compute another model.
  std::filesystem::path file;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) file = e.path();
  auto third = make("trace", m, {{"file", file.string()}});
  const auto c = Generator(greedy(6)).generate(*third, kPrompts);
  for (size_t i = 0; i < kPrompts.size(); ++i)
    EXPECT_EQ(a.outputs[i][0].tokens, c.outputs[i][0].tokens);
  ModelSource other;
  other.preset = "gpt2-tiny";
  other.seed = 6;
  auto fourth = make("trace", load_model(other).model, {{"file", file.string()}});
  EXPECT_THAT(error_of([&] { Generator(greedy(6)).generate(*fourth, kPrompts); }),
              HasSubstr("model weights (fingerprint)"));
}

TEST(TraceBackend, ANewShapeIsTracedAgainAndOptionsWork) {
  auto t = make("trace", tiny(), {{"freeze", "false"}, {"profiling_runs", "2"}});
  Generator(greedy(3)).generate(*t, kPrompts);
  Generator(greedy(3)).generate(*t, {{1, 2, 3, 4, 5, 6}});  // other rows and prompt length
  EXPECT_EQ(t->report().at("traces_built"), 2.0);
  EXPECT_GT(t->report().at("warmup_seconds"), 0.0);
  auto o = make("trace", tiny(), {{"optimize_for_inference", "true"}});
  auto e = make("eager", tiny());
  EXPECT_EQ(Generator(greedy(5)).generate(*o, kPrompts).outputs[0][0].tokens,
            Generator(greedy(5)).generate(*e, kPrompts).outputs[0][0].tokens);
}

// Speculative decoding's verify in one forward: positions are padded to a bucket (a multiple of
// verify_bucket, 4 by default, capped by the room left), and the filler positions leave nothing
// behind: the logits equal eager's, and what follows sees only the positions asked for.
TEST(TraceBackend, VerifiesInOneForwardPerBucketAndForgetsTheFiller) {
  const auto m = tiny();
  auto t = make("trace", m);
  auto e = make("eager", m, {{"cache", "static"}});
  const auto ids = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong).unsqueeze(0); };
  const auto inputs = [&](std::vector<int64_t> v, int64_t from) {
    const at::Tensor x = ids(v);
    return StepInputs{x, at::arange(from, from + x.size(1), at::kLong).unsqueeze(0), x.ne(-1), {}};
  };
  for (auto* b : {t.get(), e.get()}) {
    b->prepare(1, 10);
    b->prefill(inputs({1, 2, 3}, 0));
  }
  // 3 positions at length 3 (room 7): traced as 4, the fourth dropped.
  const at::Tensor tv = t->verify(inputs({7, 8, 9}, 3)), ev = e->verify(inputs({7, 8, 9}, 3));
  ASSERT_EQ(tv.sizes(), ev.sizes());
  EXPECT_TRUE(at::allclose(tv, ev, 1e-4, 1e-5));
  EXPECT_EQ(t->report().at("verify_traces"), 1.0);
  t->rewind(1);
  e->rewind(1);
  // A decode at the dropped filler's slot sees only the kept history.
  const at::Tensor td = t->decode(inputs({4}, 5)), ed = e->decode(inputs({4}, 5));
  EXPECT_TRUE(at::allclose(td, ed, 1e-4, 1e-5));
  // 3 positions with room for 4 (length 6 of 10): the bucket of 4 again, no filler.
  EXPECT_TRUE(
      at::allclose(t->verify(inputs({5, 6, 7}, 6)), e->verify(inputs({5, 6, 7}, 6)), 1e-4, 1e-5));
  EXPECT_EQ(t->report().at("verify_traces"), 1.0);
  // 3 positions with room for 3 only (length 7 after a rewind): capped, an exact trace of 3.
  t->rewind(2);
  e->rewind(2);
  EXPECT_TRUE(
      at::allclose(t->verify(inputs({1, 2, 3}, 7)), e->verify(inputs({1, 2, 3}, 7)), 1e-4, 1e-5));
  EXPECT_EQ(t->report().at("verify_traces"), 2.0);
  // One position is a decode step; none is left after it.
  t->rewind(1);
  e->rewind(1);
  EXPECT_TRUE(at::allclose(t->verify(inputs({8}, 9)), e->verify(inputs({8}, 9)), 1e-4, 1e-5));
  EXPECT_EQ(t->report().at("verify_traces"), 2.0);
  EXPECT_THROW(t->verify(inputs({8}, 10)), Error);  // no room left
}

// verify_bucket is a count of positions from 1 to 1024, on both backends that verify in buckets;
// anything else is refused naming the backend, the option and what was found.
TEST(TraceBackend, VerifyBucketOutOfRangeIsRefusedByName) {
  const auto m = tiny();
  for (const std::string backend : {"trace", "cuda_graph"}) {
    for (const std::string value : {"0", "1025", "four"}) {
      std::map<std::string, std::string> options = {{"verify_bucket", value}};
      if (backend == "cuda_graph") options["capture"] = "false";  // runs without a GPU
      EXPECT_THAT(
          error_of([&] { make(backend, m, options); }),
          HasSubstr("backend '" + backend + "' option 'verify_bucket': " +
                    (value == "1025" ? "too large (the most is 1024), found '1025'"
                                     : "expected an integer in [1, 1024], found '" + value + "'")));
    }
  }
}

// LibTorch's fuser switches and profiled-run count are process-wide. A trace's options apply only
// while its own step runs: two rows of one experiment with other settings do not change each other.
TEST(TraceBackend, FuserAndProfilingOptionsDoNotLeakOutOfTheStep) {
  const bool te = torch::jit::tensorExprFuserEnabled(), cpu = torch::jit::canFuseOnCPU();
  const size_t runs = torch::jit::getNumProfiledRuns();
  auto none = make("trace", tiny(), {{"fuser", "none"}, {"profiling_runs", "3"}});
  auto te_cpu = make("trace", tiny(), {{"fuser", "te"}});
  auto e = make("eager", tiny());
  const auto want = Generator(greedy(5)).generate(*e, kPrompts);
  for (auto* t : {none.get(), te_cpu.get()}) {
    Generation got;
    const std::string error = error_of([&] { got = Generator(greedy(5)).generate(*t, kPrompts); });
    if (t == te_cpu.get() && error != "<no error>") {
      // The PyPI LibTorch has no LLVM, so TensorExpr cannot fuse on CPU: a clear error, then.
      EXPECT_THAT(error, HasSubstr("fuser: te fuses on CPU only in a LibTorch built with LLVM"));
    } else {
      ASSERT_EQ(error, "<no error>");
      for (size_t i = 0; i < kPrompts.size(); ++i)
        EXPECT_EQ(want.outputs[i][0].tokens, got.outputs[i][0].tokens);
    }
    EXPECT_EQ(torch::jit::tensorExprFuserEnabled(), te);
    EXPECT_EQ(torch::jit::canFuseOnCPU(), cpu);
    EXPECT_EQ(torch::jit::getNumProfiledRuns(), runs);
  }
}

// A file made for one shape or dtype is refused, naming the field, what it was made for and what
// the run needs.
TEST(TraceBackendErrors, FileForAnotherShapeOrDtype) {
  TempDir dir;
  const auto m = tiny();
  const auto path = dir / "t.pt";
  TracedStep::trace(*m, expected_meta(*m, 2, 4, 10), {}).save(path);
  auto run = [&](std::shared_ptr<const CausalLM> model, std::vector<std::vector<int64_t>> prompts,
                 int64_t n) {
    auto t = make("trace", std::move(model), {{"file", path.string()}});
    return error_of([&] { Generator(greedy(n)).generate(*t, prompts); });
  };
  EXPECT_EQ(run(m, kPrompts, 6), "<no error>");
  EXPECT_THAT(run(m, {{1, 2, 3, 4}}, 6),
              HasSubstr("was made for rows 2, but this run needs rows 1"));
  EXPECT_THAT(run(m, kPrompts, 7),
              HasSubstr("was made for max_length 10, but this run needs max_length 11"));
  EXPECT_THAT(run(m, {{1, 2, 3}, {4}}, 6),
              HasSubstr("prompt_length 4, but this run needs prompt_length 3"));
  EXPECT_THAT(run(tiny(at::kBFloat16), kPrompts, 6),
              HasSubstr("made for dtype float32, but this run needs dtype bfloat16"));
}

TEST(TraceBackendErrors, MissingCorruptOrIncompleteFiles) {
  TempDir dir;
  EXPECT_THAT(error_of([&] {
                make("trace", tiny(), {{"file", (dir / "none.pt").string()}});
              }),
              HasSubstr("does not exist"));
  testing::write_file(dir / "junk.pt", "not a zip archive");
  const auto m = tiny();
  const TraceMeta meta = expected_meta(*m, 2, 4, 10);
  EXPECT_THAT(error_of([&] { TracedStep::load(dir / "junk.pt", at::kCPU, meta); }),
              HasSubstr("is not a readable TorchScript archive"));
  // A module with a prefill method only.
  torch::jit::Module partial(c10::QualifiedName("__torch__.Partial"));
  partial.define("def prefill(self, x):\n  return x\n");
  partial.save((dir / "partial.pt").string(), {{"gengraph.json", meta.to_json().dump()}});
  EXPECT_THAT(error_of([&] { TracedStep::load(dir / "partial.pt", at::kCPU, meta); }),
              HasSubstr("lacks method(s) decode"));
  partial.save((dir / "nometa.pt").string());
  EXPECT_THAT(error_of([&] { TracedStep::load(dir / "nometa.pt", at::kCPU, meta); }),
              HasSubstr("has no gengraph.json"));
  auto bad_meta = meta.to_json();
  bad_meta["layers"] = "two";
  partial.save((dir / "badmeta.pt").string(), {{"gengraph.json", bad_meta.dump()}});
  EXPECT_EQ(error_of([&] { TracedStep::load(dir / "badmeta.pt", at::kCPU, meta); }),
            "trace file '" + (dir / "badmeta.pt").string() +
                "': gengraph.json: key 'layers': expected an integer, found the string \"two\"");
  // Not JSON at all: the parser's reason and its place, not its exception's text.
  partial.save((dir / "notjson.pt").string(), {{"gengraph.json", "{\"layers\": 2,"}});
  const std::string not_json =
      error_of([&] { TracedStep::load(dir / "notjson.pt", at::kCPU, meta); });
  EXPECT_THAT(not_json, ::testing::StartsWith("trace file '" + (dir / "notjson.pt").string() +
                                              "': gengraph.json is not valid JSON: "));
  EXPECT_THAT(not_json, ::testing::EndsWith("unexpected end of input; expected string literal at "
                                            "line 1, column 14"));
  EXPECT_THAT(not_json, Not(HasSubstr("json.exception")));
  // Right metadata, wrong output: a decode that returns its input ids.
  torch::jit::Module wrong(c10::QualifiedName("__torch__.Wrong"));
  wrong.define(R"(
def prefill(self, a, b, c, d, e, f, g):
  return a
def decode(self, a, b, c, d, e, f, g):
  return a
)");
  wrong.save((dir / "wrong.pt").string(), {{"gengraph.json", meta.to_json().dump()}});
  auto t = make("trace", m, {{"file", (dir / "wrong.pt").string()}});
  EXPECT_THAT(error_of([&] { Generator(greedy(6)).generate(*t, kPrompts); }),
              HasSubstr("prefill returned [2, 4], expected [2, 1024]"));
  // Right shape, integer scores.
  torch::jit::Module ints(c10::QualifiedName("__torch__.Ints"));
  ints.define(R"(
def prefill(self, a, b, c, d, e, f, g):
  return torch.zeros([2, 1024]).long()
def decode(self, a, b, c, d, e, f, g):
  return torch.zeros([2, 1024]).long()
)");
  ints.save((dir / "ints.pt").string(), {{"gengraph.json", meta.to_json().dump()}});
  auto ti = make("trace", m, {{"file", (dir / "ints.pt").string()}});
  EXPECT_THAT(error_of([&] { Generator(greedy(6)).generate(*ti, kPrompts); }),
              HasSubstr("prefill returned Long logits, expected floating-point scores"));
}

// gengraph.json goes through the one typed reader (JsonAt): every refusal names the trace file,
// the key, what was expected and what was found, in one form; what is not JSON names the
// parser's reason and its place (parse_json_text), without nlohmann's exception prefix.
TEST(TraceBackendErrors, GengraphJsonIsReadThroughTheOneTypedReader) {
  const TraceMeta good = expected_meta(*tiny(), 2, 4, 10);
  const std::string source = "trace file 'a.pt'";
  const TraceMeta back = TraceMeta::parse(good.to_json().dump(), source);
  EXPECT_EQ(back.to_json(), good.to_json());
  auto refusal = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good.to_json();
    change(j);
    return error_of([&] { TraceMeta::parse(j.dump(), source); });
  };
  const std::string at = source + ": gengraph.json: ";
  EXPECT_EQ(refusal([](auto& j) { j["rows"] = 2.5; }),
            at + "key 'rows': expected an integer, found 2.5");
  EXPECT_EQ(refusal([](auto& j) { j["vocab_size"] = 18446744073709551615ull; }),
            at + "key 'vocab_size': expected an integer, found 18446744073709551615");
  EXPECT_EQ(refusal([](auto& j) { j["dtype"] = nullptr; }),
            at + "key 'dtype': expected a string, found null");
  EXPECT_EQ(refusal([](auto& j) { j.erase("head_dim"); }),
            at + "key 'head_dim': expected an integer, found nothing (the key is missing)");
  EXPECT_EQ(refusal([](auto& j) {
              j["model_type"] = {1, 2};
            }),
            at + "key 'model_type': expected a string, found an array of 2 entries");
  EXPECT_EQ(refusal([](auto& j) {
              j["made_by"] = {{"who", "me"}};
            }),
            at + "key 'made_by': expected a string, found an object of 1 key");
  EXPECT_EQ(refusal([](auto& j) { j["format"] = 2; }),
            at + "key 'format': expected 1 (the format this gengraph reads), found 2");
  EXPECT_EQ(refusal([](auto& j) { j = nlohmann::json::array(); }),
            source +
                ": gengraph.json: expected an object (the trace's metadata, docs/tracing.md), "
                "found an array of 0 entries");
  // A value from the file is escaped and cut, never printed raw.
  EXPECT_EQ(refusal([](auto& j) { j["layers"] = "2\n\x1b[31m"; }),
            at + "key 'layers': expected an integer, found the string \"2\\n\\u001b[31m\"");
  // Optional keys may be absent.
  nlohmann::json minimal = good.to_json();
  minimal.erase("made_by");
  minimal.erase("model_fingerprint");
  EXPECT_EQ(TraceMeta::parse(minimal.dump(), source).made_by, "");

  // Not JSON: the reason and the place, counted as the parser counts them.
  const std::string not_json = source + ": gengraph.json is not valid JSON: ";
  EXPECT_EQ(error_of([&] { TraceMeta::parse("{\n  \"layers\": 1e999\n}", source); }),
            not_json + "number overflow parsing '1e999' at line 2, column 17");
  const std::string empty = error_of([&] { TraceMeta::parse("", source); });
  EXPECT_THAT(empty, ::testing::StartsWith(not_json));
  EXPECT_THAT(empty, ::testing::EndsWith(" at line 1, column 1"));
  EXPECT_THAT(empty, HasSubstr("unexpected end of input"));
  for (const std::string& e : {empty, error_of([&] { TraceMeta::parse("[1] x", source); })}) {
    EXPECT_THAT(e, Not(HasSubstr("json.exception")));
    EXPECT_THAT(e, Not(HasSubstr("parse error at")));  // the place is said once, at the end
  }
}

// parse_json_text's reason quotes what the parser last read: bytes that are not UTF-8 become '?',
// control characters are escaped, and a long one is cut, so that the message stays short, valid
// text, whatever the file holds.
TEST(TraceBackendErrors, ParseErrorsStayShortValidText) {
  const std::string bad_utf8 = error_of([] { parse_json_text("[\"a\xff\xfe\"]", "'x.json'"); });
  EXPECT_THAT(bad_utf8, ::testing::StartsWith("'x.json' is not valid JSON: "));
  EXPECT_THAT(bad_utf8, HasSubstr("ill-formed UTF-8 byte; last read: '\"a?'"));
  EXPECT_THAT(bad_utf8, ::testing::EndsWith(" at line 1, column 4"));
  const std::string long_string = "[\"" + std::string(5000, 'a') + "\x7f\x01";
  const std::string cut = error_of([&] { parse_json_text(long_string, "'y.json'"); });
  EXPECT_THAT(cut, HasSubstr("aaa... at line 1, column 5004"));
  EXPECT_LT(cut.size(), 400u);
  // DEL is no parse error in a string; the C0 control after it is, and both are shown escaped.
  const std::string controls =
      error_of([&] { parse_json_text("{\"k\": \"\x7f\x01\"}", "'z.json'"); });
  EXPECT_THAT(controls, HasSubstr("control character U+0001 (SOH) must be escaped"));
  EXPECT_THAT(controls, HasSubstr("\\u007f<U+0001>"));
  EXPECT_EQ(controls.find('\x7f'), std::string::npos);
  EXPECT_EQ(parse_json_text("{\"k\": [1, 2.5, null]}", "'ok.json'"),
            nlohmann::json({{"k", {1, 2.5, nullptr}}}));
}

TEST(TraceBackendErrors, OptionsAreChecked) {
  EXPECT_THAT(error_of([] {
                make("trace", tiny(), {{"fuser", "nnc"}});
              }),
              HasSubstr("option 'fuser': expected one of default, none, te"));
  EXPECT_THAT(error_of([] {
                make("trace", tiny(), {{"file", "a.pt"}, {"cache_dir", "/tmp"}});
              }),
              HasSubstr("exclude each other"));
  EXPECT_THAT(error_of([] {
                make("trace", tiny(), {{"profiling_runs", "-1"}});
              }),
              HasSubstr("expected an integer in [0, 100]"));
}

}  // namespace
}  // namespace gengraph
