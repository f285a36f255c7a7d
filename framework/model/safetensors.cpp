#include "framework/model/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "framework/model/model_config.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"
#include "framework/util/path_errors.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

size_t dtype_size(at::ScalarType t) { return c10::elementSize(t); }

[[noreturn]] void fail(const std::filesystem::path& p, const std::string& what) {
  throw Error("safetensors file '" + p.string() + "': " + what);
}

}  // namespace

at::ScalarType safetensors_dtype(const std::string& d, const std::string& context) {
  static const std::map<std::string, at::ScalarType> kTypes = {{"F64", at::kDouble},
                                                               {"F32", at::kFloat},
                                                               {"F16", at::kHalf},
                                                               {"BF16", at::kBFloat16},
                                                               {"I64", at::kLong},
                                                               {"I32", at::kInt},
                                                               {"I16", at::kShort},
                                                               {"I8", at::kChar},
                                                               {"U8", at::kByte},
                                                               {"BOOL", at::kBool},
                                                               {"F8_E4M3", at::kFloat8_e4m3fn},
                                                               {"F8_E5M2", at::kFloat8_e5m2}};
  auto it = kTypes.find(d);
  if (it == kTypes.end()) {
    std::vector<std::string> known;
    for (const auto& [k, v] : kTypes) known.push_back(k);
    throw Error(context + ": unsupported dtype '" + d + "', expected one of " + join(known, ", "));
  }
  return it->second;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; the S_ISREG check below refuses
  // it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, "cannot stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, S_ISDIR(st.st_mode) ? "is a folder, expected a file" : "is not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    fail(path, "truncated: " + std::to_string(size) +
                   " bytes, a file needs at least the 8-byte header length");
  }
  // Private, writable mapping: pages are shared with the page cache until written (never, here).
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail(path, std::string("mmap failed: ") + std::strerror(errno));
  f->map_ = m;
  f->map_size_ = size;

  uint64_t header_len = 0;
  std::memcpy(&header_len, m, 8);  // little-endian u64 (x86/ARM hosts are little-endian)
  if (header_len > size - 8) {
    fail(path, "truncated or corrupt: header length " + std::to_string(header_len) +
                   " exceeds the " + std::to_string(size - 8) + " bytes after it");
  }
  const char* hdr = static_cast<const char*>(m) + 8;
  if (header_len == 0) fail(path, "the header is empty (length 0), expected a JSON object");
  // Parse errors and numbers out of range in our words, with the place (parse_json_text).
  const nlohmann::json doc =
      parse_json_text(std::string_view(hdr, header_len),
                      "'" + path.string() + "': the safetensors header (bytes 8 to " +
                          std::to_string(8 + header_len - 1) + ")");
  if (!doc.is_object()) fail(path, "corrupt header: expected a JSON object");
  f->data_start_ = 8 + header_len;
  const uint64_t data_size = size - f->data_start_;

  std::vector<const TensorEntry*> by_offset;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string ctx = "tensor '" + it.key() + "'";
    const auto& v = it.value();
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      fail(path, "corrupt header: " + ctx + " must have dtype, shape and data_offsets");
    }
    TensorEntry e;
    e.name = it.key();
    if (!v["dtype"].is_string()) fail(path, ctx + ": dtype must be a string");
    e.dtype = v["dtype"].get<std::string>();
    const auto st_type =
        safetensors_dtype(e.dtype, "safetensors file '" + path.string() + "': " + ctx);
    if (!v["shape"].is_array()) fail(path, ctx + ": shape must be an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned())
        fail(path, ctx + ": shape entries must be non-negative integers");
      const uint64_t n = d.get<uint64_t>();
      overflow = overflow || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
                 __builtin_mul_overflow(numel, n, &numel);
      e.shape.push_back(static_cast<int64_t>(n));
    }
    uint64_t expected = 0;
    overflow = overflow ||
               __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(st_type)), &expected);
    if (overflow)
      fail(path,
           ctx + ": shape " + v["shape"].dump() + " is too large: its size overflows 64 bits");
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      fail(path, ctx + ": data_offsets must be [begin, end] non-negative integers");
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin) fail(path, ctx + ": data_offsets end < begin");
    if (e.end > data_size) {
      fail(path, ctx + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     ") out of range: the data section has " + std::to_string(data_size) +
                     " bytes (file truncated?)");
    }
    if (e.end - e.begin != expected) {
      fail(path, ctx + ": holds " + std::to_string(e.end - e.begin) + " bytes but dtype " +
                     e.dtype + " x shape needs " + std::to_string(expected));
    }
    f->entries_.emplace(e.name, std::move(e));
  }
  for (const auto& [name, e] : f->entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->begin < b->begin; });
  uint64_t cursor = 0;
  for (const TensorEntry* e : by_offset) {
    if (e->begin < cursor) {
      fail(path, "tensor '" + e->name + "' overlaps the previous tensor (data_offsets begin " +
                     std::to_string(e->begin) + " < " + std::to_string(cursor) + ")");
    }
    if (e->begin > cursor) {
      fail(path, "hole in the data section before tensor '" + e->name + "' (bytes " +
                     std::to_string(cursor) + " to " + std::to_string(e->begin) + " unindexed)");
    }
    cursor = e->end;
  }
  if (cursor != data_size) {
    fail(path, "data section has " + std::to_string(data_size) + " bytes but the tensors index " +
                   std::to_string(cursor) + " (trailing bytes)");
  }
  f->self_ = f;
  return f;
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  static const std::map<at::ScalarType, std::string> kNames = {{at::kDouble, "F64"},
                                                               {at::kFloat, "F32"},
                                                               {at::kHalf, "F16"},
                                                               {at::kBFloat16, "BF16"},
                                                               {at::kLong, "I64"},
                                                               {at::kInt, "I32"},
                                                               {at::kShort, "I16"},
                                                               {at::kChar, "I8"},
                                                               {at::kByte, "U8"},
                                                               {at::kBool, "BOOL"},
                                                               {at::kFloat8_e4m3fn, "F8_E4M3"},
                                                               {at::kFloat8_e5m2, "F8_E5M2"}};
  nlohmann::json header = nlohmann::json::object();
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.to(at::kCPU).contiguous();
    auto it = kNames.find(c.scalar_type());
    if (it == kNames.end())
      fail(path, "cannot store tensor '" + name + "' of dtype " + c10::toString(c.scalar_type()));
    header[name] = {{"dtype", it->second},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    data.push_back(c);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h += ' ';  // data section 8-byte aligned, as the format recommends
  const uint64_t n = h.size();
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h;
    for (const auto& c : data)
      out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    out.flush();
    if (!out) {
      const int err = errno;
      out.close();
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      fail(path, std::string("write failed: ") + std::strerror(err));
    }
  }
  std::filesystem::rename(tmp, path);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

at::Tensor SafetensorsFile::view(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(path_, "no tensor named '" + name + "'");
  const TensorEntry& e = it->second;
  const auto type = safetensors_dtype(e.dtype, name);
  char* data = static_cast<char*>(map_) + data_start_ + e.begin;
  auto keep_alive = self_.lock();
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(type) != 0) {
    // Misaligned data: copy into an aligned buffer rather than hand out a misaligned view.
    auto out = at::empty(e.shape, at::TensorOptions().dtype(type));
    std::memcpy(out.data_ptr(), data, e.end - e.begin);
    return out;
  }
  return at::from_blob(
      data, e.shape, [keep_alive](void*) mutable { keep_alive.reset(); },
      at::TensorOptions().dtype(type));
}

Checkpoint Checkpoint::open_file(const std::filesystem::path& file) {
  Checkpoint c;
  c.files_.push_back(SafetensorsFile::open(file));
  for (const auto& [name, e] : c.files_[0]->entries()) c.where_[name] = 0;
  c.description_ = file.string();
  return c;
}

Checkpoint Checkpoint::open_folder(const std::filesystem::path& folder) {
  const auto single = folder / "model.safetensors";
  const auto index = folder / "model.safetensors.index.json";
  if (checked_exists(index, "the model's safetensors index")) {
    const nlohmann::json doc = read_json_file(index);
    if (!doc.contains("weight_map") || !doc["weight_map"].is_object()) {
      throw Error("'" + index.string() + "': expected an object 'weight_map' {tensor: file}");
    }
    Checkpoint c;
    std::map<std::string, size_t> file_ids;
    for (auto it = doc["weight_map"].begin(); it != doc["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        throw Error("'" + index.string() + "': weight_map['" + it.key() + "'] must be a file name");
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        throw Error("'" + index.string() + "': weight_map['" + it.key() + "'] is '" + shard +
                    "', expected a file name inside the model folder");
      }
      if (!file_ids.count(shard)) {
        const auto shard_path = folder / shard;
        if (!checked_exists(shard_path, "safetensors shard")) {
          throw Error("'" + index.string() + "' lists shard '" + shard + "' for tensor '" +
                      it.key() + "', but '" + shard_path.string() + "' does not exist");
        }
        file_ids[shard] = c.files_.size();
        c.files_.push_back(SafetensorsFile::open(shard_path));
      }
      const size_t id = file_ids[shard];
      if (!c.files_[id]->entries().count(it.key())) {
        throw Error("'" + index.string() + "' places tensor '" + it.key() + "' in '" + shard +
                    "', which does not contain it");
      }
      c.where_[it.key()] = id;
    }
    c.description_ = index.string();
    return c;
  }
  if (checked_exists(single, "the model's safetensors file")) return open_file(single);
  throw Error("model folder '" + folder.string() +
              "': found neither model.safetensors nor model.safetensors.index.json");
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, id] : where_) out.push_back(name);
  return out;
}

const TensorEntry& Checkpoint::entry(const std::string& name) const {
  return files_.at(where_.at(name))->entries().at(name);
}

const std::filesystem::path& Checkpoint::file_of(const std::string& name) const {
  return files_.at(where_.at(name))->path();
}

at::Tensor Checkpoint::view(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(description_ + ": no tensor named '" + name + "'");
  return files_[it->second]->view(name);
}

}  // namespace gengraph
