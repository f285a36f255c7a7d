#include "framework/text/utf8.h"

namespace gengraph::utf8 {
namespace {

// The bytes a well-formed sequence may continue with after lead byte `lead`, as Table 3-7 of the
// Unicode standard gives them: [low, high] for the second byte; later bytes are 0x80..0xBF.
bool second_byte_range(unsigned char lead, unsigned char& low, unsigned char& high) {
  low = 0x80;
  high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) return true;
  if (lead == 0xE0) {
    low = 0xA0;
    return true;
  }
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) return true;
  if (lead == 0xED) {
    high = 0x9F;
    return true;
  }
  if (lead == 0xF0) {
    low = 0x90;
    return true;
  }
  if (lead >= 0xF1 && lead <= 0xF3) return true;
  if (lead == 0xF4) {
    high = 0x8F;
    return true;
  }
  return false;  // 0x80..0xC1 and 0xF5..0xFF never start a sequence
}

// How many bytes from bytes[i] belong to the (possibly cut short) sequence that starts there:
// `need` is the full length, the return value how many are present and well-formed (>= 1).
size_t well_formed_part(std::string_view bytes, size_t i, size_t& need) {
  const auto lead = static_cast<unsigned char>(bytes[i]);
  if (lead < 0x80) {
    need = 1;
    return 1;
  }
  unsigned char low = 0, high = 0;
  if (!second_byte_range(lead, low, high)) {
    need = 0;  // never valid
    return 1;
  }
  need = char_length(lead);
  size_t have = 1;
  while (have < need && i + have < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i + have]);
    const bool ok = have == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++have;
  }
  return have;
}

}  // namespace

size_t valid_sequence_length(std::string_view bytes, size_t i) {
  size_t need = 0;
  const size_t have = well_formed_part(bytes, i, need);
  return have == need ? need : 0;
}

std::string repair(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t need = 0;
    const size_t have = well_formed_part(bytes, i, need);
    if (have == need) {
      out.append(bytes.data() + i, have);
    } else {
      out.append(kReplacement);  // one per maximal subpart
    }
    i += have;
  }
  return out;
}

bool is_valid(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const size_t n = valid_sequence_length(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

char32_t next(std::string_view text, size_t& i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  const size_t n = char_length(b0);
  char32_t c = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n && i + k < text.size(); ++k) {
    c = (c << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  }
  i += n;
  return c;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

size_t complete_prefix(std::string_view bytes) {
  // Only the last (at most 3) bytes can be an unfinished character.
  const size_t n = bytes.size();
  const size_t from = n > 3 ? n - 3 : 0;
  for (size_t i = from; i < n; ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (b < 0x80 || (b >= 0x80 && b <= 0xBF)) continue;  // ASCII or a continuation byte
    size_t need = 0;
    const size_t have = well_formed_part(bytes, i, need);
    if (need > 1 && have < need && i + have == n) return i;  // well-formed so far, cut by the end
  }
  return n;
}

}  // namespace gengraph::utf8
