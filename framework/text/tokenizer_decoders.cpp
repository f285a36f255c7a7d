// The native tokenizer.json reader's decoders: token strings back to text (tokenizer_pipeline.h).
#include <algorithm>

#include "framework/text/tokenizer_pipeline.h"

namespace gengraph::tokenizer_detail {

// --- decoders -------------------------------------------------------------------------------

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> parts;
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts) tokens = p->chain(std::move(tokens));
    return tokens;
  }
};

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    const auto& table = byte_level().char_to_byte;
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mapped;
      bool all = true;
      size_t i = 0;
      while (i < t.size()) {
        const auto it = table.find(utf8::next(t, i));
        if (it == table.end()) {
          all = false;
          break;
        }
        mapped.push_back(static_cast<char>(it->second));
      }
      bytes += all ? mapped : t;
    }
    return {utf8::repair(bytes)};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t r, PrependScheme s) : replacement_(r), scheme_(s) {}
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      size_t i = 0;
      const std::string& t = tokens[k];
      while (i < t.size()) {
        const size_t start = i;
        const char32_t c = utf8::next(t, i);
        if (c == replacement_) {
          if (!(k == 0 && scheme_ != PrependScheme::Never)) out += ' ';
        } else {
          out.append(t, start, i - start);
        }
      }
      tokens[k] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(ReplaceNormalizer r) : replace_(std::move(r)) {}
  // The tokens share one bound: what they add up to may grow as a normalizer's output may.
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    size_t input = 0;
    for (const auto& t : tokens) input += t.size();
    OutputBound bound(input);
    for (auto& t : tokens) {
      t = replace_.apply(t, bound);
      bound.used += t.size();
    }
    return tokens;
  }

 private:
  ReplaceNormalizer replace_;
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t c, size_t start, size_t stop) : content_(c), start_(start), stop_(stop) {}
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t i = 0;
      while (i < t.size()) {
        const size_t at = i;
        chars.push_back({at, utf8::next(t, i)});
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < std::min(start_, chars.size()); ++k) {
        if (chars[k].second != content_) break;
        start_cut = k + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
        const size_t index = chars.size() - k - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t from = chars[start_cut].first;
      const size_t to = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(from, to - from);
    }
    return tokens;
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

// The byte a "<0xXX>" token stands for, as the library parses it (u8::from_str_radix).
std::optional<uint8_t> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (t[3] == '+' && lo >= 0) return static_cast<uint8_t>(lo);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(utf8::kReplacement);
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      if (const auto b = byte_token(t)) {
        pending.push_back(static_cast<char>(*b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

std::unique_ptr<Decoder> make_decoder(const JsonAt& j, const std::string& source) {
  const std::string type = j["type"].string();
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    for (const auto& item : j["decoders"].items(1000))
      seq->parts.push_back(make_decoder(item, source));
    return seq;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(single_char(j["replacement"]), prepend_scheme(j));
  }
  if (type == "Replace") {
    const std::string step = step_name(source, j, type);
    return std::make_unique<ReplaceDecoder>(
        ReplaceNormalizer(Pattern(j["pattern"], step), j["content"].string(), step));
  }
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(single_char(j["content"]),
                                          static_cast<size_t>(j["start"].integer_in(0, 1 << 20)),
                                          static_cast<size_t>(j["stop"].integer_in(0, 1 << 20)));
  }
  unsupported(source, "decoder", type,
              "Sequence, ByteLevel, Metaspace, Replace, Fuse, ByteFallback, Strip");
}

}  // namespace gengraph::tokenizer_detail
