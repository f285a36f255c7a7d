// The parsed form of a chat template (framework/text/jinja.h): its segments and tokens
// (jinja_lex.cpp), and expressions and statements as a tree, made by jinja_parse.cpp and evaluated
// by jinja_eval.cpp / jinja_calls.cpp. Internal to those.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace gengraph::jinja {

struct Segment {
  enum class Kind { kText, kExpr, kStmt } kind;
  std::string body;
  int line;
};

struct Token {
  enum class Kind { kName, kNumber, kString, kOp, kEnd } kind;
  std::string text;
  nlohmann::json value;  // kNumber, kString
};

// The template's literal text and tags, in order (jinja_lex.cpp).
std::vector<Segment> split(std::string_view text, const std::string& source);
// One tag's tokens, ending with a kEnd token; errors name `source` and `line`.
std::vector<Token> lex(const std::string& text, const std::string& source, int line);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d] (args: start, stop, step; null where omitted)
    kCall,     // a(args, kwargs): a is a kName (function) or kAttr (method)
    kFilter,   // a | name(args, kwargs)
    kTest,     // a is [not] name(args)
    kUnary,    // op a: "not", "-", "+"
    kBinary,   // a op b: + - * / // % ** ~ == != < > <= >= in "not in" and or
    kCond,     // a if b else c (args: a, b, c; c may be null)
    kList,     // [args]  (also tuples)
    kDict,     // {keys[i]: args[i]}
  };
  Kind kind;
  int line = 0;
  nlohmann::json value;  // kLiteral
  std::string name;      // kName, kAttr, kFilter, kTest, kUnary / kBinary operator
  bool negated = false;  // kTest: "is not"
  ExprPtr a;             // the operand / object
  std::vector<ExprPtr> args;
  std::vector<std::string> kw_names;  // kCall / kFilter: keyword arguments' names ...
  std::vector<ExprPtr> kw_args;       // ... and values
  std::vector<ExprPtr> keys;          // kDict
};

struct Node {
  enum class Kind {
    kBody,    // children in order
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // branches: conds[i] -> bodies[i]; else_body
    kFor,     // for targets in expr [if cond]: body; else_body
    kSet,     // set target[.attr] = expr
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;                  // kText; kSet: the variable
  std::string attr;                  // kSet: the namespace attribute ("" for a plain name)
  std::vector<std::string> targets;  // kFor
  ExprPtr expr;                      // kOutput, kFor (the iterable), kSet
  ExprPtr cond;                      // kFor: the filter
  std::vector<ExprPtr> conds;        // kIf
  std::vector<std::unique_ptr<Node>> children;  // kBody; kIf: the branches' bodies; kFor: body
  std::unique_ptr<Node> else_body;              // kIf, kFor
};

}  // namespace gengraph::jinja
