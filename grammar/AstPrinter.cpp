/// Canonical `.fuse` text from the AST: two-space indentation, one statement
/// per line, clauses of a rule in a fixed order, the fewest parentheses that
/// keep the tree. Comments stay: each on its own line before the construct
/// it preceded, or at the end of the line it ended; a guard keeps its line
/// breaks (before `and`). `fusec fmt` prints this.
#include <algorithm>
#include <functional>
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

/// Prints a file's items with its comments put back by position.
class FilePrinter {
 public:
  FilePrinter(std::ostream& os, const std::vector<ast::Comment>& comments) : os_(os), comments_(comments) {}

  /// Comments that come before `r`, each on its own line at `indent`.
  void leading(const SourceRange& r, const char* indent) {
    while (next_ < comments_.size() && before(comments_[next_].range, r)) {
      const ast::Comment& c = comments_[next_++];
      // Blank lines around it in the source stay (one at most).
      if (lastLine_ && c.range.line > lastLine_ + 1) blank();
      os_ << indent << c.text << "\n";
      wrote(c.range.endLine);
      const bool more = next_ < comments_.size() && before(comments_[next_].range, r);
      const uint32_t following = more ? comments_[next_].range.line : r.line;
      if (following > c.range.endLine + 1) blank();
    }
  }

  /// Ends a printed line whose source ended on `line`: the comments written
  /// after the code on that line, then the newline.
  void endLine(uint32_t line) {
    while (next_ < comments_.size() && !comments_[next_].ownLine && comments_[next_].range.line == line)
      os_ << " " << comments_[next_++].text;
    os_ << "\n";
    wrote(line);
  }

  /// An empty line, unless the last one printed was empty (or none was).
  void blank() {
    if (lastBlank_ || !lastLine_) return;
    os_ << "\n";
    lastBlank_ = true;
  }

  bool hasRest() const { return next_ < comments_.size(); }

  /// Whatever comments are left (at the end of the file).
  void rest() {
    while (next_ < comments_.size()) os_ << comments_[next_++].text << "\n";
  }

  void op(const ast::OpDecl& op) {
    os_ << "op " << op.name.text << "(";
    for (size_t i = 0; i < op.params.size(); ++i) os_ << (i ? ", " : "") << param(op.params[i]);
    os_ << ")";
    if (op.resultType) os_ << ": " << op.resultType->text;
    if (!op.results.empty()) {
      os_ << " -> (";
      for (size_t i = 0; i < op.results.size(); ++i) os_ << (i ? ", " : "") << param(op.results[i]);
      os_ << ")";
    }
    for (const ast::Name& t : op.traits) os_ << " " << t.text;
    if (!op.attrs.empty()) {
      // Short attribute lists stay on the line; longer ones get a line each.
      const bool inlineAttrs = op.attrs.size() <= 2;
      os_ << (inlineAttrs ? " { " : " {\n");
      for (size_t i = 0; i < op.attrs.size(); ++i) {
        const ast::AttrDecl& a = op.attrs[i];
        std::string text = a.name.text + (a.optional ? "?" : "") + ": " + a.type.text;
        if (a.defaultValue) text += " = " + printExpr(*a.defaultValue);
        if (inlineAttrs) {
          os_ << (i ? ", " : "") << text;
        } else {
          leading(a.range, "  ");
          os_ << "  " << text << ",";
          endLine(a.range.endLine);
        }
      }
      os_ << (inlineAttrs ? " }" : "}");
    }
    if (op.semantics) os_ << " = " << printExpr(*op.semantics);
    if (!op.cost.empty()) {
      os_ << " cost {";
      for (const ast::CostItem& c : op.cost) os_ << " " << c.name.text << " = " << printExpr(*c.value);
      os_ << " }";
    }
    endLine(op.range.endLine);
  }

  void rule(const ast::Rule& r) {
    os_ << (r.isOverride ? "override " : "") << "rule " << r.name.text << " {";
    endLine(r.name.range.line);
    if (r.hasPattern) {
      leading(r.patternRange, "  ");
      os_ << "  " << (r.isFusion ? "fuse" : "match") << " {";
      endLine(r.patternRange.line);
      for (const ast::PatternStmt* st : r.pattern) {
        leading(st->range, "    ");
        os_ << "    " << names(st->names) << " = " << patternCall(*st->call);
        endLine(st->range.endLine);
      }
      os_ << "  }";
      endLine(r.patternRange.endLine);
    }
    if (r.guard) guard(*r.guard);
    if (r.hasRewrite) {
      leading(r.rewriteRange, "  ");
      os_ << "  rewrite {";
      endLine(r.rewriteRange.line);
      for (const ast::RewriteStmt* st : r.rewrite) {
        leading(st->range, "    ");
        os_ << "    " << names(st->names) << " = " << printExpr(*st->value);
        if (!st->attrs.empty()) {
          os_ << " { ";
          for (size_t i = 0; i < st->attrs.size(); ++i) {
            const ast::AttrAssign& a = st->attrs[i];
            os_ << (i ? ", " : "");
            if (a.copyAll) os_ << "attrs(" << a.name.text << ")";
            else os_ << a.name.text << ": " << printExpr(*a.value);
          }
          os_ << " }";
        }
        endLine(st->range.endLine);
      }
      os_ << "  }";
      endLine(r.rewriteRange.endLine);
    }
    if (r.kernel) {
      leading(r.kernel->range, "  ");
      os_ << "  kernel " << r.kernel->text;
      endLine(r.kernel->range.endLine);
    }
    if (r.hasCost) items("cost", r.cost);
    if (r.priority) {
      leading(r.priorityRange, "  ");
      os_ << "  priority " << *r.priority;
      endLine(r.priorityRange.endLine);
    }
    if (r.hasTolerance) items("tolerance", r.tolerance);
    leading(SourceRange{r.range.fileId, r.range.endLine, r.range.endCol, r.range.endLine, r.range.endCol}, "  ");
    os_ << "}";
    endLine(r.range.endLine);
  }

 private:
  static bool before(const SourceRange& c, const SourceRange& r) {
    return c.line < r.line || (c.line == r.line && c.col < r.col);
  }

  /// `where a and b and c`: conjuncts that began a new line in the source
  /// begin one here too, with the comments between them.
  void guard(const Expr& g) {
    std::vector<const Expr*> conjuncts;
    std::function<void(const Expr&)> flatten = [&](const Expr& e) {
      if (e.kind == Expr::Kind::Binary && e.text == "and") {
        flatten(*e.operands[0]);
        flatten(*e.operands[1]);
      } else {
        conjuncts.push_back(&e);
      }
    };
    flatten(g);
    leading(g.range, "  ");
    os_ << "  where ";
    int andPrecedence = 0;
    if (g.kind == Expr::Kind::Binary && g.text == "and") andPrecedence = precedence(g);
    for (size_t i = 0; i < conjuncts.size(); ++i) {
      const Expr& c = *conjuncts[i];
      const std::string text = andPrecedence ? wrap(c, precedence(c) < andPrecedence) : printExpr(c);
      if (i > 0 && c.range.line > conjuncts[i - 1]->range.endLine) {
        endLine(conjuncts[i - 1]->range.endLine);
        leading(c.range, "    ");
        os_ << "    and " << text;
      } else {
        os_ << (i ? " and " : "") << text;
      }
    }
    endLine(conjuncts.back()->range.endLine);
  }

  void items(const char* clause, const std::vector<ast::CostItem>& list) {
    if (!list.empty()) leading(list.front().range, "  ");
    os_ << "  " << clause << " {\n";
    for (const ast::CostItem& c : list) {
      leading(c.range, "    ");
      os_ << "    " << c.name.text << " = " << printExpr(*c.value);
      endLine(c.range.endLine);
    }
    os_ << "  }\n";
  }

  void wrote(uint32_t sourceLine) {
    lastBlank_ = false;
    lastLine_ = std::max(lastLine_, std::max<uint32_t>(sourceLine, 1));
  }

  std::ostream& os_;
  const std::vector<ast::Comment>& comments_;
  size_t next_ = 0;
  uint32_t lastLine_ = 0;   ///< the source line of the last thing printed (0: nothing yet)
  bool lastBlank_ = false;  ///< the last line printed was empty
};

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
  FilePrinter p(os, file.comments);
  if (file.packName) {
    p.leading(file.packName->range, "");
    os << "pack " << file.packName->text;
    if (file.version) os << " version " << quote(*file.version);
    p.endLine(file.packName->range.line);
  }
  size_t lastKind = SIZE_MAX;
  bool first = !file.packName;
  for (const ast::Item& item : file.items) {
    // A blank line between runs of different items and around every rule.
    if (!first && (item.index() != lastKind || std::holds_alternative<ast::Rule*>(item))) p.blank();
    first = false;
    lastKind = item.index();
    const SourceRange range = std::visit([](const auto* i) { return i->range; }, item);
    p.leading(range, "");
    if (auto* i = std::get_if<ast::Import*>(&item)) {
      os << "import " << quote((*i)->path);
      p.endLine(range.endLine);
    }
    if (auto* o = std::get_if<ast::OpDecl*>(&item)) p.op(**o);
    if (auto* c = std::get_if<ast::ClassDecl*>(&item)) {
      os << "class " << (*c)->name.text << " =";
      for (size_t k = 0; k < (*c)->members.size(); ++k) os << (k ? " | " : " ") << (*c)->members[k].text;
      p.endLine(range.endLine);
    }
    if (auto* r = std::get_if<ast::Rule*>(&item)) p.rule(**r);
    if (auto* d = std::get_if<ast::Disable*>(&item)) {
      os << "disable rule " << (*d)->rule.text;
      p.endLine(range.endLine);
    }
  }
  if (p.hasRest()) p.blank();
  p.rest();
  return os.str();
}

}  // namespace fusec::grammar
