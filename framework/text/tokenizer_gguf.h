// A tokenizer from a GGUF file's `tokenizer.ggml.*` metadata, token-exact with llama.cpp's own
// tokenization of the same file (llama_tokenize with add_special as asked and parse_special true;
// llama_detokenize without its clean_spaces pass for the way back).
// tests/framework/text/test_tokenizer_gguf.cpp checks it against llama.cpp (through
// llama-cpp-python) on a corpus; the fixtures are written by tools/make_gguf_tokenizer_fixtures.py.
//
//   tokenizer.ggml.model "gpt2"   byte-level BPE (tokens, merges), with the pre-tokenizer that
//                                 tokenizer.ggml.pre names: "default", "gpt-2", "smollm",
//                                 "starcoder", "llama-bpe" ("llama3", "llama-v3"), "qwen2"
//                                 ("deepseek-r1-qwen"), and "default" when the key is absent;
//                                 each maps to the regular expressions llama.cpp splits with, run
//                                 here by the tokenizer.json pipeline.
//   tokenizer.ggml.model "llama"  SentencePiece (LLaMA 2, Mistral): pieces merged by score over
//                                 the whole text with spaces as U+2581, the space prefix, and
//                                 <0xXX> tokens for bytes no piece spells.
//
// Anything else (another model or pre-tokenizer, a file without tokens) is refused by name, the
// message beginning with kUnsupportedTokenizer. Tokens typed CONTROL, USER_DEFINED or UNKNOWN in
// tokenizer.ggml.token_type are matched in the text before anything else, longest first, as
// llama.cpp matches them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/text/tokenizer.h"

namespace gengraph {

class GgufFile;

// What a GGUF file's tokenizer.ggml.* keys say, read into plain values (tests build one directly).
struct GgufVocabulary {
  std::string source;                             // the file, for errors and describe()
  std::string model;                              // tokenizer.ggml.model
  std::optional<std::string> pre;                 // tokenizer.ggml.pre
  std::vector<std::string> tokens;                // tokenizer.ggml.tokens
  std::vector<float> scores;                      // tokenizer.ggml.scores (empty: all 0)
  std::vector<int32_t> token_types;               // tokenizer.ggml.token_type (empty: all NORMAL)
  std::vector<std::string> merges;                // tokenizer.ggml.merges ("A B")
  std::optional<int64_t> bos_id, eos_id, unk_id;  // tokenizer.ggml.{bos,eos,unknown}_token_id
  std::optional<bool> add_bos, add_eos;           // tokenizer.ggml.add_{bos,eos}_token
  std::optional<bool> add_space_prefix;           // tokenizer.ggml.add_space_prefix
  // The ids of tokenizer.ggml.{eot,eom,fim_pre,...}_token_id, by role ("eot", "fim_pre", ...):
  // where a role has none in the vocabulary, llama.cpp marks tokens with that role's usual texts
  // as CONTROL.
  std::map<std::string, int64_t> role_ids;
};

// Reads the tokenizer.ggml.* keys of `file`. A key of the wrong type is an Error naming it.
GgufVocabulary read_gguf_vocabulary(const GgufFile& file);

// The tokenizer `vocabulary` describes (see above for what is supported).
std::unique_ptr<Tokenizer> make_gguf_tokenizer(const GgufVocabulary& vocabulary);

}  // namespace gengraph
