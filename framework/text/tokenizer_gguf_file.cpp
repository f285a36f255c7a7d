// The tokenizer.ggml.* keys of a GGUF file read into a GgufVocabulary (tokenizer_gguf.h), and the
// tokenizer they describe. Kept apart from tokenizer_gguf.cpp so that the tokenizer itself needs
// neither the GGUF reader nor LibTorch.
#include "framework/model/gguf.h"
#include "framework/text/tokenizer.h"
#include "framework/text/tokenizer_gguf.h"
#include "framework/util/error.h"

namespace gengraph {

GgufVocabulary read_gguf_vocabulary(const GgufFile& file) {
  const std::string p = "tokenizer.ggml.";
  GgufVocabulary v;
  v.source = file.name();
  if (!file.has(p + "model")) {
    throw Error(std::string(kUnsupportedTokenizer) + "'" + file.name() + "': the file has no " + p +
                "model key (no tokenizer in its metadata)");
  }
  v.model = file.string(p + "model");
  if (v.model == "none") {  // llama.cpp's vocabulary-less files (convert_hf_to_gguf --no-vocab)
    throw Error(std::string(kUnsupportedTokenizer) + "'" + file.name() + "': " + p +
                "model is 'none' (a file written without a vocabulary: prompts are token ids)");
  }
  if (file.has(p + "pre")) v.pre = file.string(p + "pre");
  if (!file.has(p + "tokens")) {
    throw Error("'" + file.name() + "': " + p + "model is '" + v.model + "' but there is no " + p +
                "tokens key");
  }
  v.tokens = file.strings(p + "tokens");
  if (file.has(p + "scores")) {
    // float32 in files from SentencePiece models; llama.cpp also takes int32.
    const auto* array = std::get_if<GgufValue::Array>(&file.metadata().at(p + "scores").value);
    if (array != nullptr && std::holds_alternative<std::vector<double>>(*array)) {
      for (const double s : file.numbers(p + "scores")) v.scores.push_back(static_cast<float>(s));
    } else {
      for (const int64_t s : file.integers(p + "scores")) v.scores.push_back(static_cast<float>(s));
    }
  }
  if (file.has(p + "token_type")) {
    for (const int64_t t : file.integers(p + "token_type")) {
      v.token_types.push_back(t >= 0 && t <= 6 ? static_cast<int32_t>(t) : 0);
    }
  }
  if (file.has(p + "merges")) v.merges = file.strings(p + "merges");
  auto id = [&](const std::string& key, std::optional<int64_t>& out) {
    if (file.has(p + key)) out = file.integer(p + key);
  };
  id("bos_token_id", v.bos_id);
  id("eos_token_id", v.eos_id);
  id("unknown_token_id", v.unk_id);
  auto flag = [&](const std::string& key, std::optional<bool>& out) {
    if (file.has(p + key)) out = file.boolean(p + key);
  };
  flag("add_bos_token", v.add_bos);
  flag("add_eos_token", v.add_eos);
  flag("add_space_prefix", v.add_space_prefix);
  // The roles whose tokens llama.cpp otherwise finds by their text (prefix/suffix/middle are the
  // older names of the fill-in-the-middle ids).
  for (const auto& [role, key] :
       std::vector<std::pair<std::string, std::string>>{{"eot", "eot"},
                                                        {"eom", "eom"},
                                                        {"fim_pre", "fim_pre"},
                                                        {"fim_suf", "fim_suf"},
                                                        {"fim_mid", "fim_mid"},
                                                        {"fim_pad", "fim_pad"},
                                                        {"fim_rep", "fim_rep"},
                                                        {"fim_sep", "fim_sep"},
                                                        {"fim_pre", "prefix"},
                                                        {"fim_suf", "suffix"},
                                                        {"fim_mid", "middle"}}) {
    if (file.has(p + key + "_token_id")) v.role_ids[role] = file.integer(p + key + "_token_id");
  }
  return v;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file) {
  return make_gguf_tokenizer(read_gguf_vocabulary(file));
}

}  // namespace gengraph
