// Tokenizer::decode_whole on every prefix of each line's ids (issue 55: text ends at the last whole
// character): the text is valid UTF-8 and a prefix of the whole line's text, and bytes are counted
// as cut exactly when the plain decode of the prefix differs (a U+FFFD the cut made).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"

namespace gengraph::testing {

// Returns how many prefixes had a character cut (a family with byte tokens has some).
inline size_t check_whole_characters(const Tokenizer& tok, const std::vector<std::string>& lines,
                                     const std::string& where) {
  size_t cuts = 0, wrong = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<int64_t> ids = tok.encode(lines[i], false);
    const std::string whole = tok.decode(ids, false);
    for (size_t k = 1; k <= ids.size(); ++k) {
      const std::vector<int64_t> prefix(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
      size_t cut = 99;
      const std::string text = tok.decode_whole(prefix, false, cut);
      const bool differs = tok.decode(prefix, false) != text;
      const bool ok = utf8::is_valid(text) && whole.compare(0, text.size(), text) == 0 &&
                      cut <= 3 && (cut > 0) == differs;
      cuts += cut > 0;
      if (!ok && wrong++ < 3) {
        ADD_FAILURE() << where << " line " << i << ", first " << k << " ids: decode_whole gave "
                      << text.size() << " bytes, cut " << cut << ", plain decode differs "
                      << differs << "; the whole line's text starts with it: "
                      << (whole.compare(0, text.size(), text) == 0);
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << where;
  return cuts;
}

}  // namespace gengraph::testing
