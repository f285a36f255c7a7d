#include "experiments/cli/generate.h"

#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "experiments/cli/output.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/prompt_runner.h"
#include "experiments/results/results.h"
#include "framework/model/model_names.h"
#include "framework/util/error.h"

namespace gengraph::cli {

std::string generate_yaml(const Args& a) {
  if (a.model.empty()) throw UsageError("generate: --model PRESET|FOLDER|NAME is required");
  if (!a.prompts.empty() + !a.texts.empty() + !a.prompt_file.empty() != 1) {
    throw UsageError(
        "generate: give --prompt IDS or --text TEXT (one or more of either), or --prompts FILE");
  }
  if (a.resume && (a.prompt_file.empty() || a.output.empty()))
    throw UsageError("--resume: applies to --prompts FILE with --output FILE");
  if (a.stream && !a.prompt_file.empty())
    throw UsageError("--stream: does not apply to --prompts (its lines are written as they end)");
  if (a.skip_special && *a.skip_special != "true" && *a.skip_special != "false") {
    throw UsageError("--skip-special-tokens: expected true or false, found '" + *a.skip_special +
                     "'");
  }
  // A model folder, a preset or a known real model, read as every boundary reads a model name
  // (framework/model/model_names.h), with a note when the name could mean two things.
  ModelName name;
  try {
    name = resolve_model_name(a.model, "--model", /*locate_known=*/false);
  } catch (const Error& e) {
    throw Error(std::string("generate: ") + e.what());
  }
  if (!name.note.empty()) std::cerr << "note: " << name.note << "\n";
  const bool is_folder = !name.folder.empty();
  const bool is_known = name.known;
  const std::string model = is_folder ? name.folder.string() : is_known ? a.model : name.preset;
  if (a.max_new && a.max_new->size() > 9 &&
      a.max_new->find_first_not_of("0123456789") == std::string::npos) {
    throw UsageError("--max-new-tokens: too large (the most is 999999999), found '" + *a.max_new +
                     "'");
  }
  if (a.max_new && (a.max_new->empty() || a.max_new->size() > 9 ||
                    a.max_new->find_first_not_of("0123456789") != std::string::npos ||
                    std::stoll(*a.max_new) < 1)) {
    throw UsageError("--max-new-tokens: expected an integer >= 1, found '" + *a.max_new + "'");
  }
  if (a.dtype != "float32" && a.dtype != "bfloat16" && a.dtype != "float16") {
    throw UsageError("--dtype: expected float32, bfloat16 or float16, found '" + a.dtype + "'");
  }
  if (a.device != "cpu" && a.device.rfind("cuda", 0) != 0) {
    throw UsageError("--device: expected cpu, cuda or cuda:N, found '" + a.device + "'");
  }
  // JSON strings are YAML double-quoted scalars: any path or text survives the round trip.
  auto q = [](const std::string& v) { return nlohmann::json(v).dump(); };
  std::ostringstream y;
  y << "name: generate\nmodel:\n  "
    << (is_folder  ? "path"
        : is_known ? "name"
                   : "preset")
    << ": " << q(model) << "\n  device: " << q(a.device) << "\n  dtype: " << q(a.dtype) << "\n";
  y << "backend: " << q(a.backend) << "\ninputs:\n  ";
  if (!a.prompt_file.empty()) y << "file: " << q(a.prompt_file) << "\n";
  if (a.prompt_file.empty()) y << (a.texts.empty() ? "prompts" : "texts") << ":\n";
  for (const auto& p : a.prompts) y << "    - " << nlohmann::json(parse_ids(p)).dump() << "\n";
  for (const auto& t : a.texts) {
    if (t.empty()) throw UsageError("--text: expected a non-empty text");
    try {
      y << "    - " << q(t) << "\n";
    } catch (const nlohmann::json::exception&) {
      throw UsageError("--text: expected UTF-8 text, found bytes that are not valid UTF-8");
    }
  }
  if ((a.chat || a.tokenizer || a.skip_special) && a.texts.empty() && a.prompt_file.empty()) {
    throw UsageError(std::string(a.chat        ? "--chat"
                                 : a.tokenizer ? "--tokenizer"
                                               : "--skip-special-tokens") +
                     ": applies to --text or --prompts (token ids need no tokenizer)");
  }
  if (a.tokenizer) y << "  tokenizer: " << q(*a.tokenizer) << "\n";
  if (a.skip_special) y << "  skip_special_tokens: " << *a.skip_special << "\n";
  if (a.chat) y << "  chat: true\n";
  if (a.max_new) y << "generation:\n  max_new_tokens: " << *a.max_new << "\n";
  y << "run:\n  warmup: 0\n  repeats: 1\n";
  return y.str();
}

int run_prompts(const Args& a) {
  // The file first, so that its errors name it alone (not the flags' YAML around it).
  (void)read_prompt_file(a.prompt_file);
  const ExperimentConfig c =
      parse_experiment(generate_yaml(a), "gengraph generate (flags as YAML)", a.sets);
  if (!a.output.empty()) {
    check_output_path(a.output, "output");
    check_not_an_input("output", a.output, c);
    if (same_file(a.output, a.prompt_file)) {
      throw UsageError(
          "generate: the output '" + a.output +
          "' is the prompt file; outputs never replace inputs: choose another --output");
    }
  }
  std::ostringstream sink;
  std::ostream& log = a.quiet ? static_cast<std::ostream&>(sink) : std::cerr;
  const PromptRunReport r = run_prompt_file(c, {a.output, a.resume}, std::cout, log);
  if (!a.output.empty()) {
    log << r.written << " line(s) written to '" << a.output << "'"
        << (r.kept > 0 ? " (" + std::to_string(r.kept) + " were there already)" : "") << "\n";
  }
  return 0;
}

}  // namespace gengraph::cli
