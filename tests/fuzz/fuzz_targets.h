// The readers of untrusted input, each as one fuzz target: bytes in, and either a result or a
// gengraph::Error out. Anything else (a crash, a hang, another exception, a sanitizer report) is a
// finding. Built into libFuzzer binaries with clang (scripts/fuzz.sh) and replayed over the
// committed corpus by the test suite (test_fuzz_corpus.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gengraph::fuzz {

// A safetensors file: header, offsets, and every tensor's bytes read (so an offset past the
// mapping is a read past it).
void safetensors_file(const uint8_t* data, size_t size);
// A model.safetensors.index.json beside one valid shard named a.safetensors.
void safetensors_index(const uint8_t* data, size_t size);
// An experiment file; a first line starting "--set " is one override (as the CLI passes it).
void experiment_yaml(const uint8_t* data, size_t size);
// A results file, through the readers of `show` and `compare`.
void results_json(const uint8_t* data, size_t size);
// The metadata a trace file carries (gengraph.json).
void trace_metadata(const uint8_t* data, size_t size);
// A Slurm job folder's job.json, through the manifest check `submit --rerun`, `task` and
// `collect` run before anything else.
void job_json(const uint8_t* data, size_t size);
// An AOTInductor package (.pt2), through the structure and checksum checks that run before
// LibTorch's loader may see it (check_aoti_package); nothing is loaded.
void aoti_package(const uint8_t* data, size_t size);
// tokenizer.json as the native tokenizer reads it; when it loads, a few texts through it and back.
void tokenizer_json(const uint8_t* data, size_t size);
// Any bytes as text through two small tokenizers, both ways and streamed.
void tokenizer_text(const uint8_t* data, size_t size);
// A model folder's chat template as read_chat_template reads and checks it before rendering: the
// input is tokenizer_config.json, and what follows a line "--jinja--" is chat_template.jinja.
void chat_template(const uint8_t* data, size_t size);
// A GGUF file's header and metadata (GgufFile::parse); when it is valid, every tensor of up to
// 2^20 elements dequantized to float32 (so an offset past the data is a read past it).
void gguf_file(const uint8_t* data, size_t size);

using Target = void (*)(const uint8_t*, size_t);
struct NamedTarget {
  const char* name;
  Target run;
};
const std::vector<NamedTarget>& targets();

}  // namespace gengraph::fuzz
