#include "tests/fuzz/fuzz_targets.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "backends/aoti/aoti_step.h"
#include "backends/trace/traced_step.h"
#include "experiments/compare.h"
#include "experiments/experiment_config.h"
#include "experiments/results.h"
#include "experiments/slurm.h"
#include "experiments/table.h"
#include "framework/model/safetensors.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph::fuzz {
namespace {

namespace fs = std::filesystem;

// A scratch folder per process, reused by every input.
const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("gengraph-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string_view text_of(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

void write_bytes(const fs::path& p, const uint8_t* data, size_t size) {
  write_file_or_throw(p, std::string(reinterpret_cast<const char*>(data), size), "fuzz input");
}

// Expected outcomes: a result, or gengraph::Error. Everything else propagates to the caller.
template <typename F>
void expect_result_or_error(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace

void safetensors_file(const uint8_t* data, size_t size) {
  const fs::path p = scratch() / "f.safetensors";
  write_bytes(p, data, size);
  expect_result_or_error([&] {
    const Checkpoint c = Checkpoint::open_file(p);
    double sum = 0;
    for (const auto& name : c.names()) {
      const at::Tensor t = c.view(name);
      if (t.numel() > 0 && t.numel() < (1 << 20))
        sum += t.to(at::kDouble).abs().sum().item<double>();
    }
    (void)sum;
  });
}

void safetensors_index(const uint8_t* data, size_t size) {
  const fs::path dir = scratch() / "indexed";
  fs::create_directories(dir);
  if (!fs::exists(dir / "a.safetensors")) {
    write_safetensors(dir / "a.safetensors",
                      {{"x.weight", at::ones({2, 3})}, {"y.bias", at::zeros({4}, at::kHalf)}});
  }
  write_bytes(dir / "model.safetensors.index.json", data, size);
  expect_result_or_error([&] {
    const Checkpoint c = Checkpoint::open_folder(dir);
    for (const auto& name : c.names()) (void)c.view(name).sum().item<double>();
  });
}

void experiment_yaml(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  if (text.rfind("--set ", 0) == 0) {
    const auto nl = text.find('\n');
    overrides.push_back(text.substr(6, nl == std::string::npos ? std::string::npos : nl - 6));
    text = nl == std::string::npos ? "" : text.substr(nl + 1);
  }
  expect_result_or_error([&] {
    if (!overrides.empty() && overrides[0].find('=') == std::string::npos) return;  // CLI refuses
    const ExperimentConfig c = parse_experiment(text, "fuzz.yaml", overrides);
    size_t points = 1;
    for (const auto& [key, values] : c.sweep) points *= std::max<size_t>(values.size(), 1);
    if (points <= 64) expand_sweep(c);
  });
}

void results_json(const uint8_t* data, size_t size) {
  const fs::path p = scratch() / "r.json";
  write_bytes(p, data, size);
  expect_result_or_error([&] {
    const nlohmann::json doc = read_results(p.string());
    with_results_errors("fuzz", [&] {
      (void)format_table(doc);
      const nlohmann::json c = compare_documents(doc, "a", doc, "b", "total_ms");
      return format_comparison(c);
    });
  });
}

void trace_metadata(const uint8_t* data, size_t size) {
  // As TracedStep::load reads a trace file's gengraph.json.
  expect_result_or_error([&] { (void)TraceMeta::parse(text_of(data, size), "trace file 'f.pt'"); });
}

void job_json(const uint8_t* data, size_t size) {
  expect_result_or_error(
      [&] { check_job_manifest(parse_json_text(text_of(data, size), "'job.json'"), "job.json"); });
}

void aoti_package(const uint8_t* data, size_t size) {
  const fs::path p = scratch() / "p.pt2";
  write_bytes(p, data, size);
  expect_result_or_error([&] { check_aoti_package(p); });
}

const std::vector<NamedTarget>& targets() {
  static const std::vector<NamedTarget> all = {
      {"safetensors_file", safetensors_file}, {"safetensors_index", safetensors_index},
      {"experiment_yaml", experiment_yaml},   {"results_json", results_json},
      {"trace_metadata", trace_metadata},     {"job_json", job_json},
      {"aoti_package", aoti_package}};
  return all;
}

}  // namespace gengraph::fuzz
