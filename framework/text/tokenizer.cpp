// The SentencePiece path (a folder with only tokenizer.model), the folder loader and streaming
// detokenisation. tokenizer.json itself is read in tokenizer_json.cpp.
#include "framework/text/tokenizer.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "framework/model/gguf.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"

#if defined(__SANITIZE_ADDRESS__)
#define GENGRAPH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GENGRAPH_ASAN 1
#endif
#endif
#ifndef GENGRAPH_ASAN
#define GENGRAPH_ASAN 0
#endif

namespace gengraph {
namespace {

// libgengraph_sentencepiece.so (sentencepiece_plugin.cpp), opened on first use from the folder of
// the library that holds this code, with its own symbols kept to itself.
struct SentencePieceApi {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free_model)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int**, size_t*, char*, size_t) = nullptr;
  int (*decode)(void*, const int*, size_t, char**, size_t*, char*, size_t) = nullptr;
  int (*piece_size)(void*) = nullptr;
  int (*bos_id)(void*) = nullptr;
  int (*is_control)(void*, int) = nullptr;
  int (*token_id)(void*, const char*, size_t) = nullptr;
};

const SentencePieceApi& sentencepiece_api() {
  static std::once_flag once;
  static SentencePieceApi api;
  static std::string failure;
  std::call_once(once, [] {
    Dl_info info{};
    std::filesystem::path dir = ".";
    if (dladdr(reinterpret_cast<void*>(&sentencepiece_api), &info) != 0 &&
        info.dli_fname != nullptr) {
      dir = std::filesystem::path(info.dli_fname).parent_path();
    }
    const std::filesystem::path module = dir / "libgengraph_sentencepiece.so";
#if GENGRAPH_ASAN
    // AddressSanitizer refuses RTLD_DEEPBIND, and without it libsentencepiece's references to its
    // own flags would bind to LibTorch's (the corruption the module exists to avoid).
    failure =
        "SentencePiece models are not available in this AddressSanitizer build (the module '" +
        module.string() + "' needs RTLD_DEEPBIND, which the sanitizer does not allow)";
    return;
#endif
    void* handle = dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      const char* why = dlerror();
      failure = "the SentencePiece module '" + module.string() + "' does not load (" +
                (why ? why : "unknown reason") + ")";
      return;
    }
    auto sym = [&](const char* name, auto& fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
      if (fn == nullptr && failure.empty()) {
        failure = "the SentencePiece module '" + module.string() + "' lacks " + name;
      }
    };
    sym("gg_spm_load", api.load);
    sym("gg_spm_free", api.free_model);
    sym("gg_spm_encode", api.encode);
    sym("gg_spm_decode", api.decode);
    sym("gg_spm_piece_size", api.piece_size);
    sym("gg_spm_bos_id", api.bos_id);
    sym("gg_spm_is_control", api.is_control);
    sym("gg_spm_token_id", api.token_id);
  });
  if (!failure.empty()) throw Error(failure);
  return api;
}

// Why libsentencepiece refused `file`, in our words (its own status text names its source lines).
std::string not_a_model(const std::filesystem::path& file, const std::string& library_text) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  std::string why;
  if (!ec && size == 0) {
    why = "the file is empty";
  } else if (library_text.find("ParseFrom") != std::string::npos ||
             library_text.find("parse") != std::string::npos) {
    why = "its " + (ec ? std::string("bytes") : std::to_string(size) + " bytes") +
          " do not parse as a serialized SentencePiece ModelProto";
  } else {
    why = "it parses, but libsentencepiece does not accept its contents as a model";
  }
  return "'" + file.string() + "' is not a SentencePiece model (" + why +
         "); a tokenizer.model is the file SentencePiece's trainer writes";
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::filesystem::path& file, bool add_bos)
      : api_(sentencepiece_api()), file_(file.string()), add_bos_(add_bos) {
    check_regular_file(file, "SentencePiece model '" + file_ + "'", "a tokenizer.model file");
    char error[512] = {0};
    model_ = api_.load(file_.c_str(), error, sizeof error);
    if (model_ == nullptr) throw Error(not_a_model(file, error));
    pieces_ = api_.piece_size(model_);
    bos_ = api_.bos_id(model_);
    // The byte-fallback pieces <0x00>..<0xFF>, where the model has them (an unknown piece's id is
    // the unknown token's).
    const std::string none = "\x01gengraph: no such piece";
    const int unknown = api_.token_id(model_, none.data(), none.size());
    for (int b = 0; b < 256; ++b) {
      char piece[8];
      std::snprintf(piece, sizeof piece, "<0x%02X>", b);
      const int id = api_.token_id(model_, piece, std::strlen(piece));
      if (id >= 0 && id != unknown) byte_of_[id] = static_cast<char>(b);
    }
  }
  ~SentencePieceTokenizer() override { api_.free_model(model_); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    const std::string valid = utf8::repair(text);
    int* ids = nullptr;
    size_t count = 0;
    char error[512] = {0};
    if (api_.encode(model_, valid.data(), valid.size(), &ids, &count, error, sizeof error) != 0) {
      throw Error("SentencePiece model '" + file_ + "': " + error);
    }
    std::vector<int64_t> out;
    out.reserve(count + 1);
    if (add_special_tokens && add_bos_ && bos_ >= 0) out.push_back(bos_);
    out.insert(out.end(), ids, ids + count);
    std::free(ids);
    return out;
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (const int64_t id : ids) {
      if (id < 0 || id >= pieces_) {
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                    describe() + ": the tokenizer does not match the model");
      }
      if (skip_special_tokens && api_.is_control(model_, static_cast<int>(id))) continue;
      v.push_back(static_cast<int>(id));
    }
    char* text = nullptr;
    size_t length = 0;
    char error[512] = {0};
    if (api_.decode(model_, v.data(), v.size(), &text, &length, error, sizeof error) != 0) {
      throw Error("SentencePiece model '" + file_ + "': " + error);
    }
    std::string out(text, length);
    std::free(text);
    return out;
  }

  // A character cut at the end is in the byte-fallback pieces at the end (at most 3 of them,
  // which libsentencepiece shows as one U+FFFD each): those that begin it are left out.
  std::string decode_whole(const std::vector<int64_t>& ids, bool skip_special_tokens,
                           size_t& cut_bytes) const override {
    cut_bytes = 0;
    size_t run = 0;  // byte pieces at the end
    while (run < 4 && run < ids.size() && byte_of_.count(ids[ids.size() - 1 - run])) ++run;
    std::string bytes;
    for (size_t k = ids.size() - run; k < ids.size(); ++k) bytes.push_back(byte_of_.at(ids[k]));
    const size_t cut = bytes.size() - utf8::complete_prefix(bytes);
    if (cut == 0) return decode(ids, skip_special_tokens);
    cut_bytes = cut;
    return decode({ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(cut)}, skip_special_tokens);
  }

  int64_t vocab_size() const override { return pieces_; }
  bool is_special(int64_t id) const override {
    return id >= 0 && id < pieces_ && api_.is_control(model_, static_cast<int>(id)) != 0;
  }
  int64_t token_id(const std::string& token) const override {
    return api_.token_id(model_, token.data(), token.size());
  }
  std::string describe() const override {
    return "SentencePiece model, " + std::to_string(pieces_) + " tokens, '" + file_ + "'";
  }

 private:
  const SentencePieceApi& api_;
  std::string file_;
  bool add_bos_;
  void* model_ = nullptr;
  int pieces_ = 0, bos_ = -1;
  std::unordered_map<int64_t, char> byte_of_;  // the byte-fallback pieces' bytes, by id
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::filesystem::path& file,
                                                    bool add_bos) {
  return std::make_unique<SentencePieceTokenizer>(file, add_bos);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& folder) {
  // A GGUF file carries its tokenizer in its metadata.
  if (is_gguf_file(folder)) return load_gguf_tokenizer(*GgufFile::open(folder));
  std::error_code ec;
  if (std::filesystem::exists(folder / "tokenizer.json", ec)) {
    return load_tokenizer_json(folder / "tokenizer.json");
  }
  if (std::filesystem::exists(folder / "tokenizer.model", ec)) {
    bool add_bos = true;
    const auto config = folder / "tokenizer_config.json";
    if (std::filesystem::exists(config, ec)) {
      const std::string source = "'" + config.string() + "'";
      const nlohmann::json doc = parse_json_text(
          read_regular_file(config, "tokenizer config " + source, "a JSON file", kMaxDocumentBytes),
          source);
      JsonAt at(doc, source);
      at.object("a tokenizer_config.json document");
      add_bos = at.boolean_or("add_bos_token", true);
    }
    return load_sentencepiece_model(folder / "tokenizer.model", add_bos);
  }
  throw Error("model folder '" + folder.string() +
              "' has no tokenizer: expected tokenizer.json or tokenizer.model in it");
}

std::string Tokenizer::decode_whole(const std::vector<int64_t>& ids, bool skip_special_tokens,
                                    size_t& cut_bytes) const {
  cut_bytes = 0;
  return decode(ids, skip_special_tokens);
}

TextStream::TextStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

// The window holds the ids of the piece emitted last (context: decoders that treat the first token
// differently, such as Metaspace and Strip, see the same first token as in the whole text) and
// the ids since. A piece is emitted once the window decodes to more than before and does not end
// in U+FFFD (a character that more byte tokens may still complete).
std::string TextStream::push(int64_t id) {
  window_.push_back(id);
  const std::string text = tokenizer_.decode(window_, skip_special_);
  if (text.size() <= prefix_.size() || text.compare(0, prefix_.size(), prefix_) != 0) return "";
  const std::string_view tail = std::string_view(text).substr(prefix_.size());
  if (tail.size() >= utf8::kReplacement.size() &&
      tail.substr(tail.size() - utf8::kReplacement.size()) == utf8::kReplacement) {
    return "";
  }
  std::string piece(tail);
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_));
  read_ = window_.size();
  prefix_ = tokenizer_.decode(window_, skip_special_);
  return piece;
}

std::string TextStream::finish() {
  const std::string text = tokenizer_.decode_whole(window_, skip_special_, cut_bytes_);
  std::string piece;
  if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0) {
    piece = text.substr(prefix_.size());
  }
  window_.clear();
  prefix_.clear();
  read_ = 0;
  return piece;
}

}  // namespace gengraph
