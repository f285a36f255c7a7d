// Text from files made safe for a terminal (terminal_text.h).
#include "experiments/results/terminal_text.h"

#include <cstdint>

namespace gengraph {

std::string terminal_text(const std::string& text, bool keep_line_breaks) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape_byte = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c == '\n' || c == '\t') && keep_line_breaks) {
        out += static_cast<char>(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c < 0x20 || c == 0x7f) {
        escape_byte(c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // One UTF-8 character: its length, its code point, and whether it is well formed (no
    // overlong form, no surrogate, at most U+10FFFF).
    const size_t n = c >= 0xF8 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    uint32_t cp = n == 4 ? c & 0x07 : n == 3 ? c & 0x0F : c & 0x1F;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto d = static_cast<unsigned char>(text[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (!ok) {
      escape_byte(c);
      ++i;
      continue;
    }
    const bool control = cp <= 0x9F;  // C1 (C0 and DEL are ASCII)
    const bool bidi = cp == 0x061C || cp == 0x200E || cp == 0x200F ||
                      (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
    if (control || bidi) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 15];
    } else {
      out.append(text, i, n);
    }
    i += n;
  }
  return out;
}

std::string shorten_utf8(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes > 3 ? max_bytes - 3 : 0;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

}  // namespace gengraph
