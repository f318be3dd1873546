/// Parsing: ANTLR's lexer and parser over the text, syntax errors routed into
/// the diagnostic engine with readable messages, then one walk over the parse
/// tree that builds our AST. ANTLR types stay in this file.
#include <set>
#include <sstream>

#include "FuseLexer.h"
#include "FuseParser.h"
#include "antlr4-runtime.h"
#include "fusec/grammar/Parser.h"

namespace fusec::grammar {
namespace {

using gen::FuseParser;

/// Deeper bracket nesting than this is refused before parsing, so that the
/// recursive-descent parser and the tree walks cannot exhaust the stack.
constexpr int kMaxNesting = 128;
/// Longer operator chains than this are refused for the same reason: ANTLR
/// builds `a + b + c ...` as a left-deep tree.
constexpr int kMaxTokensPerFile = 1 << 20;

SourceRange rangeOf(uint32_t fileId, const antlr4::Token* start, const antlr4::Token* stop) {
  SourceRange r;
  r.fileId = fileId;
  r.line = static_cast<uint32_t>(start->getLine());
  r.col = static_cast<uint32_t>(start->getCharPositionInLine()) + 1;
  if (!stop || stop->getType() == antlr4::Token::EOF || stop->getTokenIndex() < start->getTokenIndex()) stop = start;
  r.endLine = static_cast<uint32_t>(stop->getLine());
  size_t len = stop->getType() == antlr4::Token::EOF ? 1 : std::max<size_t>(1, stop->getText().size());
  r.endCol = static_cast<uint32_t>(stop->getCharPositionInLine() + len);
  return r;
}

/// A token's spelling for messages: `)`, or words for classes of tokens.
std::string describeTokenType(const antlr4::dfa::Vocabulary& vocab, size_t type) {
  if (type == antlr4::Token::EOF) return "end of file";
  switch (type) {
    case FuseParser::IDENT: return "a name";
    case FuseParser::NUMBER: return "a number";
    case FuseParser::STRING: return "a string";
    default: break;
  }
  std::string lit = vocab.getLiteralName(type);
  if (lit.size() >= 2 && lit.front() == '\'') lit = lit.substr(1, lit.size() - 2);
  return "`" + lit + "`";
}

std::string describeToken(const antlr4::Token* t) {
  if (!t || t->getType() == antlr4::Token::EOF) return "end of file";
  std::string text = t->getText();
  if (text.size() > 24) text = text.substr(0, 21) + "...";
  return "`" + text + "`";
}

/// Turns ANTLR's syntax errors ("mismatched input 'x' expecting {...}") into
/// located diagnostics that say what was found and what would fit.
class SyntaxErrorListener : public antlr4::BaseErrorListener {
 public:
  SyntaxErrorListener(DiagnosticEngine& diags, uint32_t fileId) : diags_(diags), fileId_(fileId) {}

  void syntaxError(antlr4::Recognizer* recognizer, antlr4::Token* offending, size_t line, size_t col,
                   const std::string& /*antlrMessage*/, std::exception_ptr) override {
    // One mistake puts the parser out of step for the rest of the
    // declaration it is in: what follows would mostly be echoes of the
    // first error, so only it is said, until the next declaration starts.
    if (offending && !startsAfterLastError(recognizer, offending)) return;
    if (offending) lastErrorToken_ = offending->getTokenIndex();
    if (++count_ > kMaxReported) return;
    SourceRange r;
    if (offending) {
      r = rangeOf(fileId_, offending, offending);
    } else {
      r = SourceRange{fileId_, static_cast<uint32_t>(line), static_cast<uint32_t>(col) + 1,
                      static_cast<uint32_t>(line), static_cast<uint32_t>(col) + 1};
    }
    std::string message = "unexpected " + describeToken(offending);
    if (auto* parser = dynamic_cast<antlr4::Parser*>(recognizer)) {
      if (std::string hint = mistakeHint(parser, offending); !hint.empty()) {
        diags_.emitError(r, message + "; " + hint);
        return;
      }
      const antlr4::misc::IntervalSet expectedSet = parser->getExpectedTokens();
      // Where any expression may start, say so rather than listing tokens.
      if (expectedSet.contains(static_cast<size_t>(FuseParser::NUMBER)) &&
          expectedSet.contains(static_cast<size_t>(FuseParser::IDENT)) &&
          expectedSet.contains(static_cast<size_t>(FuseParser::STRING))) {
        diags_.emitError(r, message + "; expected an expression");
        return;
      }
      std::vector<std::string> expected;
      for (size_t t : expectedSet.toList())
        if (t != FuseParser::UNKNOWN_CHAR) expected.push_back(describeTokenType(parser->getVocabulary(), t));
      if (!expected.empty() && expected.size() <= 4) {
        message += "; expected ";
        for (size_t i = 0; i < expected.size(); ++i)
          message += (i == 0 ? "" : i + 1 == expected.size() ? " or " : ", ") + expected[i];
      }
    }
    diags_.emitError(r, message);
  }

 private:
  /// Whether a declaration (`rule`, `op`, `import`, ... at the start of a
  /// line) begins between the last reported error and `offending`.
  bool startsAfterLastError(antlr4::Recognizer* recognizer, antlr4::Token* offending) const {
    if (lastErrorToken_ == kNone) return true;
    auto* parser = dynamic_cast<antlr4::Parser*>(recognizer);
    if (!parser) return true;
    antlr4::TokenStream* tokens = parser->getTokenStream();
    static const std::set<std::string> kDeclarations = {"pack", "import", "op", "class", "rule", "override", "disable"};
    for (size_t i = lastErrorToken_ + 1; i <= offending->getTokenIndex() && i < tokens->size(); ++i) {
      antlr4::Token* t = tokens->get(i);
      if (t->getCharPositionInLine() == 0 && kDeclarations.count(t->getText())) return true;
    }
    return false;
  }

  /// What the author most likely meant, for mistakes rule authors make.
  static std::string mistakeHint(antlr4::Parser* parser, antlr4::Token* offending) {
    if (!offending) return {};
    antlr4::Token* before = parser->getTokenStream()->LT(-1);
    const std::string text = offending->getText(), previous = before ? before->getText() : "";
    // `Concat(xs...)`: a pattern cannot bind a variable number of operands.
    if (text == "..." && previous != "," && previous != "(")
      return "a pattern names each operand it binds; `...` on its own stands for any further operands "
             "(`Concat(a, b, ...)`, `Activation(c, ...)`)";
    // `Softmax(x, { axis: -1 })`: attributes follow the call.
    if (text == "{" && (previous == "," || previous == "("))
      return "attributes follow the operands' parentheses: `Softmax(x) { axis: -1 }`";
    return {};
  }

  static constexpr int kMaxReported = 20;
  DiagnosticEngine& diags_;
  uint32_t fileId_;
  int count_ = 0;
  static constexpr size_t kNone = SIZE_MAX;
  size_t lastErrorToken_ = kNone;
};

/// Walks the parse tree and builds the AST.
class AstBuilder {
 public:
  AstBuilder(ast::AstContext& ctx, DiagnosticEngine& diags, uint32_t fileId)
      : ctx_(ctx), diags_(diags), fileId_(fileId) {}

  ast::File* build(FuseParser::FileContext* tree) {
    auto* file = ctx_.make<ast::File>();
    file->fileId = fileId_;
    if (auto* h = tree->packHeader()) {
      if (h->name) file->packName = name(h->name);
      if (h->version) file->version = unquote(h->version);
    }
    for (auto* item : tree->item()) {
      if (auto* i = item->importDecl()) {
        if (i->path) file->items.push_back(ctx_.make<ast::Import>(ast::Import{unquote(i->path), range(i)}));
      } else if (auto* o = item->opDecl()) {
        file->items.push_back(op(o));
      } else if (auto* c = item->classDecl()) {
        file->items.push_back(classDecl(c));
      } else if (auto* r = item->ruleDecl()) {
        file->items.push_back(rule(r));
      } else if (auto* d = item->disableDecl()) {
        if (d->name) file->items.push_back(ctx_.make<ast::Disable>(ast::Disable{name(d->name), range(d)}));
      }
    }
    return file;
  }

 private:
  SourceRange range(antlr4::ParserRuleContext* c) { return rangeOf(fileId_, c->getStart(), c->getStop()); }
  SourceRange range(antlr4::Token* t) { return rangeOf(fileId_, t, t); }
  ast::Name name(antlr4::Token* t) {
    if (!t) return {};
    return ast::Name{t->getText(), range(t)};
  }

  std::string unquote(antlr4::Token* t) {
    std::string s = t->getText();
    if (s.size() < 2) return {};
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] == '\\' && i + 2 < s.size()) {
        char c = s[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
      } else {
        out += s[i];
      }
    }
    return out;
  }

  ast::Param param(FuseParser::ParamContext* p) {
    ast::Param out;
    out.name = name(p->name);
    out.optional = p->optional != nullptr;
    out.variadic = p->variadic != nullptr;
    if (p->type) out.type = name(p->type);
    out.range = range(p);
    return out;
  }

  ast::OpDecl* op(FuseParser::OpDeclContext* o) {
    auto* d = ctx_.make<ast::OpDecl>();
    d->name = name(o->name);
    for (auto* p : o->params) d->params.push_back(param(p));
    if (o->resultType) d->resultType = name(o->resultType);
    for (auto* p : o->results) d->results.push_back(param(p));
    for (auto* t : o->traits) d->traits.push_back(name(t));
    if (auto* a = o->attrDecls())
      for (auto* ad : a->attrs) {
        ast::AttrDecl decl;
        decl.name = name(ad->name);
        decl.optional = ad->optional != nullptr;
        decl.type = name(ad->type);
        if (ad->value) decl.defaultValue = expr(ad->value);
        decl.range = range(ad);
        d->attrs.push_back(decl);
      }
    if (o->semantics) d->semantics = expr(o->semantics);
    for (auto* item : o->costs) d->cost.push_back(ast::CostItem{name(item->name), expr(item->value), range(item)});
    d->range = range(o);
    return d;
  }

  ast::ClassDecl* classDecl(FuseParser::ClassDeclContext* c) {
    auto* d = ctx_.make<ast::ClassDecl>();
    d->name = name(c->name);
    for (auto* m : c->members) d->members.push_back(name(m));
    d->range = range(c);
    return d;
  }

  ast::Rule* rule(FuseParser::RuleDeclContext* r) {
    auto* rule = ctx_.make<ast::Rule>();
    rule->name = name(r->name);
    rule->isOverride = r->override != nullptr;
    rule->range = range(r);
    // Each clause may appear once; a repeat is an error noting the first.
    std::vector<std::pair<std::string, SourceRange>> seen;
    auto once = [&](const std::string& what, SourceRange at) {
      for (auto& [w, prev] : seen)
        if (w == what) {
          diags_.emitError(at, "rule `" + rule->name.text + "` has more than one `" + what + "` clause")
              .attachNote(prev, "first `" + what + "` clause is here");
          return false;
        }
      seen.emplace_back(what, at);
      return true;
    };
    for (auto* clause : r->clauses) {
      SourceRange at = range(clause);
      if (auto* m = dynamic_cast<FuseParser::MatchClauseContext*>(clause)) {
        if (!once("match` or `fuse", at)) continue;
        rule->hasPattern = true;
        rule->patternRange = at;
        for (auto* s : m->patternStmt()) rule->pattern.push_back(patternStmt(s));
      } else if (auto* f = dynamic_cast<FuseParser::FuseClauseContext*>(clause)) {
        if (!once("match` or `fuse", at)) continue;
        rule->hasPattern = true;
        rule->isFusion = true;
        rule->patternRange = at;
        for (auto* s : f->patternStmt()) rule->pattern.push_back(patternStmt(s));
      } else if (auto* w = dynamic_cast<FuseParser::WhereClauseContext*>(clause)) {
        if (once("where", at) && w->expr()) rule->guard = expr(w->expr());
      } else if (auto* rw = dynamic_cast<FuseParser::RewriteClauseContext*>(clause)) {
        if (!once("rewrite", at)) continue;
        rule->hasRewrite = true;
        rule->rewriteRange = at;
        for (auto* s : rw->rewriteStmt()) rule->rewrite.push_back(rewriteStmt(s));
      } else if (auto* k = dynamic_cast<FuseParser::KernelClauseContext*>(clause)) {
        if (once("kernel", at) && k->family) rule->kernel = name(k->family);
      } else if (auto* c = dynamic_cast<FuseParser::CostClauseContext*>(clause)) {
        if (!once("cost", at)) continue;
        rule->hasCost = true;
        for (auto* item : c->costItem())
          rule->cost.push_back(ast::CostItem{name(item->name), expr(item->value), range(item)});
      } else if (auto* t = dynamic_cast<FuseParser::ToleranceClauseContext*>(clause)) {
        if (!once("tolerance", at)) continue;
        rule->hasTolerance = true;
        for (auto* item : t->costItem())
          rule->tolerance.push_back(ast::CostItem{name(item->name), expr(item->value), range(item)});
      } else if (auto* p = dynamic_cast<FuseParser::PriorityClauseContext*>(clause)) {
        if (!once("priority", at) || !p->value) continue;
        rule->priorityRange = at;
        try {
          size_t used = 0;
          long long v = std::stoll(p->value->getText(), &used);
          if (used != p->value->getText().size()) throw std::invalid_argument("not an integer");
          rule->priority = v;
        } catch (const std::exception&) {
          diags_.emitError(range(p->value), "priority must be an integer, got `" + p->value->getText() + "`");
        }
      }
    }
    return rule;
  }

  ast::PatternStmt* patternStmt(FuseParser::PatternStmtContext* s) {
    auto* stmt = ctx_.make<ast::PatternStmt>();
    for (auto* n : s->names) stmt->names.push_back(name(n));
    stmt->call = s->patternCall() ? patternCall(s->patternCall()) : ctx_.make<ast::PatternCall>();
    stmt->range = range(s);
    return stmt;
  }

  ast::PatternCall* patternCall(FuseParser::PatternCallContext* c) {
    auto* call = ctx_.make<ast::PatternCall>();
    call->range = range(c);
    if (auto* single = dynamic_cast<FuseParser::SingleOpRefContext*>(c->opRef())) {
      call->op.alternatives.push_back(name(single->name));
      if (single->repeat) call->op.repeat = single->repeat->getText()[0];
    } else if (auto* alt = dynamic_cast<FuseParser::AltOpRefContext*>(c->opRef())) {
      for (auto* a : alt->alts) call->op.alternatives.push_back(name(a));
      if (alt->repeat) call->op.repeat = alt->repeat->getText()[0];
    }
    if (c->opRef()) call->op.range = range(c->opRef());
    for (auto* a : c->args) {
      ast::PatternArg arg;
      arg.range = range(a);
      if (auto* n = dynamic_cast<FuseParser::NestedArgContext*>(a)) {
        arg.kind = ast::PatternArg::Kind::Call;
        arg.call = patternCall(n->patternCall());
      } else if (auto* v = dynamic_cast<FuseParser::NameArgContext*>(a)) {
        arg.kind = ast::PatternArg::Kind::Name;
        arg.name = name(v->name);
        arg.optional = v->optional != nullptr;
      } else if (dynamic_cast<FuseParser::WildcardArgContext*>(a)) {
        arg.kind = ast::PatternArg::Kind::Wildcard;
      } else {
        arg.kind = ast::PatternArg::Kind::Rest;
      }
      call->args.push_back(arg);
    }
    if (auto* attrs = c->attrPattern())
      for (auto* m : attrs->items) call->attrs.push_back(ast::AttrMatch{name(m->name), expr(m->value), range(m)});
    return call;
  }

  ast::RewriteStmt* rewriteStmt(FuseParser::RewriteStmtContext* s) {
    auto* stmt = ctx_.make<ast::RewriteStmt>();
    for (auto* n : s->names) stmt->names.push_back(name(n));
    stmt->value = expr(s->value);
    stmt->range = range(s);
    if (auto* set = s->attrSet())
      for (auto* a : set->items) {
        ast::AttrAssign assign;
        assign.range = range(a);
        if (auto* copy = dynamic_cast<FuseParser::CopyAttrsContext*>(a)) {
          assign.copyAll = true;
          assign.name = name(copy->from);
        } else if (auto* setAttr = dynamic_cast<FuseParser::SetAttrContext*>(a)) {
          assign.name = name(setAttr->name);
          assign.value = expr(setAttr->value);
        }
        stmt->attrs.push_back(assign);
      }
    return stmt;
  }

  ast::Expr* make(ast::Expr::Kind kind, antlr4::ParserRuleContext* c, std::string text = {}) {
    auto* e = ctx_.make<ast::Expr>();
    e->kind = kind;
    e->range = range(c);
    e->text = std::move(text);
    return e;
  }

  /// Missing pieces (after a syntax error) become a name `<error>`, so later
  /// stages see a well-formed tree; errors were already reported.
  ast::Expr* missing(antlr4::ParserRuleContext* c) {
    auto* e = ctx_.make<ast::Expr>();
    e->kind = ast::Expr::Kind::Name;
    e->text = "<error>";
    if (c && c->getStart()) e->range = range(c);
    return e;
  }

  ast::Expr* expr(FuseParser::ExprContext* c) {
    if (!c) return missing(nullptr);
    using K = ast::Expr::Kind;
    if (auto* p = dynamic_cast<FuseParser::PrimaryExprContext*>(c)) return primary(p->primary());
    if (auto* m = dynamic_cast<FuseParser::MemberExprContext*>(c)) {
      auto* e = make(K::Member, c, m->member ? m->member->getText() : "<error>");
      e->operands = {expr(m->expr(0))};
      e->isMethodCall = m->call != nullptr;
      for (auto* a : m->args) e->operands.push_back(expr(a));
      return e;
    }
    if (auto* i = dynamic_cast<FuseParser::IndexExprContext*>(c)) {
      auto* e = make(K::Index, c);
      for (auto* x : i->expr()) e->operands.push_back(expr(x));
      if (e->operands.size() != 2) return missing(c);
      return e;
    }
    if (auto* u = dynamic_cast<FuseParser::UnaryExprContext*>(c)) {
      auto* e = make(K::Unary, c, u->op ? u->op->getText() : "-");
      e->operands = {expr(u->expr())};
      return e;
    }
    if (auto* b = dynamic_cast<FuseParser::BinaryExprContext*>(c)) {
      auto* e = make(K::Binary, c, b->op ? b->op->getText() : "+");
      e->operands = {expr(b->lhs), expr(b->rhs)};
      return e;
    }
    return missing(c);
  }

  ast::Expr* primary(FuseParser::PrimaryContext* c) {
    using K = ast::Expr::Kind;
    if (!c) return missing(nullptr);
    if (auto* n = dynamic_cast<FuseParser::NumberLitContext*>(c)) {
      std::string text = n->NUMBER()->getText();
      auto* e = make(K::Number, c, text);
      e->isInteger = text.find_first_of(".eE") == std::string::npos;
      e->number = std::strtod(text.c_str(), nullptr);
      return e;
    }
    if (auto* s = dynamic_cast<FuseParser::StringLitContext*>(c))
      return make(K::String, c, unquote(s->STRING()->getSymbol()));
    if (auto* b = dynamic_cast<FuseParser::BoolLitContext*>(c)) {
      auto* e = make(K::Bool, c, b->value->getText());
      e->boolValue = b->value->getText() == "true";
      return e;
    }
    if (auto* call = dynamic_cast<FuseParser::CallExprContext*>(c)) {
      auto* e = make(K::Call, c, call->callee->getText());
      for (auto* a : call->args) e->operands.push_back(expr(a));
      return e;
    }
    if (auto* n = dynamic_cast<FuseParser::NameExprContext*>(c)) return make(K::Name, c, n->name->getText());
    if (auto* p = dynamic_cast<FuseParser::ParenExprContext*>(c)) return expr(p->expr());
    if (auto* l = dynamic_cast<FuseParser::ListExprContext*>(c)) {
      auto* e = make(K::List, c);
      for (auto* x : l->items) e->operands.push_back(expr(x));
      return e;
    }
    return missing(c);
  }

  ast::AstContext& ctx_;
  DiagnosticEngine& diags_;
  uint32_t fileId_;
};

/// Refuses input whose nesting or size could exhaust the stack in the
/// recursive parser or in tree walks. Returns false after reporting.
bool withinLimits(antlr4::CommonTokenStream& tokens, DiagnosticEngine& diags, uint32_t fileId) {
  tokens.fill();
  if (tokens.size() > static_cast<size_t>(kMaxTokensPerFile)) {
    diags.emitError(SourceRange{fileId, 1, 1, 1, 1}, "file is too large (more than " +
                                                         std::to_string(kMaxTokensPerFile) + " tokens)");
    return false;
  }
  int depth = 0, chain = 0;
  for (antlr4::Token* t : tokens.getTokens()) {
    const std::string text = t->getText();
    if (text == "(" || text == "[" || text == "{") {
      if (++depth > kMaxNesting) {
        diags.emitError(rangeOf(fileId, t, t), "nesting is too deep (more than " + std::to_string(kMaxNesting) +
                                                   " open brackets)");
        return false;
      }
    } else if (text == ")" || text == "]" || text == "}") {
      depth = std::max(0, depth - 1);
    }
    // Operators in a row without a closing statement build deep trees.
    static const std::string kOps[] = {"+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=",
                                       "and", "or", "??", ".", "not"};
    bool isOp = std::find(std::begin(kOps), std::end(kOps), text) != std::end(kOps);
    chain = isOp ? chain + 1 : (text == "=" || text == "{" || text == "}" ? 0 : chain);
    if (chain > kMaxNesting * 8) {
      diags.emitError(rangeOf(fileId, t, t), "expression is too long (more than " +
                                                 std::to_string(kMaxNesting * 8) + " operators)");
      return false;
    }
  }
  return true;
}

/// ANTLR's input stream throws on malformed UTF-8; find the first bad byte
/// first and report it with a location.
bool validUtf8(const std::string& text, DiagnosticEngine& diags, uint32_t fileId) {
  uint32_t line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len != 0 && i + len <= text.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (ok && len == 2) ok = c >= 0xc2;  // no overlong forms
    if (ok && len == 3) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong, surrogates
    }
    if (ok && len == 4) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = c <= 0xf4 && !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);
    }
    if (!ok) {
      diags.emitError(SourceRange{fileId, line, col, line, col}, "file is not valid UTF-8");
      return false;
    }
    if (c == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += len;
  }
  return true;
}

}  // namespace

std::vector<std::string> lexTokens(const std::string& text) {
  antlr4::ANTLRInputStream input(text);
  gen::FuseLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  std::vector<std::string> out;
  for (antlr4::Token* t : tokens.getTokens())
    if (t->getType() != antlr4::Token::EOF && t->getChannel() == antlr4::Token::DEFAULT_CHANNEL) out.push_back(t->getText());
  return out;
}

ast::File* parseFile(ast::AstContext& context, const SourceManager& sources, uint32_t fileId,
                     DiagnosticEngine& diags) {
  auto* empty = context.make<ast::File>();
  empty->fileId = fileId;
  if (!validUtf8(sources.contents(fileId), diags, fileId)) return empty;
  antlr4::ANTLRInputStream input(sources.contents(fileId));
  gen::FuseLexer lexer(&input);
  lexer.removeErrorListeners();
  antlr4::CommonTokenStream tokens(&lexer);
  if (!withinLimits(tokens, diags, fileId)) return empty;
  FuseParser parser(&tokens);
  parser.removeErrorListeners();
  SyntaxErrorListener listener(diags, fileId);
  parser.addErrorListener(&listener);
  FuseParser::FileContext* tree = parser.file();
  ast::File* file = AstBuilder(context, diags, fileId).build(tree);
  // Comments ride on the hidden channel: the parser never sees them, the
  // printer puts them back.
  size_t lastCodeLine = 0;
  for (antlr4::Token* t : tokens.getTokens()) {
    if (t->getType() == antlr4::Token::EOF) break;
    if (t->getChannel() != antlr4::Token::HIDDEN_CHANNEL) {
      lastCodeLine = t->getLine();
      continue;
    }
    ast::Comment c{t->getText(), rangeOf(fileId, t, t), lastCodeLine != t->getLine()};
    c.range.endLine = c.range.line + static_cast<uint32_t>(std::count(c.text.begin(), c.text.end(), '\n'));
    file->comments.push_back(std::move(c));
  }
  return file;
}

}  // namespace fusec::grammar
