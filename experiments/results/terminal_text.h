// Text from result files and user input as a terminal may show it: the tables (show, compare, the
// load table) and the CLI's error messages use these, so that a label cannot move the cursor.
#pragma once

#include <cstddef>
#include <string>

namespace gengraph {

// Text from a file as a terminal may show it, the one place where the tables (show, compare) and
// the CLI's error messages make it safe: control characters (C0, DEL, C1) and the bidirectional
// overrides written as escapes ("\x1b", "\n", "\u202e"), bytes that are not UTF-8 as "\xNN", so
// that a label cannot move the cursor, recolour the terminal, break a row or reorder the text.
// `keep_line_breaks` leaves '\n' and '\t' as they are (multi-line error messages).
std::string terminal_text(const std::string& text, bool keep_line_breaks = false);

// `text` cut to at most `max_bytes` (with "..." at the end when cut), never inside a UTF-8
// character.
std::string shorten_utf8(const std::string& text, size_t max_bytes);

}  // namespace gengraph
