#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "experiments/experiment/experiment_config.h"
#include "framework/util/files.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

const char* kValid = R"(name: t
model: {preset: gpt2-tiny, seed: 3, dtype: bfloat16}
backends:
  - eager
  - {name: eager, label: static, options: {cache: static}}
inputs:
  prompts: [[1, 2, 3], [4]]
generation:
  max_new_tokens: 8
  eos_token_id: [1, 2]
run: {warmup: 0, repeats: 2, seed: 5}
)";

TEST(ExperimentConfig, ParsesEverySection) {
  const auto c = parse_experiment(kValid, "t.yaml");
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.model.preset, "gpt2-tiny");
  EXPECT_EQ(c.model.seed, 3u);
  EXPECT_EQ(c.model.dtype, "bfloat16");
  ASSERT_EQ(c.backends.size(), 2u);
  EXPECT_EQ(c.backends[1].label, "static");
  EXPECT_EQ(c.backends[1].options.at("cache"), "static");
  EXPECT_EQ(c.inputs.prompts, (std::vector<std::vector<int64_t>>{{1, 2, 3}, {4}}));
  EXPECT_EQ(c.generation["max_new_tokens"], 8);
  EXPECT_EQ(c.run.repeats, 2);
  EXPECT_EQ(c.run.seed, 5u);
}

// A row's `model:` reads the weight-format keys over the experiment's model: (the others as they
// are), also over a --set or a sweep point's; rows without one have none.
TEST(ExperimentConfig, RowWeightFormatsReadOverTheExperimentsModel) {
  const std::string yaml = R"(model: {preset: gpt2-tiny, weights: int8, group_size: 64}
inputs: {prompts: [[1, 2]]}
backends:
  - eager
  - {name: eager, label: w8a8, model: {int8_activation_rows: 1, group_size: 0}}
  - {name: trace, label: w4a8, model: {weights: int4, int8_activation_rows: 1,
                                       int8_activation_block: 32, int8_head: true}}
)";
  const auto c = parse_experiment(yaml, "t.yaml");
  ASSERT_EQ(c.backends.size(), 3u);
  EXPECT_FALSE(c.backends[0].model.has_value());
  ASSERT_TRUE(c.backends[1].model.has_value());
  EXPECT_EQ(c.backends[1].model->weights, "int8");
  EXPECT_EQ(c.backends[1].model->int8_activation_rows, 1);
  // group_size 0: a scale per output channel (the experiment's 64 would make int8 blocks of 64).
  EXPECT_EQ(c.backends[1].model->group_size, 0);
  EXPECT_EQ(c.backends[1].model->preset, "gpt2-tiny");
  ASSERT_TRUE(c.backends[2].model.has_value());
  EXPECT_EQ(c.backends[2].model->weights, "int4");
  EXPECT_EQ(c.backends[2].model->group_size, 64);  // the experiment's
  EXPECT_EQ(c.backends[2].model->int8_activation_block, 32);
  EXPECT_EQ(c.backends[2].model->int8_head, std::optional<bool>(true));
  // The experiment's model itself is as written.
  EXPECT_EQ(c.model.weights, "int8");
  EXPECT_EQ(c.model.int8_activation_rows, 0);
  const auto set = parse_experiment(yaml, "t.yaml", {"model.group_size=128"});
  EXPECT_EQ(set.backends[2].model->group_size, 128);
  // Inherited, the experiment's group_size makes the int8 row's weights blocks, and its
  // per-row activation scales are refused by name.
  const std::string inherit = R"(model: {preset: gpt2-tiny, weights: int8, group_size: 64}
inputs: {prompts: [[1, 2]]}
backends: [{name: eager, model: {int8_activation_rows: 1}}]
)";
  EXPECT_THAT(error_of([&] { parse_experiment(inherit, "t.yaml"); }),
              HasSubstr("int8_activation_block: expected group_size (64) with weights int8 in "
                        "blocks and int8_activation_rows"));
}

TEST(ExperimentConfig, SetOverridesApplyBeforeValidation) {
  const auto c = parse_experiment(kValid, "t.yaml",
                                  {"generation.max_new_tokens=3", "model.dtype=float32",
                                   "run.threads=1", "inputs.prompts=[[9, 9]]"});
  EXPECT_EQ(c.generation["max_new_tokens"], 3);
  EXPECT_EQ(c.model.dtype, "float32");
  EXPECT_EQ(c.run.threads, 1);
  EXPECT_EQ(c.inputs.prompts.size(), 1u);
  EXPECT_THAT(error_of([] { parse_experiment(kValid, "t.yaml", {"generation.max_new_tokens"}); }),
              HasSubstr("expected KEY=VALUE"));
  EXPECT_THAT(error_of([] { parse_experiment(kValid, "t.yaml", {"run.repeats=0"}); }),
              HasSubstr("run.repeats: expected an integer in [1, 100000], found '0'"));
}

TEST(ExperimentConfig, SyntheticInputs) {
  const auto c = parse_experiment(
      "model: {preset: gpt2-tiny}\ninputs: {synthetic: {batch_size: 4, prompt_length: 32, seed: "
      "1}}\n",
      "s.yaml");
  EXPECT_TRUE(c.inputs.synthetic);
  EXPECT_EQ(c.inputs.batch_size, 4);
  EXPECT_EQ(c.inputs.prompt_length, 32);
  EXPECT_EQ(c.name, "s");
  ASSERT_EQ(c.backends.size(), 1u);
  EXPECT_EQ(c.backends[0].name, "eager");
}

struct BadYaml {
  std::string name;
  std::string text;
  std::string expected;
};

void PrintTo(const BadYaml& b, std::ostream* os) { *os << b.name; }

class ExperimentConfigErrors : public ::testing::TestWithParam<BadYaml> {};

TEST_P(ExperimentConfigErrors, NameFileLineKeyAndValue) {
  const std::string msg = error_of([] { parse_experiment(GetParam().text, "bad.yaml"); });
  EXPECT_THAT(msg, HasSubstr("bad.yaml"));
  EXPECT_THAT(msg, HasSubstr(GetParam().expected));
}

const std::string kInputs = "inputs: {prompts: [[1, 2]]}\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, ExperimentConfigErrors,
    ::testing::Values(
        BadYaml{"malformed", "model: {preset: gpt2-tiny\ninputs: [", "malformed YAML"},
        BadYaml{"malformed_position", "model:\n  preset: a\n   bad: [\n", "bad.yaml:3:"},
        BadYaml{"unknown_top_key", "model: {preset: gpt2-tiny}\n" + kInputs + "generaton: {}\n",
                "bad.yaml:3:1: unknown key 'generaton' (did you mean 'generation'?)"},
        BadYaml{"unknown_model_key", "model: {preset: gpt2-tiny, dtyp: float32}\n" + kInputs,
                "unknown key 'model.dtyp' (did you mean 'dtype'?)"},
        BadYaml{"bad_dtype", "model: {preset: gpt2-tiny, dtype: float64}\n" + kInputs,
                "model.dtype: expected one of float32, bfloat16, float16"},
        BadYaml{"bad_device", "model: {preset: gpt2-tiny, device: tpu}\n" + kInputs,
                "model.device: expected cpu, cuda or cuda:N, found 'tpu'"},
        BadYaml{"bad_model_fused", "model: {preset: gpt2-tiny, fused: maybe}\n" + kInputs,
                "model.fused: expected true or false, found 'maybe'"},
        BadYaml{"bad_backend_fused",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, label: u, fused: 2}]\n",
                "fused: expected true or false, found '2'"},
        // A row's own weight format (`model:`): only weight-format keys, each checked as model:'s
        // are, and the combination with the experiment's keys it inherits.
        BadYaml{
            "row_model_not_a_mapping",
            "model: {preset: gpt2-tiny}\n" + kInputs + "backends: [{name: eager, model: int8}]\n",
            "backends[0].model: expected a mapping of weight-format keys"},
        BadYaml{"row_model_other_key",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, model: {dtype: bfloat16}}]\n",
                "unknown key 'backends[0].model.dtype'; valid keys here: group_size"},
        BadYaml{"row_model_bad_weights",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, model: {weights: int3}}]\n",
                "backends[0].model.weights: expected float, int8, int4 or bfloat16, found 'int3'"},
        BadYaml{"row_model_inherited_block",
                "model: {preset: gpt2-tiny, weights: int8, int8_activation_rows: 1}\n" + kInputs +
                    "backends: [eager, {name: eager, label: w4a8, model: {weights: int4}}]\n",
                "backends[1].model.int8_activation_block: expected 32 with weights int4 and "
                "int8_activation_rows (the W4A8 kernel quantizes activations in blocks of 32 "
                "channels), found 0 (the experiment's model:)"},
        BadYaml{
            "row_model_rows_on_float",
            "model: {preset: gpt2-tiny}\n" + kInputs +
                "backends: [{name: eager, model: {int8_activation_rows: 1}}]\n",
            "backends[0].model.int8_activation_rows: expected 0 unless weights is int8 or int4"},
        BadYaml{"row_model_unfused_quantized",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, fused: false, model: {weights: int8}}]\n",
                "backends[0].model.weights: expected float with fused: false"},
        BadYaml{"bad_loop_whole_step",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, loop: {whole_step: sometimes}}]\n",
                "backends[0].loop.whole_step: expected one of off, auto, on, found 'sometimes'"},
        BadYaml{"bad_loop_sync_every",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, loop: {sync_every: 0}}]\n",
                "backends[0].loop.sync_every: expected an integer in [1, 1048576], found '0'"},
        BadYaml{"bad_loop_key",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "backends: [{name: eager, loop: {graph: yes}}]\n",
                "backends[0].loop.graph"},
        BadYaml{"preset_and_path", "model: {preset: gpt2-tiny, path: /x}\n" + kInputs,
                "exactly one of model.preset, model.path or model.name"},
        BadYaml{"no_model", kInputs, "model: expected a model: mapping"},
        BadYaml{"no_inputs", "model: {preset: gpt2-tiny}\n", "inputs: expected an inputs: mapping"},
        BadYaml{"negative_token", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, -2]]}\n",
                "inputs.prompts[0][1]: expected a non-negative token id, found '-2'"},
        BadYaml{"empty_prompt", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[]]}\n",
                "inputs.prompts[0]: expected at least one token"},
        BadYaml{"wrong_type", "model: {preset: gpt2-tiny}\n" + kInputs + "run: {repeats: many}\n",
                "bad.yaml:3:16: run.repeats: expected an integer in [1, 100000], found 'many'"},
        BadYaml{"generation_unknown",
                "model: {preset: gpt2-tiny}\n" + kInputs + "generation: {max_new_token: 3}\n",
                "unknown generation parameter 'max_new_token' (did you mean 'max_new_tokens'?)"},
        BadYaml{"generation_range",
                "model: {preset: gpt2-tiny}\n" + kInputs + "generation: {max_new_tokens: 0}\n",
                "'max_new_tokens': expected an integer >= 1, found 0"},
        BadYaml{"duplicate_label",
                "model: {preset: gpt2-tiny}\n" + kInputs + "backends: [eager, eager]\n",
                "label 'eager' is used twice"},
        BadYaml{"backend_and_backends",
                "model: {preset: gpt2-tiny}\n" + kInputs + "backend: eager\nbackends: [eager]\n",
                "either backend or backends"},
        // yaml-cpp keeps a duplicate key silently (some readers then see the first, some the last).
        BadYaml{"duplicate_key",
                "model: {preset: gpt2-tiny}\n" + kInputs +
                    "generation: {max_new_tokens: 2, max_new_tokens: 5}\n",
                "bad.yaml:3:33: duplicate key 'max_new_tokens'"},
        BadYaml{"duplicate_top_key",
                "model: {preset: gpt2-tiny}\n" + kInputs + "run: {repeats: 1}\nrun: {repeats: 2}\n",
                "bad.yaml:4:1: duplicate key 'run'"},
        BadYaml{"complex_key", "model: {preset: gpt2-tiny}\n" + kInputs + "? [a]\n: 1\n",
                "bad.yaml:3:3: expected a plain key name, found a list"},
        BadYaml{"second_document",
                "model: {preset: gpt2-tiny}\n" + kInputs + "---\nrun: {repeats: 1}\n",
                "bad.yaml: expected one YAML document, found 2"},
        BadYaml{"not_utf8", "model: {preset: gpt2-tiny}\n" + kInputs + "name: caf\xe9\n",
                "bad.yaml:3:10: expected UTF-8 text, found a byte that is not valid UTF-8"},
        BadYaml{"plot_not_png", "model: {preset: gpt2-tiny}\n" + kInputs + "plot: out.txt\n",
                "bad.yaml:3:7: plot: expected a PNG file path ending in .png, found 'out.txt'"},
        BadYaml{"texts_with_preset", "model: {preset: gpt2-tiny}\ninputs: {texts: [hello]}\n",
                "inputs.texts: needs model.path"}),
    [](const auto& info) { return info.param.name; });

// A bad value from --set (or a sweep point) is named by its override: its YAML position is in the
// override's text, not in the file.
TEST(ExperimentConfig, ErrorsInOverridesNameTheOverride) {
  EXPECT_THAT(error_of([] { parse_experiment(kValid, "t.yaml", {"run={repeats: many}"}); }),
              HasSubstr("override 'run={repeats: many}': run.repeats: expected an integer in [1, "
                        "100000], found 'many'"));
  EXPECT_THAT(error_of([] { parse_experiment(kValid, "t.yaml", {"inputs.prompts=[[1, -2]]"}); }),
              HasSubstr("override 'inputs.prompts=[[1, -2]]': inputs.prompts[0][1]"));
  // Values from the file keep their file position.
  EXPECT_THAT(error_of([] {
                parse_experiment(std::string(kValid) + "plot: x.txt\n", "t.yaml",
                                 {"run={repeats: 2}"});
              }),
              HasSubstr("t.yaml:12:7: plot"));
}

TEST(ExperimentConfig, SetNeedsAValue) {
  EXPECT_THAT(error_of([] { parse_experiment(kValid, "t.yaml", {"generation.max_new_tokens="}); }),
              HasSubstr("--set 'generation.max_new_tokens=': expected a value after '='"));
  EXPECT_THAT(
      error_of([] { parse_experiment(kValid, "t.yaml", {"model={preset: a, preset: b}"}); }),
      HasSubstr("--set 'model={preset: a, preset: b}'"));
  EXPECT_THAT(
      error_of([] { parse_experiment(kValid, "t.yaml", {"model={preset: a, preset: b}"}); }),
      HasSubstr("duplicate key 'preset'"));
}

TEST(ExperimentConfig, MissingFileIsNamed) {
  EXPECT_THAT(error_of([] { load_experiment("/no/such.yaml"); }),
              HasSubstr("cannot read experiment file '/no/such.yaml': file missing or unreadable"));
}

// A document that is not a mapping is refused by name, also when a --set would index into it
// (yaml-cpp threw its own, unnamed error there; found by fuzzing).
TEST(ExperimentConfig, ADocumentThatIsNotAMappingIsNamed) {
  EXPECT_THAT(error_of([] { parse_experiment("just words", "w.yaml", {"model.preset=gpt2"}); }),
              HasSubstr("w.yaml:1:1: expected a mapping of sections (model, backends, inputs, "
                        "...), found 'just words'"));
  EXPECT_THAT(error_of([] { parse_experiment("[1, 2]", "l.yaml"); }),
              HasSubstr("l.yaml:1:1: expected a mapping of sections"));
}

// Only regular files are opened: a FIFO (whose open blocks until a writer comes) or a device is
// refused at once, and a file past the size cap is refused before it is read.
TEST(ExperimentConfig, SpecialAndOversizedFilesAreRefusedWithoutReading) {
  testing::TempDir dir;
  const auto fifo = dir / "pipe.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { load_experiment(fifo); }),
              HasSubstr("pipe.yaml' is not a regular file (a FIFO, device or socket), expected a "
                        "YAML file"));
  EXPECT_THAT(error_of([] { load_experiment("/dev/zero"); }),
              HasSubstr("experiment file '/dev/zero' is not a regular file"));
  EXPECT_THAT(error_of([&] { load_experiment(dir.path()); }), HasSubstr("is a folder"));
  const auto big = dir / "big.yaml";
  std::filesystem::resize_file((testing::write_file(big, ""), big), kMaxDocumentBytes + 1);
  EXPECT_THAT(
      error_of([&] { load_experiment(big); }),
      HasSubstr("big.yaml' is " + std::to_string(kMaxDocumentBytes + 1) + " bytes, more than the " +
                std::to_string(kMaxDocumentBytes) + " accepted for a YAML file"));
}

}  // namespace
}  // namespace gengraph

namespace gengraph {
namespace {

TEST(ExperimentConfigSweep, EveryCombinationIsParsedBeforeRunning) {
  const char* text = R"(model: {preset: gpt2-tiny}
backends: [eager, {name: eager, label: static, options: {cache: static}}]
inputs: {synthetic: {batch_size: 1, prompt_length: 4}}
sweep:
  inputs.synthetic.batch_size: [1, 8]
  generation.num_beams: [1, 4]
baseline: static
peers: [hf_eager]
)";
  const auto c = parse_experiment(text, "s.yaml");
  ASSERT_EQ(c.sweep.size(), 2u);
  EXPECT_EQ(c.baseline, "static");
  ASSERT_EQ(c.peers.size(), 1u);
  const auto points = expand_sweep(c);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[3].first,
            (std::vector<std::string>{"inputs.synthetic.batch_size=8", "generation.num_beams=4"}));
  EXPECT_EQ(points[3].second.inputs.batch_size, 8);
  EXPECT_EQ(points[3].second.generation["num_beams"], 4);
  // A bad value in any point fails the whole sweep before anything runs.
  const std::string bad = std::string(text) + "";
  const auto c2 = parse_experiment(
      std::string(text).replace(std::string(text).find("[1, 4]"), 6, "[1, 0]"), "s.yaml");
  EXPECT_THAT(
      testing::error_of([&] { expand_sweep(c2); }),
      ::testing::HasSubstr("sweep point inputs.synthetic.batch_size=1, generation.num_beams=0"));
  EXPECT_THAT(testing::error_of([&] {
                parse_experiment(std::string(text) + "plot: 3\n", "s.yaml", {"baseline=nope"});
              }),
              ::testing::HasSubstr("baseline: expected one of the row labels"));
  EXPECT_THAT(testing::error_of([&] { parse_experiment(text, "s.yaml", {"peers=[hf_jit]"}); }),
              ::testing::HasSubstr("unknown peer 'hf_jit'"));
  EXPECT_THAT(
      testing::error_of([&] { parse_experiment(text, "s.yaml", {"run.peer_timeout_s=-1"}); }),
      ::testing::HasSubstr("peer_timeout_s"));
  EXPECT_EQ(c.run.peer_order, "after");
  EXPECT_EQ(parse_experiment(text, "s.yaml", {"run.peer_order=interleaved"}).run.peer_order,
            "interleaved");
  EXPECT_THAT(
      testing::error_of([&] { parse_experiment(text, "s.yaml", {"run.peer_order=before"}); }),
      ::testing::AllOf(::testing::HasSubstr("peer_order"), ::testing::HasSubstr("interleaved"),
                       ::testing::HasSubstr("before")));
}

}  // namespace
}  // namespace gengraph
