// Parsing a chat template (framework/text/jinja.h): the segments and tokens of jinja_lex.cpp
// parsed into statements and expressions with jinja2's precedence.
// Names of filters, tests, functions and methods are checked here, so a template using one that
// is not rendered is refused before any rendering (Unsupported).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "framework/text/jinja.h"
#include "framework/text/jinja_ast.h"
#include "framework/text/jinja_names.h"

namespace gengraph::jinja {
namespace {

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, const std::string& source, int line)
      : t_(std::move(tokens)), source_(source), line_(line) {}

  ExprPtr expression(bool allow_cond = true) {
    ExprPtr e = or_expr();
    if (allow_cond && is_name("if")) {
      next();
      auto c = make(Expr::Kind::kCond);
      c->args.push_back(std::move(e));
      c->args.push_back(or_expr());
      if (is_name("else")) {
        next();
        c->args.push_back(expression());
      } else {
        c->args.push_back(nullptr);
      }
      return c;
    }
    return e;
  }

  // expression, or several separated by commas (a tuple, as jinja2 reads `for` iterables).
  ExprPtr tuple_or_expression(bool allow_cond) {
    ExprPtr first = expression(allow_cond);
    if (!is_op(",")) return first;
    auto list = make(Expr::Kind::kList);
    list->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (at_end() || is_name("if")) break;
      list->args.push_back(expression(allow_cond));
    }
    return list;
  }

  std::string name(const std::string& what) {
    if (peek().kind != Token::Kind::kName) fail("expected " + what);
    return next().text;
  }
  bool is_name(const char* n) const {
    return peek().kind == Token::Kind::kName && peek().text == n;
  }
  bool is_op(const char* op) const { return peek().kind == Token::Kind::kOp && peek().text == op; }
  bool at_end() const { return peek().kind == Token::Kind::kEnd; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "'");
    next();
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + describe(peek()) + "'");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ": line " + std::to_string(line_) + ": " + what);
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Unsupported(source_, what, line_);
  }

 private:
  const Token& peek() const { return t_[i_]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  static std::string describe(const Token& t) {
    return t.kind == Token::Kind::kString ? "string" : t.kind == Token::Kind::kEnd ? "end" : t.text;
  }
  ExprPtr make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::kBinary);
    e->name = std::move(op);
    e->a = std::move(a);
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      next();
      e = binary("or", std::move(e), and_expr());
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      next();
      e = binary("and", std::move(e), not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      next();
      auto e = make(Expr::Kind::kUnary);
      e->name = "not";
      e->a = not_expr();
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      std::string op;
      if (peek().kind == Token::Kind::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && t_[i_ + 1].kind == Token::Kind::kName &&
                 t_[i_ + 1].text == "in") {
        next();
        next();
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), math1());
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      e = binary(op, std::move(e), concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      next();
      e = binary("~", std::move(e), math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (is_op("**")) {
      next();
      e = binary("**", std::move(e), unary());
    }
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      auto e = make(Expr::Kind::kUnary);
      e->name = next().text;
      e->a = unary();
      return e;
    }
    return filters(postfix(primary()));
  }

  ExprPtr primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::kString) {
      std::string s;
      while (peek().kind == Token::Kind::kString) s += next().value.get<std::string>();
      auto e = make(Expr::Kind::kLiteral);
      e->value = s;
      return e;
    }
    if (t.kind == Token::Kind::kNumber) {
      auto e = make(Expr::Kind::kLiteral);
      e->value = next().value;
      return e;
    }
    if (t.kind == Token::Kind::kName) {
      const std::string n = next().text;
      auto e = make(Expr::Kind::kLiteral);
      if (n == "true" || n == "True") {
        e->value = true;
      } else if (n == "false" || n == "False") {
        e->value = false;
      } else if (n == "none" || n == "None") {
        e->value = nullptr;
      } else {
        e->kind = Expr::Kind::kName;
        e->name = n;
      }
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = tuple_or_expression(true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(Expr::Kind::kList);
      while (!is_op("]")) {
        e->args.push_back(expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(Expr::Kind::kDict);
      while (!is_op("}")) {
        e->keys.push_back(expression());
        expect_op(":");
        e->args.push_back(expression());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
      return e;
    }
    fail("unexpected '" + describe(t) + "'");
  }

  void call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Token::Kind::kName && t_[i_ + 1].kind == Token::Kind::kOp &&
          t_[i_ + 1].text == "=") {
        e.kw_names.push_back(next().text);
        next();
        e.kw_args.push_back(expression());
      } else {
        if (is_op("*")) unsupported("argument unpacking (*args)");
        e.args.push_back(expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".")) {
        next();
        auto a = make(Expr::Kind::kAttr);
        a->name = peek().kind == Token::Kind::kNumber ? next().text : name("an attribute name");
        a->a = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        for (;;) {
          if (!is_op(":") && !is_op("]")) parts[n] = expression();
          if (is_op(":") && n < 2) {
            next();
            slice = true;
            ++n;
            continue;
          }
          break;
        }
        expect_op("]");
        auto s = make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem);
        s->a = std::move(e);
        if (slice) {
          for (auto& p : parts) s->args.push_back(std::move(p));
        } else {
          if (!parts[0]) fail("an empty subscript");
          s->args.push_back(std::move(parts[0]));
        }
        e = std::move(s);
      } else if (is_op("(")) {
        if (e->kind == Expr::Kind::kName) {
          if (!is_function(e->name)) unsupported("function '" + e->name + "'");
        } else if (e->kind == Expr::Kind::kAttr) {
          if (!is_method(e->name)) unsupported("method '" + e->name + "'");
        } else {
          unsupported("a call of a computed value");
        }
        auto c = make(Expr::Kind::kCall);
        c->a = std::move(e);
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        next();
        auto f = make(Expr::Kind::kFilter);
        f->name = name("a filter name");
        if (!is_filter(f->name)) unsupported("filter '" + f->name + "'");
        f->a = std::move(e);
        if (is_op("(")) call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make(Expr::Kind::kTest);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        // Tests named by keywords: `is none`, `is true`, `is false`.
        t->name = name("a test name");
        if (!is_test(t->name)) unsupported("test '" + t->name + "'");
        t->a = std::move(e);
        if (is_op("(")) {
          call_args(*t);
        } else if (peek().kind == Token::Kind::kNumber || peek().kind == Token::Kind::kString ||
                   (peek().kind == Token::Kind::kName && !is_name("and") && !is_name("or") &&
                    !is_name("if") && !is_name("else") && !is_name("is") && !is_name("in") &&
                    !is_name("not"))) {
          t->args.push_back(postfix(primary()));  // `is divisibleby 3`, `is sameas x`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  const std::string& source_;
  int line_;
};

class StatementParser {
 public:
  StatementParser(std::vector<Segment> segments, const std::string& source)
      : s_(std::move(segments)), source_(source) {}

  std::unique_ptr<Node> parse() {
    std::string end;
    auto body = parse_body({}, end);
    return body;
  }

 private:
  static std::unique_ptr<Node> node(Node::Kind k, int line) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  // Statements until one whose keyword is in `ends` (returned in `end`, its parser left in
  // `tail_`), or the end of the template when `ends` is empty.
  std::unique_ptr<Node> parse_body(const std::set<std::string>& ends, std::string& end) {
    auto body = node(Node::Kind::kBody, i_ < s_.size() ? s_[i_].line : 0);
    while (i_ < s_.size()) {
      const Segment& seg = s_[i_++];
      if (seg.kind == Segment::Kind::kText) {
        auto t = node(Node::Kind::kText, seg.line);
        t->text = seg.body;
        body->children.push_back(std::move(t));
        continue;
      }
      auto p = std::make_unique<ExprParser>(lex(seg.body, source_, seg.line), source_, seg.line);
      if (seg.kind == Segment::Kind::kExpr) {
        auto o = node(Node::Kind::kOutput, seg.line);
        o->expr = p->tuple_or_expression(true);
        p->expect_end();
        body->children.push_back(std::move(o));
        continue;
      }
      const std::string kw = p->name("a statement");
      if (ends.count(kw)) {
        end = kw;
        tail_ = std::move(p);
        return body;
      }
      body->children.push_back(statement(kw, *p, seg.line));
    }
    if (!ends.empty()) {
      throw Error(source_ + ": the template ends inside a block: expected one of " +
                  join_set(ends));
    }
    return body;
  }

  static std::string join_set(const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s) out += (out.empty() ? "'" : ", '") + x + "'";
    return out;
  }

  std::unique_ptr<Node> statement(const std::string& kw, ExprParser& p, int line) {
    if (kw == "if") {
      auto n = node(Node::Kind::kIf, line);
      n->conds.push_back(p.expression());
      p.expect_end();
      for (;;) {
        std::string end;
        n->children.push_back(parse_body({"elif", "else", "endif"}, end));
        ExprParser& t = *tail_;
        if (end == "elif") {
          n->conds.push_back(t.expression());
          t.expect_end();
          continue;
        }
        t.expect_end();
        if (end == "else") {
          n->else_body = parse_body({"endif"}, end);
          tail_->expect_end();
        }
        return n;
      }
    }
    if (kw == "for") {
      auto n = node(Node::Kind::kFor, line);
      n->targets.push_back(p.name("a loop variable"));
      while (p.is_op(",")) {
        p.expect_op(",");
        n->targets.push_back(p.name("a loop variable"));
      }
      if (!p.is_name("in")) p.fail("expected 'in'");
      p.name("'in'");
      n->expr = p.tuple_or_expression(false);
      if (p.is_name("if")) {
        p.name("'if'");
        n->cond = p.expression(false);
      }
      if (p.is_name("recursive")) p.unsupported("recursive loops");
      p.expect_end();
      std::string end;
      n->children.push_back(parse_body({"else", "endfor"}, end));
      tail_->expect_end();
      if (end == "else") {
        n->else_body = parse_body({"endfor"}, end);
        tail_->expect_end();
      }
      return n;
    }
    if (kw == "set") {
      auto n = node(Node::Kind::kSet, line);
      n->text = p.name("a variable name");
      if (p.is_op(".")) {
        p.expect_op(".");
        n->attr = p.name("an attribute name");
      }
      if (p.is_op(",")) p.unsupported("set with several targets");
      if (!p.is_op("=")) p.unsupported("a block set ({% set x %}...{% endset %})");
      p.expect_op("=");
      n->expr = p.tuple_or_expression(true);
      p.expect_end();
      return n;
    }
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      return node(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    if (kw == "generation") {  // transformers' assistant-mask block: its body as it is
      p.expect_end();
      std::string end;
      auto body = parse_body({"endgeneration"}, end);
      tail_->expect_end();
      return body;
    }
    static const std::set<std::string> kKnown = {"macro",   "call",   "filter",     "raw",
                                                 "include", "import", "from",       "extends",
                                                 "block",   "with",   "autoescape", "do"};
    if (kKnown.count(kw)) p.unsupported("statement '" + kw + "'");
    p.fail("unknown statement '" + kw + "'");
  }

  std::vector<Segment> s_;
  size_t i_ = 0;
  const std::string& source_;
  std::unique_ptr<ExprParser> tail_;
};

}  // namespace

Template::Template(std::string_view text, std::string source) : source_(std::move(source)) {
  root_ = StatementParser(split(text, source_), source_).parse();
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

}  // namespace gengraph::jinja
