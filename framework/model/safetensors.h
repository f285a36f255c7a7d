// Memory-mapped safetensors reading, single file or sharded (model.safetensors.index.json).
// Every header is validated before any tensor is touched: a truncated file, a corrupt header,
// unknown dtypes, offsets out of range, overlapping or leaving holes, and byte sizes that disagree
// with dtype x shape are all refused with the file and tensor named.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gengraph {

struct TensorEntry {
  std::string name;
  std::string dtype;           // safetensors dtype string, e.g. "F32", "BF16"
  std::vector<int64_t> shape;  // as stored
  uint64_t begin = 0;          // byte offsets into the data section
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` and validates its header. Throws gengraph::Error naming the file on any defect.
  static std::shared_ptr<const SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorEntry>& entries() const { return entries_; }
  // A CPU tensor viewing the mapped bytes (no copy); it keeps the mapping alive. Read-only use.
  at::Tensor view(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  std::map<std::string, TensorEntry> entries_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  size_t data_start_ = 0;
  std::weak_ptr<const SafetensorsFile> self_;
};

// All tensors of a checkpoint folder, from model.safetensors or the shards listed by
// model.safetensors.index.json.
class Checkpoint {
 public:
  static Checkpoint open_folder(const std::filesystem::path& folder);
  static Checkpoint open_file(const std::filesystem::path& file);

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorEntry& entry(const std::string& name) const;
  const std::filesystem::path& file_of(const std::string& name) const;
  at::Tensor view(const std::string& name) const;
  std::string description() const { return description_; }

 private:
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
  std::string description_;
};

// Maps safetensors dtype strings to ATen scalar types; throws naming `context` for unknown ones.
at::ScalarType safetensors_dtype(const std::string& dtype, const std::string& context);

// Writes `tensors` (any device, any layout) as one safetensors file, atomically.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace gengraph
