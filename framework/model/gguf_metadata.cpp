// GgufFile's typed access to metadata: each value as the type asked for, or an Error naming the
// file, the key, the type expected and the type found.
#include <limits>
#include <string>
#include <vector>

#include "framework/model/gguf.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw Error("GGUF file '" + file + "': " + what);
}

std::string n(uint64_t v) { return std::to_string(v); }

const GgufValue& value_of(const GgufFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : f.metadata()) keys.push_back(k);
    fail(f.name(), "no metadata key '" + key + "'" + did_you_mean(key, keys));
  }
  return it->second;
}

[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const std::string& expected) {
  fail(f.name(), "key '" + key + "' is " + gguf_value_type_name(v) + ", expected " + expected);
}

int64_t fitting(const GgufFile& f, const std::string& key, uint64_t v) {
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(f.name(), "key '" + key + "' holds " + n(v) + ", expected an integer below 2^63");
  return static_cast<int64_t>(v);
}

}  // namespace

int64_t GgufFile::integer(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* i = std::get_if<int64_t>(&v.value)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return fitting(*this, key, *u);
  wrong_type(*this, key, v, "an integer");
}

double GgufFile::number(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* d = std::get_if<double>(&v.value)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v.value)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return static_cast<double>(*u);
  wrong_type(*this, key, v, "a number");
}

bool GgufFile::boolean(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* b = std::get_if<bool>(&v.value)) return *b;
  wrong_type(*this, key, v, "a bool");
}

const std::string& GgufFile::string(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* s = std::get_if<std::string>(&v.value)) return *s;
  wrong_type(*this, key, v, "a string");
}

const std::vector<std::string>& GgufFile::strings(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* a = std::get_if<GgufValue::Array>(&v.value)) {
    if (const auto* s = std::get_if<std::vector<std::string>>(a)) return *s;
  }
  wrong_type(*this, key, v, "an array of strings");
}

std::vector<int64_t> GgufFile::integers(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* a = std::get_if<GgufValue::Array>(&v.value)) {
    if (const auto* i = std::get_if<std::vector<int64_t>>(a)) return *i;
    if (const auto* u = std::get_if<std::vector<uint64_t>>(a)) {
      std::vector<int64_t> out;
      out.reserve(u->size());
      for (const uint64_t x : *u) out.push_back(fitting(*this, key, x));
      return out;
    }
  }
  wrong_type(*this, key, v, "an array of integers");
}

std::vector<double> GgufFile::numbers(const std::string& key) const {
  const GgufValue& v = value_of(*this, key);
  if (const auto* a = std::get_if<GgufValue::Array>(&v.value)) {
    if (const auto* d = std::get_if<std::vector<double>>(a)) return *d;
  }
  wrong_type(*this, key, v, "an array of float32 or float64");
}

}  // namespace gengraph
