#include "tests/fuzz/fuzz_targets.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "backends/aoti/aoti_package.h"
#include "backends/trace/traced_step.h"
#include "experiments/cluster/slurm_job.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/results/compare.h"
#include "experiments/results/results.h"
#include "experiments/results/table.h"
#include "framework/model/gguf.h"
#include "framework/model/safetensors.h"
#include "framework/text/chat_template.h"
#include "framework/text/jinja.h"
#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
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

// Two small tokenizer.json documents of the families the native tokenizer reads.
std::vector<std::pair<std::string, std::string>> fuzz_tokenizers() {
  // Byte-level: GPT-2's byte alphabet as single tokens ("Ġ" is the space), a few merges, an
  // <|endoftext|> special token and an lstrip <mask>.
  nlohmann::json vocab = nlohmann::json::object();
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    int cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) cp = 256 + next++;
    std::string s;
    utf8::append(s, static_cast<char32_t>(cp));
    vocab[s] = b;
  }
  vocab["\xC4\xA0t"] = 256;
  vocab["he"] = 257;
  vocab["\xC4\xA0the"] = 258;
  nlohmann::json byte_level = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 259},
         {"content", "<|endoftext|>"},
         {"special", true},
         {"normalized", false},
         {"lstrip", false},
         {"rstrip", false},
         {"single_word", false}},
        {{"id", 260},
         {"content", "<mask>"},
         {"special", true},
         {"normalized", false},
         {"lstrip", true},
         {"rstrip", false},
         {"single_word", false}}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"\xC4\xA0 t", "h e", "\xC4\xA0t he"}}}}};
  // LLaMA-2 style: <unk> <s> </s>, the 256 byte tokens, a few pieces; byte fallback.
  nlohmann::json v2 = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v2[name] = 3 + b;
  }
  v2["\xE2\x96\x81"] = 259;
  v2["a"] = 260;
  v2["\xE2\x96\x81"
     "a"] = 261;
  nlohmann::json fallback = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 1},
         {"content", "<s>"},
         {"special", true},
         {"normalized", false},
         {"lstrip", false},
         {"rstrip", false},
         {"single_word", false}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", v2},
        {"merges", {"\xE2\x96\x81 a"}},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true}}}};
  return {{"byte_level", byte_level.dump()}, {"byte_fallback", fallback.dump()}};
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

// tokenizer.json as the native tokenizer reads it; when it loads, a few texts through it and back.
void tokenizer_json(const uint8_t* data, size_t size) {
  const fs::path p = scratch() / "tokenizer.json";
  write_bytes(p, data, size);
  expect_result_or_error([&] {
    const auto tok = load_tokenizer_json(p);
    for (const char* text : {"Hello, world! 123", "  caf\xC3\xA9 \xF0\x9F\x98\x80\xFF", ""}) {
      const auto ids = tok->encode(text);
      const std::string back = tok->decode(ids);
      if (!utf8::is_valid(back)) throw std::logic_error("decode gave invalid UTF-8");
    }
  });
}

// Any bytes as text through two small tokenizers (byte-level BPE with special tokens; LLaMA-2
// style byte fallback), both ways and streamed: decoded text is valid UTF-8 and the stream adds up
// to it.
void tokenizer_text(const uint8_t* data, size_t size) {
  static const auto tokenizers = [] {
    std::vector<std::unique_ptr<Tokenizer>> t;
    for (const auto& [name, doc] : fuzz_tokenizers()) {
      const fs::path p = scratch() / (name + ".json");
      write_file_or_throw(p, doc, "fuzz tokenizer");
      t.push_back(load_tokenizer_json(p));
    }
    return t;
  }();
  const std::string_view text = text_of(data, size);
  for (const auto& tok : tokenizers) {
    for (const bool special : {true, false}) {
      const auto ids = tok->encode(text, special);
      const std::string back = tok->decode(ids);
      if (!utf8::is_valid(back)) throw std::logic_error("decode gave invalid UTF-8");
      TextStream stream(*tok);
      std::string streamed;
      for (const int64_t id : ids) streamed += stream.push(id);
      streamed += stream.finish();
      if (streamed != back) throw std::logic_error("the stream does not add up to decode()");
    }
  }
}

void chat_template(const uint8_t* data, size_t size) {
  const fs::path dir = scratch() / "chat";
  fs::create_directories(dir);
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string separator = "\n--jinja--\n";
  const size_t at = text.find(separator);
  write_file_or_throw(dir / "tokenizer_config.json", text.substr(0, at), "fuzz input");
  std::error_code ignored;
  if (at == std::string::npos) {
    fs::remove(dir / "chat_template.jinja", ignored);
  } else {
    write_file_or_throw(dir / "chat_template.jinja", text.substr(at + separator.size()),
                        "fuzz input");
  }
  expect_result_or_error([&] {
    const auto t = read_chat_template(dir);
    if (t && (!utf8::is_valid(t->text) || t->text.size() > kMaxChatTemplateBytes))
      throw std::logic_error("a template that fails the checks was accepted");
  });
}

// A chat template's text, parsed and rendered natively with a small conversation: refused by
// name (Unsupported, a syntax error, a template's own error or a limit) or rendered within limits.
void jinja_template(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  expect_result_or_error([&] {
    const jinja::Template t(text, "'fuzz.jinja'");
    jinja::Limits limits;
    limits.max_steps = 200000;
    limits.max_output = 1 << 20;
    const nlohmann::ordered_json context = {
        {"messages",
         {{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u \u00e9"}}}},
        {"add_generation_prompt", true},
        {"bos_token", "<s>"},
        {"tools", nullptr}};
    const std::string out = t.render(context, limits);
    if (out.size() > limits.max_output) throw std::logic_error("the output limit was passed");
  });
}

void gguf_file(const uint8_t* data, size_t size) {
  expect_result_or_error([&] {
    const auto f = GgufFile::parse(data, size, "fuzz.gguf");
    double sum = 0;
    for (const auto& t : f->tensors()) {
      if (f->raw(t).numel() != static_cast<int64_t>(t.bytes))
        throw std::logic_error("raw() disagrees with the tensor's size");
      if (t.elements() <= (1 << 20)) sum += f->to_float(t).to(at::kDouble).sum().item<double>();
    }
    for (const auto& [key, v] : f->metadata()) {
      if (std::holds_alternative<std::string>(v.value)) (void)f->string(key);
    }
    (void)sum;
  });
}

const std::vector<NamedTarget>& targets() {
  static const std::vector<NamedTarget> all = {
      {"safetensors_file", safetensors_file}, {"safetensors_index", safetensors_index},
      {"experiment_yaml", experiment_yaml},   {"results_json", results_json},
      {"trace_metadata", trace_metadata},     {"job_json", job_json},
      {"aoti_package", aoti_package},         {"tokenizer_json", tokenizer_json},
      {"tokenizer_text", tokenizer_text},     {"chat_template", chat_template},
      {"jinja_template", jinja_template},     {"gguf_file", gguf_file}};
  return all;
}

}  // namespace gengraph::fuzz
