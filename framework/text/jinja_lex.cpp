// Cutting a chat template (framework/text/jinja.h) into literal text and tags with jinja2's
// whitespace rules as transformers configures them (trim_blocks, lstrip_blocks, the '-' and '+'
// markers, one trailing newline dropped), and a tag's text into tokens.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "framework/text/jinja.h"
#include "framework/text/jinja_ast.h"

namespace gengraph::jinja {
namespace {

bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

class Splitter {
 public:
  // jinja2 drops one newline at the very end of a template (keep_trailing_newline is off).
  Splitter(std::string_view src, const std::string& source) : src_(src), source_(source) {
    if (src_.size() >= 2 && src_.substr(src_.size() - 2) == "\r\n") {
      src_.remove_suffix(2);
    } else if (!src_.empty() && (src_.back() == '\n' || src_.back() == '\r')) {
      src_.remove_suffix(1);
    }
  }

  std::vector<Segment> split() {
    size_t pos = 0;
    bool strip_next = false;
    while (pos <= src_.size()) {
      const size_t p = next_tag(pos);
      std::string text(src_.substr(pos, p - pos));
      if (strip_next)
        text.erase(0, text.find_first_not_of(" \t\n\r\v\f") == std::string::npos
                          ? text.size()
                          : text.find_first_not_of(" \t\n\r\v\f"));
      strip_next = false;
      if (p == src_.size()) {
        push_text(std::move(text), pos);
        break;
      }
      const char kind = src_[p + 1];  // '{', '%' or '#'
      const char mark = p + 2 < src_.size() ? src_[p + 2] : '\0';
      if (mark == '-') {
        while (!text.empty() && space(text.back())) text.pop_back();
      } else if (kind != '{' && mark != '+') {
        // lstrip_blocks: spaces and tabs from the start of the line up to a block or comment.
        size_t q = p;
        while (q > pos && (src_[q - 1] == ' ' || src_[q - 1] == '\t')) --q;
        // (a '-' before may have stripped them already)
        if (q == 0 || src_[q - 1] == '\n') text.resize(text.size() - std::min(p - q, text.size()));
      }
      push_text(std::move(text), pos);
      const int line = line_at(p);
      const size_t body_start = p + 2 + (mark == '-' || mark == '+' ? 1 : 0);
      const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
      const size_t end = find_close(body_start, close, kind == '#', line);
      size_t body_end = end;
      bool strip_after = false, keep_newline = false;
      if (body_end > body_start && src_[body_end - 1] == '-') {
        strip_after = true;
        --body_end;
      } else if (body_end > body_start && src_[body_end - 1] == '+') {
        keep_newline = true;
        --body_end;
      }
      pos = end + 2;
      if (kind != '#') {
        segments_.push_back({kind == '{' ? Segment::Kind::kExpr : Segment::Kind::kStmt,
                             std::string(src_.substr(body_start, body_end - body_start)), line});
      }
      if (strip_after) {
        strip_next = true;
      } else if (kind != '{' && !keep_newline) {
        // trim_blocks: the first newline after a block or comment.
        if (pos < src_.size() && src_[pos] == '\n') {
          ++pos;
        } else if (pos + 1 < src_.size() && src_[pos] == '\r' && src_[pos + 1] == '\n') {
          pos += 2;
        }
      }
    }
    return std::move(segments_);
  }

 private:
  size_t next_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  int line_at(size_t p) const {
    return 1 + static_cast<int>(std::count(src_.begin(), src_.begin() + p, '\n'));
  }

  // The position of `close` ending the tag whose body starts at `from`, skipping string literals
  // (a "}}" inside a quoted string does not end an expression).
  size_t find_close(size_t from, const std::string& close, bool comment, int line) const {
    char quote = 0;
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      const char c = src_[i];
      if (quote) {
        if (c == '\\') {
          ++i;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (!comment && (c == '\'' || c == '"')) {
        quote = c;
        continue;
      }
      if (c == close[0] && src_[i + 1] == close[1]) return i;
    }
    throw Error(source_ + ": line " + std::to_string(line) +
                ": a tag opened here is never closed " + "(expected '" + close + "')");
  }

  void push_text(std::string text, size_t at) {
    if (!text.empty()) segments_.push_back({Segment::Kind::kText, std::move(text), line_at(at)});
  }

  std::string_view src_;
  const std::string& source_;
  std::vector<Segment> segments_;
};

}  // namespace

std::vector<Token> lex(const std::string& s, const std::string& source, int line) {
  std::vector<Token> out;
  size_t i = 0;
  const auto fail = [&](const std::string& what) {
    throw Error(source + ": line " + std::to_string(line) + ": " + what);
  };
  while (i < s.size()) {
    const char c = s[i];
    if (space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::kName, s.substr(i, j - i), nullptr});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool real = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        real = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {  // an exponent makes a float
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          real = true;
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string digits = s.substr(i, j - i);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      nlohmann::json v;
      try {
        if (real) {
          v = std::stod(digits);
        } else {
          v = static_cast<int64_t>(std::stoll(digits));
        }
      } catch (const std::exception&) {  // out of range: Python's big integers, or inf
        fail("the number " + digits + " is out of the range rendered natively");
      }
      out.push_back({Token::Kind::kNumber, digits, v});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n':
            v += '\n';
            break;
          case 't':
            v += '\t';
            break;
          case 'r':
            v += '\r';
            break;
          case '\\':
            v += '\\';
            break;
          case '\'':
            v += '\'';
            break;
          case '"':
            v += '"';
            break;
          case '\n':
            break;
          default:
            v += '\\';
            v += e;  // Python keeps unknown escapes as written
        }
      }
      if (j >= s.size()) fail("a string literal is never closed");
      out.push_back({Token::Kind::kString, "", v});
      i = j + 1;
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                         "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                         "]",  "{",  "}",  ",",  ":",  ".",  "|"};
      bool found = false;
      for (const char* op : kOps) {
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Token::Kind::kOp, op, nullptr});
          i += std::strlen(op);
          found = true;
          break;
        }
      }
      if (!found) fail(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::Kind::kEnd, "", nullptr});
  return out;
}

std::vector<Segment> split(std::string_view text, const std::string& source) {
  return Splitter(text, source).split();
}

}  // namespace gengraph::jinja
