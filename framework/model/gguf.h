// GGUF files (llama.cpp's single-file model format, versions 2 and 3): the container read and
// validated, its metadata as typed values, its tensors as views of the mapped file.
//
// The whole header (metadata, tensor descriptions) is checked before any tensor is touched: a
// truncated file, an unknown version or value type, a string or array longer than the file, absurd
// dimensions or element counts, an unknown tensor type, a shape whose rows are not whole blocks of
// the type, a tensor whose bytes leave the file or overlap another's, a data offset that breaks
// the alignment (general.alignment, default 32), a duplicate key or tensor name: each is refused
// as a gengraph::Error naming the file, the key or tensor, what was expected and what was found.
// Also refused: nested arrays, a bool stored as anything but 0 or 1, an empty or non-UTF-8 key or
// tensor name, a tensor with no dimensions or more than four, a general.alignment that is not a
// uint32 power of two. String values are kept as stored (not checked as UTF-8).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace gengraph {

// GGUF's tensor types that gengraph reads (ggml_type numbers). Anything else is refused by name.
enum class GgufType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};
// "F32", "Q4_1", ...
std::string gguf_type_name(GgufType t);
// Elements per block and bytes per block (F32: 1 and 4; Q8_0: 32 and 34; Q4_K: 256 and 144).
int64_t gguf_block_elements(GgufType t);
int64_t gguf_block_bytes(GgufType t);

// One metadata value. Arrays hold one kind of element; nested arrays are refused by the reader.
struct GgufValue {
  using Array = std::variant<std::vector<int64_t>, std::vector<uint64_t>, std::vector<double>,
                             std::vector<bool>, std::vector<std::string>>;
  std::variant<int64_t, uint64_t, double, bool, std::string, Array> value;
  uint32_t type = 0;        // the GGUF value type as stored (0..12)
  uint32_t array_type = 0;  // an array's element type as stored
};

// "uint32", "string", "array of int32", ...: a value's type as errors name it.
std::string gguf_value_type_name(const GgufValue& v);

struct GgufTensorInfo {
  std::string name;
  GgufType type = GgufType::kF32;
  // In GGUF's order: dims[0] is the fastest-varying (a row's length), so a [out, in] weight is
  // stored as dims {in, out}. shape() gives them the other way round, as a torch shape.
  std::vector<int64_t> dims;
  uint64_t offset = 0;                 // from the start of the data section
  uint64_t bytes = 0;                  // exactly what dims and the type take
  std::vector<int64_t> shape() const;  // torch order: {dims[n-1], ..., dims[0]}
  int64_t elements() const;
};

class GgufFile {
 public:
  // Maps `path` read-only and validates everything above. Throws gengraph::Error naming the file.
  static std::shared_ptr<const GgufFile> open(const std::filesystem::path& path);
  // The same over bytes already in memory (the fuzz target; tests of hostile files); `name` is
  // what errors call it. The bytes are copied.
  static std::shared_ptr<const GgufFile> parse(const void* data, size_t size,
                                               const std::string& name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& name() const { return name_; }  // the path, or parse()'s name
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // in file order
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Typed access: a missing key, or a value of another type, is an Error naming the file and the
  // key, the type expected and the type found. Any integer type reads as an integer when its value
  // fits; float32, float64 and the integers read as number().
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const std::string& string(const std::string& key) const;
  const std::vector<std::string>& strings(const std::string& key) const;
  std::vector<int64_t> integers(const std::string& key) const;  // any integer array
  std::vector<double> numbers(const std::string& key) const;    // float32 / float64 arrays

  // The tensor's bytes as a CPU uint8 tensor viewing the mapping (no copy; keeps it alive).
  at::Tensor raw(const GgufTensorInfo& t) const;
  // The tensor in float32, torch shape (shape()): F32 viewed (copied when the file's alignment
  // leaves it at an address that is not a multiple of 4), F16/BF16 converted, Q8_0, Q4_0, Q4_1,
  // Q5_0, Q5_1 and the K-quants dequantized as llama.cpp's reference dequantization does, to the
  // bit. Treat views as read-only: the mapping is private (a write never reaches the file) but
  // every view shares it.
  at::Tensor to_float(const GgufTensorInfo& t) const;

 private:
  GgufFile() = default;
  std::string name_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  const uint8_t* base_ = nullptr;  // the whole file
  size_t size_ = 0;
  size_t data_start_ = 0;
  void* map_ = nullptr;         // mmap, when opened from a path
  std::vector<uint8_t> owned_;  // parse()'s copy
  std::weak_ptr<const GgufFile> self_;
  static void read_header(GgufFile& f);
};

// `elements` values of `type` (a whole number of blocks) from `data` into `out`, in order: F16 and
// BF16 widened, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K dequantized as llama.cpp's
// reference dequantization does, each value rounded the same way (products and sums in float32,
// none fused: framework/model/gguf_dequant.cpp is compiled without FMA contraction). Runs on ATen's
// intra-op threads. GgufFile::to_float's work.
void gguf_dequantize(GgufType type, const uint8_t* data, int64_t elements, float* out);

// Whether `path` names a GGUF file by its first four bytes ("GGUF"); false for folders and
// anything unreadable (the caller reports those as it does for folders).
bool is_gguf_file(const std::filesystem::path& path);

}  // namespace gengraph
