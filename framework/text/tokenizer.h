// Native text in and out: a C++ tokenizer for the Hugging Face `tokenizer.json` files of the
// families gengraph loads, token-exact with the `tokenizers` library.
//
//   byte-level BPE           GPT-2, SmolLM2, LLaMA 3, Qwen2 (ByteLevel / Split / Digits
//                            pre-tokenizers, NFC normalizer)
//   SentencePiece-style BPE  LLaMA 2, Mistral (Prepend/Replace normalizers or a Metaspace
//                            pre-tokenizer, byte fallback, ByteFallback/Fuse/Strip decoders)
//   tokenizer.model          a folder with only a SentencePiece model: libsentencepiece
//
// A component outside these (a Unigram or WordPiece model, a BERT normalizer, ...) is refused by
// name when the file is loaded, so the caller can fall back to the Python tokenizer. Input bytes
// that are not valid UTF-8 are repaired first, one U+FFFD per maximal invalid subpart (what
// Python's bytes.decode("utf-8", "replace") gives before the `tokenizers` library sees the text).
// Regular expressions go through PCRE2 (with JIT), Unicode normalisation through ICU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gengraph {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The token ids of `text` (any bytes). With add_special_tokens, what the file's post-processor
  // adds (LLaMA's BOS, ...) is added, as `tokenizer(text)` does in transformers.
  virtual std::vector<int64_t> encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  // The text of `ids` (valid UTF-8). An id outside the vocabulary is refused, naming it.
  virtual std::string decode(const std::vector<int64_t>& ids,
                             bool skip_special_tokens = false) const = 0;
  // decode() that ends at the last whole character: bytes at the end that begin a character the
  // ids leave incomplete (a token limit cut it) are left out instead of shown as U+FFFD, and
  // counted in `cut_bytes`; a replacement character the tokens hold themselves stays. The default
  // is decode() with nothing cut (a tokenizer that cannot tell).
  virtual std::string decode_whole(const std::vector<int64_t>& ids, bool skip_special_tokens,
                                   size_t& cut_bytes) const;
  // Ids [0, vocab_size()) are known; an id of an added token may be the largest.
  virtual int64_t vocab_size() const = 0;
  // Whether `id` is a special token (BOS, EOS, chat markers, ...).
  virtual bool is_special(int64_t id) const = 0;
  // The id of a token by its text (a special or added token, or a vocabulary entry); -1 if none.
  virtual int64_t token_id(const std::string& token) const = 0;
  // One line: the kind and where it came from ("byte-level BPE, 49152 tokens,
  // '<dir>/tokenizer.json'").
  virtual std::string describe() const = 0;
};

// Loads `tokenizer.json`. Refuses a file that is not one (naming the key), and any component
// outside the supported set, as "<file>: <component> '<type>' is not supported natively
// (supported: ...)". The message of such a refusal begins with kUnsupportedTokenizer, so that a
// caller can tell it from a damaged file.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& file);
// A SentencePiece model (tokenizer.model), through libsentencepiece. `add_bos` as
// tokenizer_config.json's add_bos_token says (LLaMA: true).
std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::filesystem::path& file,
                                                    bool add_bos);
// The tokenizer of a GGUF file's tokenizer.ggml.* metadata, token-exact with llama.cpp's
// tokenization of the same file (framework/text/tokenizer_gguf.h says what is supported). An
// unsupported tokenizer is refused with a message beginning with kUnsupportedTokenizer.
class GgufFile;
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file);
// A model folder's tokenizer: tokenizer.json when present, else tokenizer.model (add_bos_token from
// tokenizer_config.json, true when it does not say), else an Error naming the folder. A GGUF file
// in the folder's place gives load_gguf_tokenizer's.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& folder);

inline constexpr std::string_view kUnsupportedTokenizer = "unsupported tokenizer: ";

// Streaming detokenisation: push ids as they are generated, get the text that became final. Text
// never ends inside a UTF-8 character, and a byte-fallback or byte-level token that begins a
// character is held until the character is complete. The pieces concatenated equal
// decode_whole(all ids): finish() gives what was still held, without the bytes of a character
// that never completed (cut_bytes() counts them, as decode_whole does).
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int64_t id);
  std::string finish();
  // The bytes of a last character that the ids left incomplete, as the last finish() found them.
  size_t cut_bytes() const { return cut_bytes_; }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int64_t> window_;  // the ids of the last emitted piece, then those not yet shown
  std::string prefix_;           // decode(window_[0, read_))
  size_t read_ = 0;
  size_t cut_bytes_ = 0;
};

}  // namespace gengraph
