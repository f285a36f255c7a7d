#include "framework/model/gguf.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>

#include "framework/text/utf8.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// The fewest bytes a key-value pair takes (empty key, a one-byte value) and a tensor description
// takes (a one-byte name, one dimension): counts that cannot fit the file are refused up front.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;

// GGUF's value types.
constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
                   kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12;
constexpr const char* kValueTypeNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};

std::string value_type_name(uint32_t t) {
  return t < std::size(kValueTypeNames) ? kValueTypeNames[t] : "type " + std::to_string(t);
}

// ggml's names for its tensor types, those gengraph reads and the others (named when refused).
std::string ggml_type_name(uint32_t t) {
  static const std::map<uint32_t, const char*> kNames = {
      {0, "F32"},     {1, "F16"},      {2, "Q4_0"},   {3, "Q4_1"},    {6, "Q5_0"},
      {7, "Q5_1"},    {8, "Q8_0"},     {9, "Q8_1"},   {10, "Q2_K"},   {11, "Q3_K"},
      {12, "Q4_K"},   {13, "Q5_K"},    {14, "Q6_K"},  {15, "Q8_K"},   {16, "IQ2_XXS"},
      {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"},
      {22, "IQ2_S"},  {23, "IQ4_XS"},  {24, "I8"},    {25, "I16"},    {26, "I32"},
      {27, "I64"},    {28, "F64"},     {29, "IQ1_M"}, {30, "BF16"},   {34, "TQ1_0"},
      {35, "TQ2_0"},  {39, "MXFP4"},   {40, "NVFP4"}, {41, "Q1_0"}};
  auto it = kNames.find(t);
  return it == kNames.end() ? "" : it->second;
}

// The tensor types gengraph reads: elements and bytes per block (ggml's type traits).
struct TypeInfo {
  GgufType type;
  int64_t elements, bytes;
};
constexpr TypeInfo kTypes[] = {{GgufType::kF32, 1, 4},
                               {GgufType::kF16, 1, 2},
                               {GgufType::kBF16, 1, 2},
                               {GgufType::kQ8_0, 32, 2 + 32},
                               {GgufType::kQ4_0, 32, 2 + 16},
                               {GgufType::kQ4_1, 32, 4 + 16},
                               {GgufType::kQ5_0, 32, 2 + 4 + 16},
                               {GgufType::kQ5_1, 32, 4 + 4 + 16},
                               {GgufType::kQ4_K, 256, 4 + 12 + 128},
                               {GgufType::kQ5_K, 256, 4 + 12 + 32 + 128},
                               {GgufType::kQ6_K, 256, 128 + 64 + 16 + 2}};

const TypeInfo* type_info(uint32_t t) {
  for (const TypeInfo& i : kTypes)
    if (static_cast<uint32_t>(i.type) == t) return &i;
  return nullptr;
}

std::string supported_names() {
  std::string out;
  for (const TypeInfo& i : kTypes) out += (out.empty() ? "" : ", ") + gguf_type_name(i.type);
  return out;
}

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw Error("GGUF file '" + file + "': " + what);
}

std::string n(uint64_t v) { return std::to_string(v); }

// Reads the header front to back, every read bounded by what is left of the file. `where` names
// what is being read (a key, a tensor) for the errors.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& file)
      : data_(data), size_(size), file_(file) {}
  size_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  const std::string& file() const { return file_; }
  std::string where;

  void need(uint64_t bytes, const char* what) const {
    if (bytes > left()) {
      fail(file_, "truncated: " + where + (where.empty() ? "" : ": ") + what + " needs " +
                      n(bytes) + " bytes at offset " + n(pos_) + ", but the file has only " +
                      n(left()) + " left");
    }
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // little-endian hosts (x86, ARM)
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const auto len = read<uint64_t>(what);
    if (len > left()) {
      fail(file_, where + (where.empty() ? "" : ": ") + what + " claims " + n(len) +
                      " bytes at offset " + n(pos_) + ", but the file has only " + n(left()) +
                      " left (truncated or corrupt file)");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& file_;
};

int64_t read_signed(Cursor& c, uint32_t type, const char* what) {
  switch (type) {
    case kU8:
      return c.read<uint8_t>(what);
    case kI8:
      return c.read<int8_t>(what);
    case kU16:
      return c.read<uint16_t>(what);
    case kI16:
      return c.read<int16_t>(what);
    case kU32:
      return c.read<uint32_t>(what);
    case kI32:
      return c.read<int32_t>(what);
    default:
      return c.read<int64_t>(what);
  }
}

bool read_bool(Cursor& c, const char* what) {
  const auto b = c.read<uint8_t>(what);
  if (b > 1) fail(c.file(), c.where + ": a bool is stored as " + n(b) + ", expected 0 or 1");
  return b == 1;
}

// The bytes one value of a type takes at least (a string: its length).
uint64_t value_bytes(uint32_t type) {
  constexpr uint8_t kBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
  return type < std::size(kBytes) ? kBytes[type] : 8;
}

GgufValue::Array read_array(Cursor& c, uint32_t type) {
  const auto count = c.read<uint64_t>("the array's length");
  if (count > c.left() / value_bytes(type)) {
    fail(c.file(), c.where + ": an array of " + n(count) + " " + value_type_name(type) +
                       " values cannot fit the " + n(c.left()) + " bytes left in the file");
  }
  const char* what = "an array element";
  switch (type) {
    case kString: {
      std::vector<std::string> v;
      v.reserve(count);
      for (uint64_t i = 0; i < count; ++i) v.push_back(c.string(what));
      return v;
    }
    case kBool: {
      std::vector<bool> v(count);
      for (uint64_t i = 0; i < count; ++i) v[i] = read_bool(c, what);
      return v;
    }
    case kF32:
    case kF64: {
      std::vector<double> v(count);
      for (auto& x : v) x = type == kF32 ? c.read<float>(what) : c.read<double>(what);
      return v;
    }
    case kU64: {
      std::vector<uint64_t> v(count);
      for (auto& x : v) x = c.read<uint64_t>(what);
      return v;
    }
    default: {
      std::vector<int64_t> v(count);
      for (auto& x : v) x = read_signed(c, type, what);
      return v;
    }
  }
}

GgufValue read_value(Cursor& c) {
  GgufValue v;
  v.type = c.read<uint32_t>("the value type");
  if (v.type > kF64) {
    fail(c.file(),
         c.where + ": unknown value type " + n(v.type) + ", expected 0 to 12 (uint8 ... float64)");
  }
  switch (v.type) {
    case kString:
      v.value = c.string("the string value");
      break;
    case kBool:
      v.value = read_bool(c, "the bool value");
      break;
    case kF32:
      v.value = static_cast<double>(c.read<float>("the float32 value"));
      break;
    case kF64:
      v.value = c.read<double>("the float64 value");
      break;
    case kU64:
      v.value = c.read<uint64_t>("the uint64 value");
      break;
    case kArray:
      v.array_type = c.read<uint32_t>("the array's element type");
      if (v.array_type == kArray) fail(c.file(), c.where + ": nested arrays are not supported");
      if (v.array_type > kF64) {
        fail(c.file(), c.where + ": unknown array element type " + n(v.array_type) +
                           ", expected 0 to 12 (uint8 ... float64, not array)");
      }
      v.value = read_array(c, v.array_type);
      break;
    default:
      v.value = read_signed(c, v.type, "the integer value");
      break;
  }
  return v;
}

std::string printable(const std::string& s) {
  return utf8::is_valid(s) ? s : utf8::repair(s) + " (invalid UTF-8)";
}

}  // namespace

std::string gguf_value_type_name(const GgufValue& v) {
  if (v.type == kArray) return "array of " + value_type_name(v.array_type);
  return value_type_name(v.type);
}

std::string gguf_type_name(GgufType t) {
  const std::string name = ggml_type_name(static_cast<uint32_t>(t));
  return name.empty() ? "type " + n(static_cast<uint32_t>(t)) : name;
}

int64_t gguf_block_elements(GgufType t) {
  if (const TypeInfo* i = type_info(static_cast<uint32_t>(t))) return i->elements;
  throw Error("GGUF: no block size for " + gguf_type_name(t));
}

int64_t gguf_block_bytes(GgufType t) {
  if (const TypeInfo* i = type_info(static_cast<uint32_t>(t))) return i->bytes;
  throw Error("GGUF: no block size for " + gguf_type_name(t));
}

std::vector<int64_t> GgufTensorInfo::shape() const { return {dims.rbegin(), dims.rend()}; }

int64_t GgufTensorInfo::elements() const {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

void GgufFile::read_header(GgufFile& f) {
  Cursor c(f.base_, f.size_, f.name_);
  c.where = "the header";
  const auto magic = c.read<uint32_t>("the magic");
  if (magic != kMagic) {
    char got[12];
    std::snprintf(got, sizeof(got), "%02X %02X %02X %02X", f.base_[0], f.base_[1], f.base_[2],
                  f.base_[3]);
    fail(f.name_, std::string("not a GGUF file: starts with bytes ") + got +
                      ", expected 47 47 55 46 ('GGUF')");
  }
  f.version_ = c.read<uint32_t>("the version");
  if (f.version_ != 2 && f.version_ != 3) {
    if (f.version_ != 0 && (f.version_ & 0xFFFF) == 0) {
      fail(f.name_, "version field reads " + n(f.version_) +
                        ": a big-endian GGUF file, expected a little-endian one (version 2 or 3)");
    }
    fail(f.name_, "unsupported GGUF version " + n(f.version_) + ", expected 2 or 3" +
                      (f.version_ == 1 ? " (version 1 is llama.cpp's first draft)" : ""));
  }
  const auto tensor_count = c.read<uint64_t>("the tensor count");
  const auto kv_count = c.read<uint64_t>("the key-value count");
  if (kv_count > c.left() / kMinKvBytes) {
    fail(f.name_, "the header claims " + n(kv_count) + " key-value pairs, but the " + n(c.left()) +
                      " bytes after it hold at most " + n(c.left() / kMinKvBytes) +
                      " (truncated or corrupt file)");
  }
  if (tensor_count > c.left() / kMinTensorInfoBytes) {
    fail(f.name_, "the header claims " + n(tensor_count) + " tensors, but the " + n(c.left()) +
                      " bytes after it describe at most " + n(c.left() / kMinTensorInfoBytes) +
                      " (truncated or corrupt file)");
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    c.where = "key-value pair " + n(i);
    std::string key = c.string("the key");
    if (key.empty() || !utf8::is_valid(key)) {
      fail(f.name_, c.where + ": the key is " +
                        (key.empty() ? "empty" : "'" + printable(key) + "'") +
                        ", expected a non-empty UTF-8 name");
    }
    c.where = "key '" + key + "'";
    GgufValue v = read_value(c);
    if (!f.metadata_.emplace(key, std::move(v)).second) {
      fail(f.name_, "duplicate metadata key '" + key + "'");
    }
  }

  uint64_t alignment = kDefaultAlignment;
  if (auto it = f.metadata_.find("general.alignment"); it != f.metadata_.end()) {
    if (it->second.type != kU32) {
      fail(f.name_,
           "key 'general.alignment' is " + gguf_value_type_name(it->second) + ", expected uint32");
    }
    alignment = static_cast<uint64_t>(std::get<int64_t>(it->second.value));
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      fail(f.name_, "key 'general.alignment' is " + n(alignment) +
                        ", expected a power of two (1, 2, 4, ... default 32)");
    }
  }

  f.tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    c.where = "tensor " + n(i);
    GgufTensorInfo t;
    t.name = c.string("the tensor name");
    if (t.name.empty() || !utf8::is_valid(t.name)) {
      fail(f.name_, c.where + ": the name is " +
                        (t.name.empty() ? "empty" : "'" + printable(t.name) + "'") +
                        ", expected a non-empty UTF-8 name");
    }
    c.where = "tensor '" + t.name + "'";
    const std::string& tn = c.where;
    const auto n_dims = c.read<uint32_t>("the dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail(f.name_, tn + ": " + n(n_dims) + " dimensions, expected 1 to " + n(kMaxDims));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = c.read<uint64_t>("a dimension");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(f.name_, tn + ": dimension " + n(d) + " is " +
                          (dim == 0 ? "0" : std::to_string(static_cast<int64_t>(dim))) +
                          ", expected a positive size");
      }
      if (__builtin_mul_overflow(elements, dim, &elements) ||
          elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(f.name_, tn + ": its element count overflows 64-bit integers");
      }
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    const auto type = c.read<uint32_t>("the tensor type");
    if (type_info(type) == nullptr) {
      const std::string name = ggml_type_name(type);
      fail(f.name_, tn + ": tensor type " + n(type) +
                        (name.empty() ? " (unknown)" : " (" + name + ")") +
                        " is not supported, expected one of " + supported_names());
    }
    t.type = static_cast<GgufType>(type);
    const auto block = static_cast<uint64_t>(gguf_block_elements(t.type));
    if (static_cast<uint64_t>(t.dims[0]) % block != 0) {
      fail(f.name_, tn + ": rows of " + n(t.dims[0]) + " elements, expected a multiple of " +
                        gguf_type_name(t.type) + "'s block of " + n(block));
    }
    if (__builtin_mul_overflow(elements / block, static_cast<uint64_t>(gguf_block_bytes(t.type)),
                               &t.bytes)) {
      fail(f.name_, tn + ": its size in bytes overflows 64-bit integers");
    }
    t.offset = c.read<uint64_t>("the data offset");
    if (t.offset % alignment != 0) {
      fail(f.name_, tn + ": data offset " + n(t.offset) + " is not a multiple of the alignment " +
                        n(alignment));
    }
    if (f.index_.count(t.name)) fail(f.name_, "duplicate tensor name '" + t.name + "'");
    f.index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment; a file without tensors may end
  // before it.
  const uint64_t end_of_infos = c.pos();
  f.data_start_ = static_cast<size_t>((end_of_infos + alignment - 1) / alignment * alignment);
  const uint64_t data_size = f.data_start_ <= f.size_ ? f.size_ - f.data_start_ : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : f.tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      fail(f.name_, "tensor '" + t.name + "': its " + n(t.bytes) + " bytes (" +
                        gguf_type_name(t.type) + ") at data offset " + n(t.offset) +
                        " end past the data section, which has " + n(data_size) +
                        " bytes (file truncated?)");
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* t = by_offset[i];
    if (t->offset < prev->offset + prev->bytes) {
      fail(f.name_, "tensor '" + t->name + "' at data offset " + n(t->offset) +
                        " overlaps tensor '" + prev->name + "' (bytes " + n(prev->offset) + " to " +
                        n(prev->offset + prev->bytes) + ")");
    }
  }
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::filesystem::path& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->name_ = path.string();
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; S_ISREG refuses it below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) fail(f->name_, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(f->name_, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(f->name_, S_ISDIR(st.st_mode) ? "is a folder, expected a file" : "is not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 24) {
    ::close(fd);
    fail(f->name_, "truncated: " + n(size) +
                       " bytes, a GGUF file starts with a 24-byte header (magic, version, counts)");
  }
  // Private, writable mapping: tensors viewing it may be written without reaching the file or
  // faulting; the pages stay shared with the page cache until then.
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail(f->name_, std::string("mmap failed: ") + std::strerror(errno));
  f->map_ = m;
  f->base_ = static_cast<const uint8_t*>(m);
  f->size_ = size;
  read_header(*f);
  f->self_ = f;
  return f;
}

std::shared_ptr<const GgufFile> GgufFile::parse(const void* data, size_t size,
                                                const std::string& name) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->name_ = name;
  f->owned_.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  if (size < 24) {
    fail(name, "truncated: " + n(size) +
                   " bytes, a GGUF file starts with a 24-byte header (magic, version, counts)");
  }
  f->base_ = f->owned_.data();
  f->size_ = size;
  read_header(*f);
  f->self_ = f;
  return f;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

// `t` as this file describes it: a description from another file (or altered) is refused rather
// than read out of bounds.
const GgufTensorInfo& own(const GgufFile& f, const GgufTensorInfo& t) {
  const GgufTensorInfo* mine = f.find_tensor(t.name);
  if (mine == nullptr || mine->offset != t.offset || mine->bytes != t.bytes ||
      mine->type != t.type || mine->dims != t.dims) {
    fail(f.name(), "tensor '" + t.name + "' is not described so in this file");
  }
  return *mine;
}

}  // namespace

at::Tensor GgufFile::raw(const GgufTensorInfo& info) const {
  const GgufTensorInfo& t = own(*this, info);
  auto keep_alive = self_.lock();
  auto* data = const_cast<uint8_t*>(base_ + data_start_ + t.offset);
  return at::from_blob(
      data, {static_cast<int64_t>(t.bytes)}, [keep_alive](void*) mutable { keep_alive.reset(); },
      at::TensorOptions().dtype(at::kByte));
}

at::Tensor GgufFile::to_float(const GgufTensorInfo& info) const {
  const GgufTensorInfo& t = own(*this, info);
  const uint8_t* data = base_ + data_start_ + t.offset;
  if (t.type == GgufType::kF32 && reinterpret_cast<uintptr_t>(data) % alignof(float) == 0) {
    auto keep_alive = self_.lock();
    return at::from_blob(
        const_cast<uint8_t*>(data), t.shape(), [keep_alive](void*) mutable { keep_alive.reset(); },
        at::TensorOptions().dtype(at::kFloat));
  }
  at::Tensor out = at::empty(t.shape(), at::TensorOptions().dtype(at::kFloat));
  gguf_dequantize(t.type, data, t.elements(), out.data_ptr<float>());
  return out;
}

bool is_gguf_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st {};
  char magic[4] = {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                  ::read(fd, magic, sizeof(magic)) == static_cast<ssize_t>(sizeof(magic)) &&
                  std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

}  // namespace gengraph
