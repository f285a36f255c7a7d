// UTF-8 helpers for the tokenizers: repairing invalid input the way Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do (one U+FFFD per
// maximal invalid subpart, as the Unicode standard recommends), walking code points, and finding
// where complete characters end (streaming).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gengraph::utf8 {

// The replacement character U+FFFD in UTF-8.
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// The length of the valid UTF-8 sequence starting at bytes[i], or 0 when none starts there.
size_t valid_sequence_length(std::string_view bytes, size_t i);

// `bytes` with every maximal invalid subpart replaced by U+FFFD; valid text is returned unchanged.
std::string repair(std::string_view bytes);
// Whether `bytes` is valid UTF-8 throughout.
bool is_valid(std::string_view bytes);

// The code point starting at text[i] of valid UTF-8 `text`; `i` moves past it.
char32_t next(std::string_view text, size_t& i);
// Appends code point `c` to `out`.
void append(std::string& out, char32_t c);
// The length in bytes of the valid UTF-8 character that starts with lead byte `b` (1 for ASCII).
inline size_t char_length(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// The length of the longest prefix of `bytes` that does not end inside a character that more bytes
// could still complete: what a stream can show now. Invalid bytes count as complete (they will
// show as U+FFFD whatever follows).
size_t complete_prefix(std::string_view bytes);

}  // namespace gengraph::utf8
