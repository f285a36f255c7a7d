// The readable table of a results document: what `gengraph run` prints and `gengraph show`
// prints again from the file.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "framework/util/json_at.h"

namespace gengraph {

// The table. `file` names the results file in errors ("" for a document gengraph just made): every
// field is read through JsonAt, so a field missing or of the wrong type, or a timing no
// measurement gives (read_timing), is an Error naming the file and the key path.
std::string format_table(const nlohmann::json& doc, const std::string& file = "");
// The same of a document inside another (a Slurm part's 'result'): errors name its key path there.
std::string format_table(const JsonAt& doc);

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
