#include "experiments/results/quality.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generation_defaults.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/model/model_names.h"
#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/progress.h"

namespace gengraph {
namespace {

struct Loaded {
  LoadedModel loaded;
  std::unique_ptr<ForwardBackend> backend;
};

Loaded load(const std::string& folder, const WeightFormat& f) {
  ModelSource src;
  src.path = folder;
  src.load.weights = f;
  Loaded l;
  l.loaded = load_model(src);
  l.backend =
      BackendRegistry::instance().create("eager", l.loaded.model, BackendOptions("eager", {}));
  return l;
}

// Teacher-forced next-token log-probabilities of every window position after the first:
// [windows, window - 1, vocab] would not fit for large vocabularies, so the caller's `visit`
// gets each step's [windows, vocab] log-probabilities and the true next tokens.
template <typename Visit>
void teacher_forced(ForwardBackend& be, const at::Tensor& ids, Visit&& visit) {
  const int64_t rows = ids.size(0), len = ids.size(1);
  be.prepare(rows, len);
  const at::Tensor ones = at::ones({rows, 1}, at::kBool);
  at::Tensor logits =
      be.prefill(StepInputs{ids.slice(1, 0, 1), at::zeros({rows, 1}, at::kLong), ones, {}});
  for (int64_t t = 1; t < len; ++t) {
    visit(t, at::log_softmax(logits.to(at::kFloat), -1), ids.select(1, t));
    if (t + 1 < len) {
      logits = be.decode(
          StepInputs{ids.slice(1, t, t + 1), at::full({rows, 1}, t, at::kLong), ones, {}});
    }
  }
}

}  // namespace

WeightFormat quality_weight_format(const std::string& name, int64_t group_size,
                                   bool quantize_head) {
  // int4's head is int8 unless "+h4" keeps it int4; "+h8" says the default.
  const bool h8 = name == "int4+h8" || name == "w4a8+h8";
  const bool h4 = name == "int4+h4" || name == "w4a8+h4";
  const std::string base = h8 || h4 ? name.substr(0, 4) : name;
  const bool blocks = base.rfind("w8a8/", 0) == 0;
  // int8gB: int8 weights in blocks of B (a float16 scale per block); w8a8gB the same by
  // activations in blocks of B. What B may be is the parser's group_size rule.
  const bool wblocks = base.rfind("int8g", 0) == 0 || base.rfind("w8a8g", 0) == 0;
  const bool w8a8 = base == "w8a8" || blocks, w4a8 = base == "w4a8";
  WeightFormatKeys keys;
  keys.weights = w8a8 || wblocks ? "int8" : w4a8 ? "int4" : base;
  if (wblocks) {
    const std::string b = base.substr(5);
    if (b.empty() || b.size() > 6 || b.find_first_not_of("0123456789") != std::string::npos) {
      throw Error("--weights: " + name + ": expected int8gB or w8a8gB with B the block (int8g32)");
    }
    keys.group_size = std::stoll(b);
    if (base[0] == 'w') {
      keys.int8_activation_rows = 1;
      keys.int8_activation_block = keys.group_size;
    }
  }
  keys.quantize_head = quantize_head;
  if (h8 || h4) keys.int8_head = h8;
  if (w8a8 || w4a8) keys.int8_activation_rows = 1;
  if (w4a8) keys.int8_activation_block = 32;
  if (blocks) {  // the spelling; what B may be is the parser's int8_activation_block rule
    const std::string b = base.substr(5);
    if (b.empty() || b.size() > 6 || b.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(b) == 0) {
      throw Error("--weights: " + name + ": expected w8a8/B with B a multiple of 32 (w8a8/32)");
    }
    keys.int8_activation_block = std::stoll(b);
  }
  WeightKeyNames names;
  names.name = [&](std::string_view key) -> std::string {
    if (key == "weights") return "--weights";
    if (key == "group_size")
      return wblocks ? "--weights: " + name + " (group_size)" : "--group-size";
    return "--weights: " + name + " (" + std::string(key) + ")";
  };
  names.found = [&](std::string_view key, const std::string& value) {
    // As the flag's spelling check says.
    return key == "group_size" && !wblocks ? "'" + value + "'" : value;
  };
  // --group-size is int4's groups (int8 keeps its scale per output channel here).
  WeightFormat f = parse_weight_format(keys, names);
  if (f.kind != WeightFormat::Kind::kInt4) return f;
  keys.group_size = group_size;
  return parse_weight_format(keys, names);
}

nlohmann::json measure_quality(const QualityOptions& o, std::ostream& log) {
  register_builtin_backends();
  // The name as every boundary reads one (model_names.h): quality needs trained weights and their
  // tokenizer, so a preset (random weights, no tokenizer) is refused.
  const ModelName name = resolve_model_name(o.model, "quality: --model");
  if (name.folder.empty()) {
    throw Error("quality: --model '" + o.model + "' is the preset " + name.preset +
                " (random weights, no tokenizer): give a model folder or a known model name");
  }
  const std::string folder = name.folder.string();
  const auto tok = load_tokenizer(folder);
  const std::string text =
      read_regular_file(o.text_file, "text file '" + o.text_file + "'", "a text file", 64u << 20);
  const std::vector<int64_t> all = tok->encode(text, false);
  if (static_cast<int64_t>(all.size()) < o.windows * o.window) {
    throw Error("text file '" + o.text_file + "': " + std::to_string(all.size()) +
                " tokens, fewer than windows x window = " + std::to_string(o.windows * o.window));
  }
  // Windows spread evenly over the text.
  const int64_t stride =
      (static_cast<int64_t>(all.size()) - o.window) / std::max<int64_t>(1, o.windows - 1);
  at::Tensor ids = at::empty({o.windows, o.window}, at::kLong);
  for (int64_t r = 0; r < o.windows; ++r) {
    for (int64_t t = 0; t < o.window; ++t) ids[r][t] = all[static_cast<size_t>(r * stride + t)];
  }
  std::vector<std::vector<int64_t>> prompts;
  for (const auto& p : o.prompts) prompts.push_back(tok->encode(p));
  // Greedy, exactly new_tokens each (no early end-of-sequence), over the model's own defaults.
  const nlohmann::json greedy_settings = {
      {"do_sample", false}, {"max_new_tokens", o.new_tokens}, {"min_new_tokens", o.new_tokens}};

  log << "float reference: " << folder << "\n";
  Loaded ref = load(folder, WeightFormat{});
  // The reference's log-probabilities per step, kept for the KL divergence (windows x vocab each).
  std::vector<at::Tensor> ref_logp;
  double ref_nll = 0;
  // Progress: the teacher-forced positions, then the generations (the loop's position).
  const ProgressMode mode = progress_mode_for(log);
  auto windows = std::make_unique<Progress>("float: perplexity windows", o.window - 1, 0,
                                            std::function<std::string()>(), mode);
  teacher_forced(*ref.backend, ids, [&](int64_t, const at::Tensor& lp, const at::Tensor& next) {
    ref_nll -= lp.gather(1, next.unsqueeze(1)).sum().item<double>();
    ref_logp.push_back(lp);
    windows->advance();
  });
  windows.reset();
  const double positions = static_cast<double>(o.windows * (o.window - 1));
  const ResolvedSettings greedy =
      resolve_generation(ref.loaded, greedy_settings, "gengraph quality");
  const auto ref_out = [&] {
    const Progress shown("float: greedy generations", 0, 0, loop_position_text, mode);
    return Generator(greedy).generate(*ref.backend, prompts).outputs;
  }();

  nlohmann::json doc = {{"model", folder},
                        {"text_file", o.text_file},
                        {"text_tokens", all.size()},
                        {"windows", o.windows},
                        {"window", o.window},
                        {"prompts", o.prompts},
                        {"new_tokens", o.new_tokens},
                        {"float", {{"perplexity", std::exp(ref_nll / positions)}}},
                        {"formats", nlohmann::json::array()}};
  for (const auto& name : o.formats) {
    const WeightFormat f = quality_weight_format(name, o.group_size, o.quantize_head);
    log << "format " << f.describe() << "\n";
    Loaded q = load(folder, f);
    double nll = 0, kl = 0;
    int64_t agree = 0;
    windows = std::make_unique<Progress>(f.describe() + ": perplexity windows", o.window - 1, 0,
                                         std::function<std::string()>(), mode);
    teacher_forced(*q.backend, ids, [&](int64_t t, const at::Tensor& lp, const at::Tensor& next) {
      nll -= lp.gather(1, next.unsqueeze(1)).sum().item<double>();
      const at::Tensor& rp = ref_logp[static_cast<size_t>(t - 1)];
      kl += (rp.exp() * (rp - lp)).sum().item<double>();
      agree += rp.argmax(-1).eq(lp.argmax(-1)).sum().item<int64_t>();
      windows->advance();
    });
    windows.reset();
    const auto out = [&] {
      const Progress shown(f.describe() + ": greedy generations", 0, 0, loop_position_text, mode);
      return Generator(greedy).generate(*q.backend, prompts).outputs;
    }();
    int64_t same = 0;
    double prefix = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const auto& a = ref_out[i][0].tokens;
      const auto& b = out[i][0].tokens;
      same += a == b;
      size_t k = 0;
      while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
      prefix += static_cast<double>(k);
    }
    const double ppl = std::exp(nll / positions);
    doc["formats"].push_back(
        {{"weights", f.describe()},
         {"perplexity", ppl},
         {"perplexity_vs_float", ppl / doc["float"]["perplexity"].get<double>() - 1.0},
         {"kl_divergence", kl / positions},
         {"top1_agreement", static_cast<double>(agree) / positions},
         {"greedy_identical",
          prompts.empty() ? 0.0 : static_cast<double>(same) / static_cast<double>(prompts.size())},
         {"greedy_common_prefix",
          prompts.empty() ? 0.0 : prefix / static_cast<double>(prompts.size())}});
  }
  return doc;
}

std::string format_quality(const nlohmann::json& doc) {
  std::ostringstream o;
  o << std::fixed;
  o << "quality of quantized weights on " << doc["model"].get<std::string>() << "\n"
    << "text: " << doc["text_file"].get<std::string>() << " (" << doc["text_tokens"].get<int64_t>()
    << " tokens), " << doc["windows"].get<int64_t>() << " windows of "
    << doc["window"].get<int64_t>() << " tokens, teacher-forced; greedy: " << doc["prompts"].size()
    << " prompts x " << doc["new_tokens"].get<int64_t>() << " tokens\n";
  // The weights column as wide as its longest name, and two spaces.
  int width = 50;
  for (const auto& f : doc["formats"]) {
    width = std::max(width, static_cast<int>(f["weights"].get<std::string>().size()) + 2);
  }
  o << std::left << std::setw(width) << "weights" << std::setw(14) << "perplexity" << std::setw(12)
    << "vs float" << std::setw(14) << "KL (nats)" << std::setw(14) << "top-1 agree" << std::setw(16)
    << "greedy same"
    << "common prefix\n";
  o << std::setw(width) << "float" << std::setw(14) << std::setprecision(3)
    << doc["float"]["perplexity"].get<double>() << "\n";
  for (const auto& f : doc["formats"]) {
    std::ostringstream vs;
    vs << std::showpos << std::fixed << std::setprecision(2)
       << 100.0 * f["perplexity_vs_float"].get<double>() << "%";
    o << std::setw(width) << f["weights"].get<std::string>() << std::setw(14)
      << std::setprecision(3) << f["perplexity"].get<double>() << std::setw(12) << vs.str()
      << std::setw(14) << std::setprecision(5) << f["kl_divergence"].get<double>() << std::setw(14)
      << std::setprecision(4) << f["top1_agreement"].get<double>() << std::setw(16)
      << std::setprecision(3) << f["greedy_identical"].get<double>() << std::setprecision(1)
      << f["greedy_common_prefix"].get<double>() << "\n";
  }
  return o.str();
}

}  // namespace gengraph
