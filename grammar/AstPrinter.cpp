/// Canonical `.fuse` text from the AST: two-space indentation, one statement
/// per line, clauses of a rule in a fixed order, the fewest parentheses that
/// keep the tree, comments dropped. `fusec fmt` prints this.
#include <sstream>

#include "fusec/grammar/Parser.h"

namespace fusec::grammar {
namespace {

using ast::Expr;

/// Binding strength of an expression's top operator (higher binds tighter),
/// mirroring the precedence order of the grammar's `expr` rule.
int precedence(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Binary:
      if (e.text == "??") return 1;
      if (e.text == "or") return 2;
      if (e.text == "and") return 3;
      if (e.text == "+" || e.text == "-") return 6;
      if (e.text == "*" || e.text == "/" || e.text == "%") return 7;
      return 5;  // comparisons
    case Expr::Kind::Unary: return e.text == "not" ? 4 : 8;
    case Expr::Kind::Member: case Expr::Kind::Index: return 9;
    default: return 10;
  }
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\t') {
      out += "\\t";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string wrap(const Expr& e, bool parens) {
  std::string s = printExpr(e);
  return parens ? "(" + s + ")" : s;
}

std::string join(const std::vector<Expr*>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + printExpr(*items[i]);
  return s;
}

std::string param(const ast::Param& p) {
  std::string s = p.name.text;
  if (p.optional) s += "?";
  if (p.variadic) s += "...";
  if (p.type) s += ": " + p.type->text;
  return s;
}

std::string opRef(const ast::OpRef& r) {
  std::string s;
  if (r.alternatives.size() == 1) {
    s = r.alternatives[0].text;
  } else {
    s = "(";
    for (size_t i = 0; i < r.alternatives.size(); ++i) s += (i ? " | " : "") + r.alternatives[i].text;
    s += ")";
  }
  if (r.repeat) s += r.repeat;
  return s;
}

std::string patternCall(const ast::PatternCall& c) {
  std::string s = opRef(c.op) + "(";
  for (size_t i = 0; i < c.args.size(); ++i) {
    const ast::PatternArg& a = c.args[i];
    s += i ? ", " : "";
    switch (a.kind) {
      case ast::PatternArg::Kind::Call: s += patternCall(*a.call); break;
      case ast::PatternArg::Kind::Name: s += a.name.text + (a.optional ? "?" : ""); break;
      case ast::PatternArg::Kind::Wildcard: s += "_"; break;
      case ast::PatternArg::Kind::Rest: s += "..."; break;
    }
  }
  s += ")";
  if (!c.attrs.empty()) {
    s += " { ";
    for (size_t i = 0; i < c.attrs.size(); ++i)
      s += (i ? ", " : "") + c.attrs[i].name.text + ": " + printExpr(*c.attrs[i].value);
    s += " }";
  }
  return s;
}

std::string names(const std::vector<ast::Name>& ns) {
  std::string s;
  for (size_t i = 0; i < ns.size(); ++i) s += (i ? ", " : "") + ns[i].text;
  return s;
}

void printOp(std::ostream& os, const ast::OpDecl& op) {
  os << "op " << op.name.text << "(";
  for (size_t i = 0; i < op.params.size(); ++i) os << (i ? ", " : "") << param(op.params[i]);
  os << ")";
  if (op.resultType) os << ": " << op.resultType->text;
  if (!op.results.empty()) {
    os << " -> (";
    for (size_t i = 0; i < op.results.size(); ++i) os << (i ? ", " : "") << param(op.results[i]);
    os << ")";
  }
  for (const ast::Name& t : op.traits) os << " " << t.text;
  if (!op.attrs.empty()) {
    // Short attribute lists stay on the line; longer ones get a line each.
    const bool inlineAttrs = op.attrs.size() <= 2;
    os << (inlineAttrs ? " { " : " {\n");
    for (size_t i = 0; i < op.attrs.size(); ++i) {
      const ast::AttrDecl& a = op.attrs[i];
      std::string text = a.name.text + (a.optional ? "?" : "") + ": " + a.type.text;
      if (a.defaultValue) text += " = " + printExpr(*a.defaultValue);
      if (inlineAttrs) os << (i ? ", " : "") << text;
      else os << "  " << text << ",\n";
    }
    os << (inlineAttrs ? " }" : "}");
  }
  if (op.semantics) os << " = " << printExpr(*op.semantics);
  if (!op.cost.empty()) {
    os << " cost {";
    for (const ast::CostItem& c : op.cost) os << " " << c.name.text << " = " << printExpr(*c.value);
    os << " }";
  }
  os << "\n";
}

void printRule(std::ostream& os, const ast::Rule& r) {
  os << (r.isOverride ? "override " : "") << "rule " << r.name.text << " {\n";
  if (r.hasPattern) {
    os << "  " << (r.isFusion ? "fuse" : "match") << " {\n";
    for (const ast::PatternStmt* s : r.pattern) os << "    " << names(s->names) << " = " << patternCall(*s->call) << "\n";
    os << "  }\n";
  }
  if (r.guard) os << "  where " << printExpr(*r.guard) << "\n";
  if (r.hasRewrite) {
    os << "  rewrite {\n";
    for (const ast::RewriteStmt* s : r.rewrite) {
      os << "    " << names(s->names) << " = " << printExpr(*s->value);
      if (!s->attrs.empty()) {
        os << " { ";
        for (size_t i = 0; i < s->attrs.size(); ++i) {
          const ast::AttrAssign& a = s->attrs[i];
          os << (i ? ", " : "");
          if (a.copyAll) os << "attrs(" << a.name.text << ")";
          else os << a.name.text << ": " << printExpr(*a.value);
        }
        os << " }";
      }
      os << "\n";
    }
    os << "  }\n";
  }
  if (r.kernel) os << "  kernel " << r.kernel->text << "\n";
  if (r.hasCost) {
    os << "  cost {\n";
    for (const ast::CostItem& c : r.cost) os << "    " << c.name.text << " = " << printExpr(*c.value) << "\n";
    os << "  }\n";
  }
  if (r.priority) os << "  priority " << *r.priority << "\n";
  if (r.hasTolerance) {
    os << "  tolerance {\n";
    for (const ast::CostItem& c : r.tolerance) os << "    " << c.name.text << " = " << printExpr(*c.value) << "\n";
    os << "  }\n";
  }
  os << "}\n";
}

}  // namespace

std::string printExpr(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Number: return e.text;
    case Expr::Kind::String: return quote(e.text);
    case Expr::Kind::Bool: return e.boolValue ? "true" : "false";
    case Expr::Kind::Name: return e.text;
    case Expr::Kind::Call: return e.text + "(" + join(e.operands) + ")";
    case Expr::Kind::List: return "[" + join(e.operands) + "]";
    case Expr::Kind::Member: {
      std::string s = wrap(*e.operands[0], precedence(*e.operands[0]) < 9) + "." + e.text;
      if (!e.isMethodCall) return s;
      return s + "(" + join(std::vector<Expr*>(e.operands.begin() + 1, e.operands.end())) + ")";
    }
    case Expr::Kind::Index:
      return wrap(*e.operands[0], precedence(*e.operands[0]) < 9) + "[" + printExpr(*e.operands[1]) + "]";
    case Expr::Kind::Unary: {
      const int p = precedence(e);
      const Expr& x = *e.operands[0];
      // `- -x` would lex as two tokens anyway, but keep unary minus tight.
      return (e.text == "not" ? "not " : "-") + wrap(x, precedence(x) < p || (e.text == "-" && x.kind == Expr::Kind::Unary));
    }
    case Expr::Kind::Binary: {
      const int p = precedence(e);
      const Expr& l = *e.operands[0];
      const Expr& r = *e.operands[1];
      return wrap(l, precedence(l) < p) + " " + e.text + " " + wrap(r, precedence(r) <= p);
    }
  }
  return "?";
}

std::string printFile(const ast::File& file) {
  std::ostringstream os;
  if (file.packName) {
    os << "pack " << file.packName->text;
    if (file.version) os << " version " << quote(*file.version);
    os << "\n";
  }
  size_t lastKind = SIZE_MAX;
  bool first = !file.packName;
  for (const ast::Item& item : file.items) {
    // A blank line between runs of different items and around every rule.
    if (!first && (item.index() != lastKind || std::holds_alternative<ast::Rule*>(item))) os << "\n";
    first = false;
    lastKind = item.index();
    if (auto* i = std::get_if<ast::Import*>(&item)) os << "import " << quote((*i)->path) << "\n";
    if (auto* o = std::get_if<ast::OpDecl*>(&item)) printOp(os, **o);
    if (auto* c = std::get_if<ast::ClassDecl*>(&item)) {
      os << "class " << (*c)->name.text << " =";
      for (size_t k = 0; k < (*c)->members.size(); ++k) os << (k ? " | " : " ") << (*c)->members[k].text;
      os << "\n";
    }
    if (auto* r = std::get_if<ast::Rule*>(&item)) printRule(os, **r);
    if (auto* d = std::get_if<ast::Disable*>(&item)) os << "disable rule " << (*d)->rule.text << "\n";
  }
  return os.str();
}

}  // namespace fusec::grammar
