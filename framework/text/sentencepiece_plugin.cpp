// libsentencepiece behind a C interface, built as its own module (libgengraph_sentencepiece.so)
// that tokenizer.cpp opens with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) only when a folder has a
// tokenizer.model and no tokenizer.json. libsentencepiece carries its own copies of protobuf,
// absl and flag symbols (FLAGS_minloglevel among them) that LibTorch's libraries also define;
// linked into gengraph_core they took the place of LibTorch's and TorchScript deadlocked. Opened
// locally, neither sees the other's.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* error, size_t size, const std::string& message) {
  if (error == nullptr || size == 0) return;
  std::strncpy(error, message.c_str(), size - 1);
  error[size - 1] = '\0';
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void* gg_spm_load(const char* path, char* error,
                                                         size_t size) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    set_error(error, size, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void gg_spm_free(void* handle) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(handle);
}

// Ids into a malloc'ed array (*ids, *count; free it with std::free); 0 on success.
__attribute__((visibility("default"))) int gg_spm_encode(void* handle, const char* text,
                                                         size_t length, int** ids, size_t* count,
                                                         char* error, size_t size) {
  std::vector<int> out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(
      std::string(text, length), &out);
  if (!status.ok()) {
    set_error(error, size, status.ToString());
    return 1;
  }
  *count = out.size();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.empty() ? 1 : out.size())));
  if (*ids == nullptr) {
    set_error(error, size, "out of memory");
    return 1;
  }
  std::copy(out.begin(), out.end(), *ids);
  return 0;
}

// Text into a malloc'ed buffer (*text, *length; free it with std::free); 0 on success.
__attribute__((visibility("default"))) int gg_spm_decode(void* handle, const int* ids, size_t count,
                                                         char** text, size_t* length, char* error,
                                                         size_t size) {
  std::string out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(
      std::vector<int>(ids, ids + count), &out);
  if (!status.ok()) {
    set_error(error, size, status.ToString());
    return 1;
  }
  *length = out.size();
  *text = static_cast<char*>(std::malloc(out.size() + 1));
  if (*text == nullptr) {
    set_error(error, size, "out of memory");
    return 1;
  }
  std::memcpy(*text, out.data(), out.size());
  (*text)[out.size()] = '\0';
  return 0;
}

__attribute__((visibility("default"))) int gg_spm_piece_size(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

__attribute__((visibility("default"))) int gg_spm_bos_id(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->bos_id();
}

__attribute__((visibility("default"))) int gg_spm_is_control(void* handle, int id) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->IsControl(id) ? 1 : 0;
}

// The id of a piece, or -1 when it is not one (PieceToId answers unk_id for those).
__attribute__((visibility("default"))) int gg_spm_token_id(void* handle, const char* piece,
                                                           size_t length) {
  const auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(handle);
  const std::string p(piece, length);
  const int id = sp->PieceToId(p);
  return id == sp->unk_id() && sp->IdToPiece(id) != p ? -1 : id;
}

}  // extern "C"
