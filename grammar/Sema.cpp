/// Semantic checks. In order: op declarations (kinds, attributes, scalar
/// semantics type-checked against a fixed set of functions), classes
/// (members resolved, nested classes flattened), then rules (patterns compiled
/// into nodes and bindings, guards, rewrites and costs typed against the
/// bindings), then pack-level edits (override, disable). Every problem is
/// reported with its location; checking goes on after an error so that one
/// run reports them all.
#include "Sema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "fusec/engine/Builtins.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Tolerance.h"
#include "fusec/engine/TypeInference.h"
#include "fusec/grammar/Parser.h"

namespace fusec::grammar {
namespace {

using ast::Expr;

std::string quoted(const std::string& s) { return "`" + s + "`"; }

std::string plural(size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

/// The arguments a call of `b` takes.
std::pair<size_t, size_t> callArity(const Builtin& b) { return {b.minArgs, b.maxArgs}; }

bool isNumeric(ExprType t) { return t == ExprType::Int || t == ExprType::Float || t == ExprType::Unknown; }

class Checker {
 public:
  Checker(const SourceManager& sources, DiagnosticEngine& diags, const KernelFamilies* families, RuleSet& out)
      : sources_(sources), diags_(diags), families_(families), out_(out) {}

  size_t run(const std::vector<ast::File*>& files) {
    for (ast::File* f : files) collect(*f);
    for (ast::OpDecl* op : opOrder_) checkOp(*op);
    for (ast::ClassDecl* c : classOrder_) resolveClass(*c);
    size_t declared = 0;
    for (ast::File* f : files) declared += checkFileRules(*f);
    for (auto& [name, entry] : rules_)
      if (!entry.disabled && entry.rule) finalRules_.emplace_back(entry.order, std::move(*entry.rule));
    std::sort(finalRules_.begin(), finalRules_.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (auto& [order, rule] : finalRules_) out_.rules.push_back(std::move(rule));
    for (ast::File* f : files)
      out_.packs.push_back(f->packName ? f->packName->text : sources_.path(f->fileId));
    return declared;
  }

 private:
  // ---- declarations ---------------------------------------------------------

  SourceLocation loc(const SourceRange& r) const {
    if (!r.valid()) return {};
    return SourceLocation{sources_.path(r.fileId), r.line, r.col};
  }

  void collect(ast::File& file) {
    for (const ast::Item& item : file.items) {
      if (auto* op = std::get_if<ast::OpDecl*>(&item)) {
        // The reference interpreter, the oracle of `run --check` and
        // `verify`, runs standard ops by the shipped catalog's semantics: a
        // pack that redefined one would change the oracle with the kernels.
        if (isStandardOnnxOp((*op)->name.text) && !isShippedCatalog(file.fileId)) {
          diags_.emitError((*op)->name.range, "op " + quoted((*op)->name.text) +
                                                  " is a standard ONNX op: its meaning is ONNX's, declared in the shipped "
                                                  "catalog `core/ops`; give a new op a name of its own");
          continue;
        }
        auto [it, fresh] = opDecls_.emplace((*op)->name.text, *op);
        if (!fresh) {
          diags_.emitError((*op)->name.range, "op " + quoted((*op)->name.text) + " is declared twice")
              .attachNote(it->second->name.range, "previous definition is here");
          continue;
        }
        opOrder_.push_back(*op);
      } else if (auto* c = std::get_if<ast::ClassDecl*>(&item)) {
        if (opDecls_.count((*c)->name.text)) {
          diags_.emitError((*c)->name.range, "class " + quoted((*c)->name.text) + " has the name of an op")
              .attachNote(opDecls_[(*c)->name.text]->name.range, "the op is declared here");
          continue;
        }
        auto [it, fresh] = classDecls_.emplace((*c)->name.text, *c);
        if (!fresh) {
          diags_.emitError((*c)->name.range, "class " + quoted((*c)->name.text) + " is declared twice")
              .attachNote(it->second->name.range, "previous definition is here");
          continue;
        }
        classOrder_.push_back(*c);
      }
    }
  }

  /// Whether file `fileId` is the shipped op catalog, rules/core/ops.fuse.
  bool isShippedCatalog(uint32_t fileId) const { return isShippedCatalogFile(sources_.path(fileId)); }

  std::optional<Attribute> attrLiteral(const Expr& e, AttrType type, const std::string& what) {
    auto mismatch = [&]() -> std::optional<Attribute> {
      diags_.emitError(e.range, what + " must be " + std::string(attrTypeName(type)) + ", got " + quoted(printExpr(e)));
      return std::nullopt;
    };
    auto number = [&](const Expr& x, bool& ok) -> double {
      if (x.kind == Expr::Kind::Number) return x.number;
      if (x.kind == Expr::Kind::Unary && x.text == "-" && x.operands[0]->kind == Expr::Kind::Number)
        return -x.operands[0]->number;
      ok = false;
      return 0;
    };
    auto isInt = [](const Expr& x) {
      const Expr& n = x.kind == Expr::Kind::Unary ? *x.operands[0] : x;
      return n.kind == Expr::Kind::Number && n.isInteger;
    };
    bool ok = true;
    switch (type) {
      case AttrType::Int: {
        double v = number(e, ok);
        if (!ok || !isInt(e)) return mismatch();
        return static_cast<int64_t>(v);
      }
      case AttrType::Float: {
        double v = number(e, ok);
        if (!ok) return mismatch();
        return static_cast<float>(v);
      }
      case AttrType::String:
        if (e.kind != Expr::Kind::String) return mismatch();
        return e.text;
      case AttrType::Ints: case AttrType::Floats: case AttrType::Strings: {
        if (e.kind != Expr::Kind::List) return mismatch();
        std::vector<int64_t> ints;
        std::vector<float> floats;
        std::vector<std::string> strings;
        for (const Expr* x : e.operands) {
          if (type == AttrType::Strings) {
            if (x->kind != Expr::Kind::String) return mismatch();
            strings.push_back(x->text);
            continue;
          }
          double v = number(*x, ok);
          if (!ok || (type == AttrType::Ints && !isInt(*x))) return mismatch();
          ints.push_back(static_cast<int64_t>(v));
          floats.push_back(static_cast<float>(v));
        }
        if (type == AttrType::Ints) return ints;
        if (type == AttrType::Floats) return floats;
        return strings;
      }
      case AttrType::Tensor: case AttrType::Graph:
        diags_.emitError(e.range, what + " of type " + std::string(attrTypeName(type)) + " cannot have a default");
        return std::nullopt;
    }
    return std::nullopt;
  }

  void checkOp(ast::OpDecl& d) {
    OpDef def;
    def.name = Symbol(d.name.text);
    def.loc = loc(d.name.range);
    std::optional<OpKind> kind;
    for (const ast::Name& t : d.traits) {
      if (auto k = opKindFromName(t.text)) {
        if (kind) {
          diags_.emitError(t.range, "op " + quoted(d.name.text) + " has two kinds, " +
                                        quoted(std::string(opKindName(*kind))) + " and " + quoted(t.text));
        }
        kind = k;
      } else if (t.text == "commutative") {
        def.commutative = true;
      } else if (t.text == "view") {
        def.view = true;
      } else if (t.text == "nondeterministic") {
        def.nondeterministic = true;
      } else {
        diags_.emitError(t.range, "unknown op kind or trait " + quoted(t.text) +
                                      "; kinds are `elementwise`, `broadcast`, `injective`, `reduction`, "
                                      "`anchor`, `opaque`; traits are `commutative`, `view`, `nondeterministic`");
      }
    }
    const bool kindKnown = kind.has_value();
    if (!kind) {
      diags_.emitError(d.name.range, "op " + quoted(d.name.text) + " has no kind");
      kind = OpKind::Opaque;
    }
    def.kind = *kind;
    std::set<std::string> names;
    auto params = [&](const std::vector<ast::Param>& in, std::vector<OpParam>& out, const char* what) {
      for (size_t i = 0; i < in.size(); ++i) {
        const ast::Param& p = in[i];
        if (!names.insert(p.name.text).second)
          diags_.emitError(p.name.range, std::string(what) + " name " + quoted(p.name.text) + " is used twice");
        if (p.variadic && i + 1 != in.size())
          diags_.emitError(p.range, "only the last " + std::string(what) + " can be variadic");
        bool staticValue = false;
        if (p.type) {
          if (p.type->text == "static" && std::string(what) == "operand") staticValue = true;
          else diags_.emitError(p.type->range, "unknown " + std::string(what) + " annotation " + quoted(p.type->text) +
                                                   (std::string(what) == "operand" ? "; the annotation is `static`" : ""));
        }
        out.push_back(OpParam{p.name.text, p.optional, p.variadic, staticValue});
      }
    };
    params(d.params, def.params, "operand");
    params(d.results, def.results, "result");
    if (def.results.empty()) def.results.push_back(OpParam{"Y", false, false});
    if (d.resultType) {
      const std::string& t = d.resultType->text;
      if (t == "bool") def.resultType = ResultType::Bool;
      else if (t == "int64") def.resultType = ResultType::Int64;
      else if (t == "float") def.resultType = ResultType::Float;
      else if (t == "any") def.resultType = ResultType::Any;
      else if (t == "T") def.resultType = ResultType::SameAsOperands;
      else diags_.emitError(d.resultType->range, "unknown result type " + quoted(t) + "; use `T`, `bool`, `int64`, `float` or `any`");
    }
    for (const ast::AttrDecl& a : d.attrs) {
      if (!names.insert(a.name.text).second) {
        diags_.emitError(a.name.range, "attribute " + quoted(a.name.text) + " of " + quoted(d.name.text) + " is declared twice");
        continue;
      }
      auto type = attrTypeFromName(a.type.text);
      if (!type) {
        diags_.emitError(a.type.range, "unknown attribute type " + quoted(a.type.text) +
                                           "; use int, float, string, ints, floats, strings, tensor or graph");
        continue;
      }
      AttrSpec spec{a.name.text, *type, !a.optional && !a.defaultValue, std::nullopt};
      if (a.defaultValue) {
        if (a.optional) diags_.emitError(a.name.range, "attribute " + quoted(a.name.text) + " is optional and has a default; write one or the other");
        spec.defaultValue = attrLiteral(*a.defaultValue, *type, "the default of " + quoted(a.name.text));
      }
      def.attrs.push_back(std::move(spec));
    }
    const bool elementwise = def.kind == OpKind::Elementwise || def.kind == OpKind::Broadcast;
    if (d.semantics && kindKnown) {
      if (!elementwise) {
        diags_.emitError(d.semantics->range, "only elementwise and broadcast ops have scalar semantics; " +
                                                 quoted(d.name.text) + " is " + std::string(opKindName(def.kind)));
      } else {
        bool ok = true;
        ScalarExpr s = scalar(*d.semantics, d, def, ok);
        if (ok && def.resultType == ResultType::Bool && s.type != ScalarExpr::Type::Bool)
          diags_.emitError(d.semantics->range, "semantics of " + quoted(d.name.text) + " compute a number, but the op's result is `bool`");
        if (ok) def.semantics = std::move(s);
      }
    } else if (elementwise && !d.semantics) {
      diags_.emitError(d.name.range, std::string(opKindName(def.kind)) + " op " + quoted(d.name.text) + " needs scalar semantics (`= expression`)");
    }
    for (const ast::CostItem& c : d.cost) {
      if (c.name.text != "flops") {
        diags_.emitError(c.name.range, "an op's cost states `flops`, got " + quoted(c.name.text) +
                                           " (bytes follow from a kernel's operands and results)");
        continue;
      }
      if (def.flops) {
        diags_.emitError(c.name.range, "cost item `flops` is given twice");
        continue;
      }
      Scope scope = opScope(def, d.name.range);
      RuleExpr v = expr(*c.value, scope, Context::Cost);
      if (!isNumeric(v.type))
        diags_.emitError(c.value->range, "cost `flops` must be a number, got a " + std::string(exprTypeName(v.type)));
      def.flops = std::make_shared<const RuleExpr>(std::move(v));
    }
    if (!out_.catalog.addOp(std::move(def))) return;  // duplicate: reported in collect
  }


  /// Type-checks scalar semantics. Operands are untyped (float or bool,
  /// whichever the context needs); attributes must be numeric.
  ScalarExpr scalar(const Expr& e, const ast::OpDecl& d, const OpDef& def, bool& ok) {
    using K = ScalarExpr::Kind;
    using T = ScalarExpr::Type;
    ScalarExpr out;
    auto fail = [&](const SourceRange& r, const std::string& m) {
      diags_.emitError(r, m);
      ok = false;
      return out;
    };
    switch (e.kind) {
      case Expr::Kind::Number: out.kind = K::Constant; out.value = e.number; return out;
      case Expr::Kind::Bool: out.kind = K::Constant; out.type = T::Bool; out.value = e.boolValue; return out;
      case Expr::Kind::Name: {
        for (size_t i = 0; i < def.params.size(); ++i)
          if (def.params[i].name == e.text) {
            out.kind = K::Operand;
            out.index = static_cast<uint32_t>(i);
            return out;
          }
        int a = def.attrIndex(e.text);
        if (a >= 0) {
          const AttrSpec& spec = def.attrs[static_cast<size_t>(a)];
          if (spec.type != AttrType::Int && spec.type != AttrType::Float)
            return fail(e.range, "attribute " + quoted(e.text) + " is " + std::string(attrTypeName(spec.type)) +
                                     "; semantics can read int and float attributes");
          out.kind = K::Attr;
          out.index = static_cast<uint32_t>(a);
          return out;
        }
        if (e.text == "inf" || e.text == "nan") {
          out.kind = K::Constant;
          out.value = e.text == "inf" ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
          return out;
        }
        return fail(e.range, quoted(e.text) + " is not an operand or attribute of " + quoted(d.name.text));
      }
      case Expr::Kind::Unary: {
        out.kind = K::Unary;
        out.op = e.text;
        out.args.push_back(scalar(*e.operands[0], d, def, ok));
        if (e.text == "not") out.type = T::Bool;
        return out;
      }
      case Expr::Kind::Binary: {
        if (e.text == "??") {
          out.kind = K::Default;
          const Expr& lhs = *e.operands[0];
          bool optionalOperand = false;
          for (const OpParam& p : def.params) optionalOperand |= p.name == lhs.text && p.optional;
          if (lhs.kind != Expr::Kind::Name || !optionalOperand)
            return fail(lhs.range, "the left side of `??` must be an optional operand");
        }
        if (out.kind != K::Default) {
          out.kind = K::Binary;
          out.op = e.text;
        }
        out.args.push_back(scalar(*e.operands[0], d, def, ok));
        out.args.push_back(scalar(*e.operands[1], d, def, ok));
        if (const Builtin* b = findBuiltin(e.text, Builtin::Form::Infix, kInSemantics); b && b->truth) out.type = T::Bool;
        else if (e.text == "??") out.type = out.args[0].type;
        return out;
      }
      case Expr::Kind::Call: {
        const Builtin* fn = findBuiltin(e.text, Builtin::Form::Call, kInSemantics);
        if (!fn)
          return fail(e.range, "unknown function " + quoted(e.text) + " in semantics; the functions are " +
                                   builtinNames(kInSemantics));
        const size_t n = e.operands.size();
        bool variadicOperand = n == 1 && e.operands[0]->kind == Expr::Kind::Name &&
                               std::any_of(def.params.begin(), def.params.end(), [&](const OpParam& p) {
                                 return p.variadic && p.name == e.operands[0]->text;
                               });
        const bool anyNumber = fn->maxArgs == SIZE_MAX;  // two or more, or one variadic operand
        if (anyNumber ? (n < fn->minArgs && !variadicOperand) : (n < fn->minArgs || n > fn->maxArgs))
          return fail(e.range, quoted(e.text) + " takes " +
                                   (anyNumber ? std::string("a variadic operand or two or more arguments")
                                              : plural(fn->minArgs, "argument")) +
                                   ", got " + std::to_string(n));
        out.kind = K::Call;
        out.op = e.text;
        for (const Expr* a : e.operands) out.args.push_back(scalar(*a, d, def, ok));
        if (fn->truth) out.type = T::Bool;
        if (e.text == "select") out.type = out.args[1].type;
        return out;
      }
      default:
        return fail(e.range, "this expression is not allowed in scalar semantics");
    }
  }

  /// Flattens a class into ops, reporting unknown members and cycles.
  std::vector<const OpDef*> resolveClass(ast::ClassDecl& c) {
    if (auto* done = out_.catalog.findClass(c.name.text)) return *done;
    if (inProgress_.count(c.name.text)) {
      diags_.emitError(c.name.range, "class " + quoted(c.name.text) + " contains itself");
      return {};
    }
    inProgress_.insert(c.name.text);
    std::vector<const OpDef*> members;
    for (const ast::Name& m : c.members) {
      if (const OpDef* op = out_.catalog.find(m.text)) {
        members.push_back(op);
      } else if (auto it = classDecls_.find(m.text); it != classDecls_.end()) {
        for (const OpDef* op : resolveClass(*it->second)) members.push_back(op);
      } else {
        diags_.emitError(m.range, "unknown op or class " + quoted(m.text) + " in class " + quoted(c.name.text));
      }
    }
    inProgress_.erase(c.name.text);
    std::vector<const OpDef*> unique;
    for (const OpDef* op : members)
      if (std::find(unique.begin(), unique.end(), op) == unique.end()) unique.push_back(op);
    out_.catalog.addClass(c.name.text, unique);
    return unique;
  }

  // ---- rules ------------------------------------------------------------------

  struct RuleEntry {
    std::optional<Rule> rule;
    SourceRange declared;
    size_t order = 0;
    bool disabled = false;
  };

  size_t checkFileRules(ast::File& file) {
    size_t declared = 0;
    const std::string pack = file.packName ? file.packName->text : sources_.path(file.fileId);
    for (const ast::Item& item : file.items) {
      if (auto* r = std::get_if<ast::Rule*>(&item)) {
        ++declared;
        auto it = rules_.find((*r)->name.text);
        if ((*r)->isOverride) {
          if (it == rules_.end()) {
            diags_.emitError((*r)->name.range, "override of rule " + quoted((*r)->name.text) + ", which does not exist");
            continue;
          }
        } else if (it != rules_.end()) {
          diags_.emitError((*r)->name.range, "rule " + quoted((*r)->name.text) + " is declared twice")
              .attachNote(it->second.declared, "previous definition is here");
          continue;
        }
        std::optional<Rule> compiled = checkRule(**r, pack);
        RuleEntry& entry = rules_[(*r)->name.text];
        if (!(*r)->isOverride) entry.order = nextOrder_++;
        entry.declared = (*r)->name.range;
        entry.rule = std::move(compiled);
      } else if (auto* d = std::get_if<ast::Disable*>(&item)) {
        auto it = rules_.find((*d)->rule.text);
        if (it == rules_.end()) {
          diags_.emitError((*d)->rule.range, "disable of rule " + quoted((*d)->rule.text) + ", which does not exist");
          continue;
        }
        it->second.disabled = true;
      }
    }
    return declared;
  }

  /// Per-rule state while checking.
  struct Scope {
    Pattern pattern;
    std::vector<int> uses;           ///< references per binding outside its defining spot
    std::vector<SourceRange> where;  ///< where each binding was first written
    std::vector<std::string> rewriteNames;
    bool inRewrite = false;
  };

  /// An op's operands, results and attributes as bindings (in that order, as
  /// OpDef::flops reads them), for its cost expression.
  Scope opScope(const OpDef& def, SourceRange at) {
    Scope s;
    auto add = [&](const std::string& name, Binding::Kind kind, bool optional) {
      Binding b;
      b.name = name;
      b.kind = kind;
      b.optional = optional;
      s.pattern.bindings.push_back(b);
      s.uses.push_back(0);
      s.where.push_back(at);
    };
    for (const OpParam& p : def.params) add(p.name, Binding::Kind::Value, p.optional);
    for (const OpParam& r : def.results) add(r.name, Binding::Kind::Value, r.optional);
    for (const AttrSpec& a : def.attrs) add(a.name, Binding::Kind::Attr, !a.required && !a.defaultValue);
    return s;
  }

  std::optional<Rule> checkRule(const ast::Rule& r, const std::string& pack) {
    const size_t errorsBefore = diags_.errorCount();
    Rule rule;
    rule.name = r.name.text;
    rule.pack = pack;
    rule.loc = loc(r.name.range);
    rule.kind = r.isFusion ? Rule::Kind::Fusion : Rule::Kind::Rewrite;
    if (r.priority) rule.priority = *r.priority;
    Scope scope;
    if (!r.hasPattern) {
      diags_.emitError(r.name.range, "rule " + quoted(r.name.text) + " has no `match` or `fuse` clause");
    } else {
      if (r.pattern.empty()) diags_.emitError(r.patternRange, "the pattern of rule " + quoted(r.name.text) + " is empty");
      compilePattern(r, scope);
    }
    if (r.isFusion) {
      if (r.hasRewrite) diags_.emitError(r.rewriteRange, "a `fuse` rule forms a kernel and cannot `rewrite`; use `match` to rewrite");
      if (!r.kernel) {
        diags_.emitError(r.name.range, "fusion rule " + quoted(r.name.text) + " needs a `kernel` clause");
      } else {
        if (families_ && !families_->find(r.kernel->text)) {
          std::string known;
          for (const std::string& f : families_->names()) known += (known.empty() ? "" : ", ") + f;
          diags_.emitError(r.kernel->range, "unknown kernel family " + quoted(r.kernel->text) + "; the families are " + known);
        }
        rule.kernel = r.kernel->text;
      }
    } else if (r.hasPattern) {
      if (r.kernel) diags_.emitError(r.kernel->range, "a `match` rule rewrites and has no kernel; use `fuse` to form a kernel");
      if (!r.hasRewrite) diags_.emitError(r.name.range, "rewrite rule " + quoted(r.name.text) + " needs a `rewrite` clause");
    }
    if (r.guard) {
      rule.guard = expr(*r.guard, scope, Context::Guard);
      if (rule.guard->type != ExprType::Bool && rule.guard->type != ExprType::Unknown)
        diags_.emitError(r.guard->range, "a `where` guard must be a condition, got a " + std::string(exprTypeName(rule.guard->type)));
    }
    if (r.hasRewrite && !r.isFusion) compileRewrite(r, scope, rule);
    for (const ast::CostItem& c : r.cost) {
      std::optional<RuleExpr>* slot = c.name.text == "flops" ? &rule.flops : c.name.text == "bytes" ? &rule.bytes : nullptr;
      if (!slot) {
        diags_.emitError(c.name.range, "unknown cost item " + quoted(c.name.text) + "; expected `flops` or `bytes`");
        continue;
      }
      if (*slot) {
        diags_.emitError(c.name.range, "cost item " + quoted(c.name.text) + " is given twice");
        continue;
      }
      RuleExpr v = expr(*c.value, scope, Context::Cost);
      if (!isNumeric(v.type)) diags_.emitError(c.value->range, "cost " + quoted(c.name.text) + " must be a number, got a " + std::string(exprTypeName(v.type)));
      *slot = std::move(v);
    }
    for (const ast::CostItem& t : r.tolerance) {
      std::optional<double>* slot = t.name.text == "atol" ? &rule.atol : t.name.text == "rtol" ? &rule.rtol : nullptr;
      if (!slot) {
        diags_.emitError(t.name.range, "unknown tolerance item " + quoted(t.name.text) + "; expected `atol` or `rtol`");
        continue;
      }
      if (*slot) {
        diags_.emitError(t.name.range, "tolerance item " + quoted(t.name.text) + " is given twice");
        continue;
      }
      const ast::Expr& v = *t.value;
      if (v.kind != ast::Expr::Kind::Number || !(v.number >= 0 && v.number < 1)) {
        diags_.emitError(v.range, "tolerance " + quoted(t.name.text) + " must be a number from 0 up to 1, got " + quoted(printExpr(v)));
        continue;
      }
      *slot = v.number;
      // Wider than verify's default: the rule may change results by that
      // much, and verify will not say so. Said once, with the factor.
      const Tolerance def = r.isFusion ? Tolerance::verifyFusion() : Tolerance::verifyRewrite();
      const double usual = t.name.text == "atol" ? def.atol : def.rtol;
      if (v.number > 10 * usual)
        diags_.emitWarning(v.range, "tolerance " + quoted(t.name.text) + " " + printExpr(v) + " is " +
                                        fmt::format("{:g}", v.number / usual) + "x verify's default for " +
                                        (r.isFusion ? "fusion" : "rewrite") + " rules (" + fmt::format("{:g}", usual) +
                                        "): verify accepts results this far off; keep it only for a rule that approximates on purpose");
    }
    // Names bound and never used: a likely typo (rewrite rules; in fusion
    // rules the names document the group's inputs).
    if (!r.isFusion)
      for (size_t b = 0; b < scope.pattern.bindings.size(); ++b) {
        const Binding& bind = scope.pattern.bindings[b];
        if (scope.uses[b] > 0 || bind.producer >= 0) continue;
        diags_.emitWarning(scope.where[b], quoted(bind.name) + " is bound but never used; write `_` to match anything");
      }
    rule.pattern = std::move(scope.pattern);
    if (diags_.errorCount() != errorsBefore) return std::nullopt;
    return rule;
  }

  int bind(Scope& s, const ast::Name& name, Binding::Kind kind) {
    int existing = s.pattern.findBinding(name.text);
    if (existing >= 0) return existing;
    s.pattern.bindings.push_back(Binding{name.text, kind, -1, 0, false});
    s.uses.push_back(0);
    s.where.push_back(name.range);
    return static_cast<int>(s.pattern.bindings.size() - 1);
  }

  void compilePattern(const ast::Rule& r, Scope& s) {
    // Result names first, so operands may refer to statements written later.
    std::map<std::string, SourceRange> defined;
    for (const ast::PatternStmt* stmt : r.pattern)
      for (const ast::Name& n : stmt->names) {
        auto [it, fresh] = defined.emplace(n.text, n.range);
        if (!fresh) {
          diags_.emitError(n.range, "name " + quoted(n.text) + " is bound more than once")
              .attachNote(it->second, "first bound here");
          continue;
        }
        bind(s, n, Binding::Kind::Value);
      }
    for (const ast::PatternStmt* stmt : r.pattern) {
      int node = compileCall(*stmt->call, s);
      if (node < 0) continue;
      PatternNode& pn = s.pattern.nodes[static_cast<size_t>(node)];
      size_t maxResults = SIZE_MAX;
      for (const OpDef* op : pn.ops)
        if (!op->results.back().variadic) maxResults = std::min(maxResults, op->results.size());
      if (pn.ops.size() > 0 && stmt->names.size() > maxResults && maxResults != SIZE_MAX)
        diags_.emitError(stmt->names[maxResults].range, quoted(stmt->call->op.alternatives[0].text) + " has " +
                                                            plural(maxResults, "result") + ", not " + std::to_string(stmt->names.size()));
      for (size_t i = 0; i < stmt->names.size(); ++i) {
        int b = s.pattern.findBinding(stmt->names[i].text);
        if (b < 0 || s.pattern.bindings[static_cast<size_t>(b)].producer >= 0) continue;
        s.pattern.bindings[static_cast<size_t>(b)].producer = node;
        s.pattern.bindings[static_cast<size_t>(b)].result = static_cast<int>(i);
        pn.results.push_back(b);
      }
    }
    // Roots: nodes none of whose results another pattern node reads.
    std::vector<bool> consumed(s.pattern.nodes.size(), false);
    for (const PatternNode& pn : s.pattern.nodes)
      for (const PatternOperand& o : pn.operands) {
        if (o.kind == PatternOperand::Kind::Node && o.index >= 0) consumed[static_cast<size_t>(o.index)] = true;
        if (o.kind != PatternOperand::Kind::Binding) continue;
        const int producer = s.pattern.bindings[static_cast<size_t>(o.index)].producer;
        if (producer >= 0) consumed[static_cast<size_t>(producer)] = true;
      }
    for (size_t n = 0; n < s.pattern.nodes.size(); ++n)
      if (!consumed[n]) s.pattern.roots.push_back(static_cast<int>(n));
  }

  /// Compiles one call (and nested calls); returns its node index or -1.
  int compileCall(const ast::PatternCall& call, Scope& s) {
    PatternNode node;
    node.loc = loc(call.range);
    node.repeat = call.op.repeat == '+' ? PatternNode::Repeat::OneOrMore
                  : call.op.repeat == '*' ? PatternNode::Repeat::ZeroOrMore
                                          : PatternNode::Repeat::Once;
    bool resolved = true;
    for (const ast::Name& alt : call.op.alternatives) {
      if (const OpDef* op = out_.catalog.find(alt.text)) {
        node.ops.push_back(op);
      } else if (auto* cls = out_.catalog.findClass(alt.text)) {
        node.ops.insert(node.ops.end(), cls->begin(), cls->end());
      } else {
        diags_.emitError(alt.range, "unknown op or class " + quoted(alt.text));
        resolved = false;
      }
    }
    if (node.repeat != PatternNode::Repeat::Once && resolved && !node.ops.empty()) {
      // A repetition chains a result into the next op's operand: at least one
      // alternative must read a value and produce one of the same type.
      auto chains = [](const OpDef* op) {
        return !op->params.empty() && op->resultType == ResultType::SameAsOperands && op->results.size() == 1;
      };
      if (std::none_of(node.ops.begin(), node.ops.end(), chains)) {
        const std::string what = call.op.alternatives.size() == 1 ? call.op.alternatives[0].text : std::string("the alternatives");
        diags_.emitError(call.op.range, "the repetition " + quoted(what + call.op.repeat) + " cannot be matched: " +
                                            "no op in it reads a value and produces one of the same type, so none can chain");
        resolved = false;
      }
    }
    // Arity against every alternative (a `...` accepts any further operands).
    const bool rest = !call.args.empty() && call.args.back().kind == ast::PatternArg::Kind::Rest;
    const size_t given = call.args.size() - (rest ? 1 : 0);
    if (resolved && node.repeat == PatternNode::Repeat::Once) {
      for (const OpDef* op : node.ops) {
        const size_t lo = op->minOperands(), hi = op->maxOperands();
        if (given > hi || (!rest && given < lo)) {
          std::string range = hi == SIZE_MAX ? "at least " + std::to_string(lo)
                              : lo == hi      ? std::to_string(lo)
                                              : std::to_string(lo) + " to " + std::to_string(hi);
          diags_.emitError(call.range, quoted(op->name.str()) + " takes " + range + " operand" + (hi == 1 && lo == 1 ? "" : "s") +
                                           ", got " + std::to_string(given));
          break;
        }
      }
    }
    for (size_t i = 0; i < call.args.size(); ++i) {
      const ast::PatternArg& a = call.args[i];
      PatternOperand operand{PatternOperand::Kind::Wildcard};
      switch (a.kind) {
        case ast::PatternArg::Kind::Call: {
          operand = PatternOperand{PatternOperand::Kind::Node, compileCall(*a.call, s)};
          break;
        }
        case ast::PatternArg::Kind::Name: {
          int b = bind(s, a.name, Binding::Kind::Value);
          if (s.pattern.bindings[static_cast<size_t>(b)].kind != Binding::Kind::Value)
            diags_.emitError(a.name.range, quoted(a.name.text) + " names an attribute value, not a tensor");
          operand = PatternOperand{PatternOperand::Kind::Binding, b, a.optional};
          if (a.optional) {
            s.pattern.bindings[static_cast<size_t>(b)].optional = true;
            for (const OpDef* op : node.ops)
              if (i >= op->params.size() ? !(op->params.empty() || op->params.back().variadic) : !op->params[i].optional) {
                diags_.emitError(a.range, "operand " + std::to_string(i + 1) + " of " + quoted(op->name.str()) + " is not optional");
                break;
              }
          }
          // A name written where another node's result is expected counts as a use.
          if (a.name.range.line != s.where[static_cast<size_t>(b)].line || a.name.range.col != s.where[static_cast<size_t>(b)].col)
            ++s.uses[static_cast<size_t>(b)];
          break;
        }
        case ast::PatternArg::Kind::Wildcard: break;
        case ast::PatternArg::Kind::Rest:
          if (i + 1 != call.args.size()) diags_.emitError(a.range, "`...` must be the last operand");
          operand = PatternOperand{PatternOperand::Kind::Rest};
          break;
      }
      node.operands.push_back(operand);
    }
    for (const ast::AttrMatch& m : call.attrs) {
      AttrConstraint c;
      c.name = m.name.text;
      // The attribute must exist on every alternative.
      const AttrSpec* spec = nullptr;
      for (const OpDef* op : node.ops) {
        spec = op->findAttr(m.name.text);
        if (!spec) {
          diags_.emitError(m.name.range, quoted(op->name.str()) + " has no attribute " + quoted(m.name.text));
          break;
        }
      }
      if (m.value->kind == Expr::Kind::Name) {
        int b = s.pattern.findBinding(m.value->text);
        if (b >= 0 && s.pattern.bindings[static_cast<size_t>(b)].kind == Binding::Kind::Value) {
          diags_.emitError(m.value->range, quoted(m.value->text) + " is a tensor; an attribute pattern binds or compares attribute values");
          continue;
        }
        c.binding = bind(s, ast::Name{m.value->text, m.value->range}, Binding::Kind::Attr);
        if (b >= 0) ++s.uses[static_cast<size_t>(b)];  // same attribute value in two places
      } else if (spec) {
        if (attrLiteral(*m.value, spec->type, "attribute " + quoted(m.name.text)))
          c.equals = expr(*m.value, s, Context::Guard);
      }
      node.attrs.push_back(std::move(c));
    }
    s.pattern.nodes.push_back(std::move(node));
    return static_cast<int>(s.pattern.nodes.size() - 1);
  }

  void compileRewrite(const ast::Rule& r, Scope& s, Rule& rule) {
    s.inRewrite = true;
    bool replacesSomething = false;
    for (const ast::RewriteStmt* stmt : r.rewrite) {
      RewriteStep step;
      step.loc = loc(stmt->range);
      step.value = expr(*stmt->value, s, Context::Rewrite);
      if (step.value.type != ExprType::Tensor && step.value.type != ExprType::Unknown &&
          !isNumeric(step.value.type))
        diags_.emitError(stmt->value->range, "a rewrite computes a tensor, got a " + std::string(exprTypeName(step.value.type)));
      for (const ast::AttrAssign& a : stmt->attrs) {
        if (a.copyAll) {
          int b = s.pattern.findBinding(a.name.text);
          int producer = b < 0 ? -1 : s.pattern.bindings[static_cast<size_t>(b)].producer;
          if (producer < 0)
            diags_.emitError(a.name.range, "`attrs(" + a.name.text + ")` needs the name of a matched node's result");
          else
            step.copyAttrsFrom.push_back(producer);
          if (b >= 0) ++s.uses[static_cast<size_t>(b)];
          continue;
        }
        if (step.value.kind == RuleExpr::Kind::OpCall && step.value.op && !step.value.op->findAttr(a.name.text))
          diags_.emitError(a.name.range, quoted(step.value.op->name.str()) + " has no attribute " + quoted(a.name.text));
        step.attrs.emplace_back(a.name.text, expr(*a.value, s, Context::Guard));
      }
      if (!stmt->attrs.empty() && step.value.kind != RuleExpr::Kind::OpCall)
        diags_.emitError(stmt->attrs.front().range, "attributes can only be given to a call of an op");
      for (const ast::Name& n : stmt->names) {
        const bool already = std::find(s.rewriteNames.begin(), s.rewriteNames.end(), n.text) != s.rewriteNames.end();
        if (already) {
          diags_.emitError(n.range, "name " + quoted(n.text) + " is defined twice in the rewrite");
          continue;
        }
        int b = s.pattern.findBinding(n.text);
        Rule::RewriteValue value{n.text, -1};
        if (b >= 0) {
          const Binding& bound = s.pattern.bindings[static_cast<size_t>(b)];
          if (bound.producer < 0) {
            diags_.emitError(n.range, "the rewrite cannot redefine " + quoted(n.text) + ", an input of the pattern");
            continue;
          }
          value.replaces = b;
          replacesSomething = true;
          checkReplacementType(n, bound, step.value, s.pattern);
        }
        s.rewriteNames.push_back(n.text);
        step.results.push_back(static_cast<int>(rule.rewriteValues.size()));
        rule.rewriteValues.push_back(value);
      }
      rule.rewrite.push_back(std::move(step));
    }
    if (!replacesSomething && !r.rewrite.empty())
      diags_.emitError(r.rewriteRange, "the rewrite replaces no value of the pattern; name a result it replaces (such as " +
                                           quoted(s.pattern.bindings.empty() ? std::string("y") : lastResultName(s.pattern)) + ")");
    s.inRewrite = false;
  }

  static std::string lastResultName(const Pattern& p) {
    for (size_t i = p.bindings.size(); i-- > 0;)
      if (p.bindings[i].producer >= 0) return p.bindings[i].name;
    return "y";
  }

  /// Element type class of a tensor expression: what it produces relative to
  /// the matched operands.
  static ResultType elementClass(const RuleExpr& e, const Pattern& p) {
    switch (e.kind) {
      case RuleExpr::Kind::OpCall: return e.op ? e.op->resultType : ResultType::Any;
      case RuleExpr::Kind::Binary: {
        const Builtin* b = findBuiltin(e.text, Builtin::Form::Infix, kInRewrite);
        return b && b->truth ? ResultType::Bool : ResultType::SameAsOperands;
      }
      case RuleExpr::Kind::Binding: {
        const Binding& b = p.bindings[static_cast<size_t>(e.binding)];
        if (b.producer < 0) return ResultType::Any;
        const PatternNode& n = p.nodes[static_cast<size_t>(b.producer)];
        return n.ops.size() == 1 ? n.ops[0]->resultType : ResultType::Any;
      }
      default: return ResultType::Any;
    }
  }

  void checkReplacementType(const ast::Name& n, const Binding& bound, const RuleExpr& value, const Pattern& p) {
    const PatternNode& producer = p.nodes[static_cast<size_t>(bound.producer)];
    if (producer.ops.size() != 1) return;
    ResultType was = producer.ops[0]->resultType, now = elementClass(value, p);
    auto known = [](ResultType t) { return t != ResultType::Any; };
    // `T` is bool where the matched op takes bool data (ONNX's schema of
    // `Not`, `Identity`, `Where`), so a bool replacement may fit it.
    auto takesBool = [](const OpDef* op) {
      for (size_t i = 0; op && i < std::min<size_t>(op->params.size(), 3); ++i) {
        const std::vector<DType> takes = schemaOperandTypes(op->name.str(), i);
        if (std::find(takes.begin(), takes.end(), DType::Bool) != takes.end()) return true;
      }
      return false;
    };
    auto canBeBool = [&](ResultType t, const OpDef* op) {
      return t == ResultType::Bool || (t == ResultType::SameAsOperands && takesBool(op));
    };
    const bool bothBool = canBeBool(was, producer.ops[0]) &&
                          canBeBool(now, value.kind == RuleExpr::Kind::OpCall ? value.op : nullptr);
    auto compatible = [&](ResultType a, ResultType b) {
      auto numeric = [](ResultType t) { return t == ResultType::SameAsOperands || t == ResultType::Float; };
      return a == b || (numeric(a) && numeric(b)) || bothBool ||
             ((a == ResultType::Int64 && b == ResultType::SameAsOperands) || (b == ResultType::Int64 && a == ResultType::SameAsOperands));
    };
    if (known(was) && known(now) && !compatible(was, now))
      diags_.emitError(value.loc.line ? n.range : n.range,
                       "the rewrite gives " + quoted(n.text) + " element type `" + std::string(resultTypeName(now)) +
                           "`, but the matched " + quoted(n.text) + " (from " + quoted(producer.ops[0]->name.str()) +
                           ") has `" + std::string(resultTypeName(was)) + "`");
  }

  // ---- expressions --------------------------------------------------------------

  enum class Context { Guard, Rewrite, Cost };

  RuleExpr expr(const Expr& e, Scope& s, Context ctx) {
    RuleExpr out;
    out.loc = loc(e.range);
    auto fail = [&](const std::string& m) {
      diags_.emitError(e.range, m);
      out.type = ExprType::Unknown;
      return out;
    };
    switch (e.kind) {
      case Expr::Kind::Number:
        out.kind = RuleExpr::Kind::Number;
        out.number = e.number;
        out.type = e.isInteger ? ExprType::Int : ExprType::Float;
        return out;
      case Expr::Kind::String:
        out.kind = RuleExpr::Kind::String;
        out.text = e.text;
        out.type = ExprType::String;
        return out;
      case Expr::Kind::Bool:
        out.kind = RuleExpr::Kind::Bool;
        out.number = e.boolValue;
        out.type = ExprType::Bool;
        return out;
      case Expr::Kind::List: {
        out.kind = RuleExpr::Kind::List;
        out.type = ExprType::IntList;
        for (const Expr* x : e.operands) {
          RuleExpr item = expr(*x, s, ctx);
          if (!isNumeric(item.type)) diags_.emitError(x->range, "list items must be numbers");
          out.args.push_back(std::move(item));
        }
        return out;
      }
      case Expr::Kind::Name: return name(e, s, ctx);
      case Expr::Kind::Member: return member(e, s, ctx);
      case Expr::Kind::Index: {
        out.kind = RuleExpr::Kind::Index;
        out.args.push_back(expr(*e.operands[0], s, ctx));
        out.args.push_back(expr(*e.operands[1], s, ctx));
        if (out.args[0].type != ExprType::IntList && out.args[0].type != ExprType::Unknown)
          return fail("only lists can be indexed, such as `shape(x)[1]`");
        if (!isNumeric(out.args[1].type)) return fail("an index must be a number");
        out.type = ExprType::Int;
        return out;
      }
      case Expr::Kind::Unary: {
        out.kind = RuleExpr::Kind::Unary;
        out.text = e.text;
        out.args.push_back(expr(*e.operands[0], s, ctx));
        const ExprType t = out.args[0].type;
        if (e.text == "not") {
          const bool tensor = t == ExprType::Tensor && ctx == Context::Rewrite;
          if (t != ExprType::Bool && t != ExprType::Unknown && !tensor)
            return fail("`not` needs a condition, got a " + std::string(exprTypeName(t)));
          out.type = tensor ? ExprType::Tensor : ExprType::Bool;
        } else {
          if (!isNumeric(t) && t != ExprType::Tensor) return fail("`-` needs a number, got a " + std::string(exprTypeName(t)));
          out.type = t;
        }
        return out;
      }
      case Expr::Kind::Binary: return binary(e, s, ctx);
      case Expr::Kind::Call: return call(e, s, ctx);
    }
    return out;
  }

  RuleExpr name(const Expr& e, Scope& s, Context ctx) {
    RuleExpr out;
    out.loc = loc(e.range);
    if (e.text == "<error>") return out;  // after a syntax error
    if (s.inRewrite) {
      for (size_t i = 0; i < s.rewriteNames.size(); ++i)
        if (s.rewriteNames[i] == e.text) {
          out.kind = RuleExpr::Kind::Binding;
          out.binding = -static_cast<int>(i) - 2;  // rewrite value i (see Rule::rewriteValues)
          out.text = e.text;
          out.type = ExprType::Tensor;
          return out;
        }
    }
    int b = s.pattern.findBinding(e.text);
    if (b >= 0) {
      ++s.uses[static_cast<size_t>(b)];
      out.kind = RuleExpr::Kind::Binding;
      out.binding = b;
      out.text = e.text;
      out.type = s.pattern.bindings[static_cast<size_t>(b)].kind == Binding::Kind::Attr ? ExprType::Unknown : ExprType::Tensor;
      return out;
    }
    if (dtypeFromName(e.text) && ctx == Context::Guard) {
      out.kind = RuleExpr::Kind::DTypeName;
      out.text = e.text;
      out.type = ExprType::DType;
      return out;
    }
    if (ctx == Context::Cost)
      diags_.emitError(e.range, "cost expression refers to " + quoted(e.text) + ", which the pattern does not bind, so its shape is unknown");
    else if (ctx == Context::Rewrite)
      diags_.emitError(e.range, "name " + quoted(e.text) + " is used in the rewrite but the pattern does not bind it");
    else
      diags_.emitError(e.range, "name " + quoted(e.text) + " is not bound by the pattern");
    return out;
  }

  RuleExpr member(const Expr& e, Scope& s, Context ctx) {
    RuleExpr out;
    out.loc = loc(e.range);
    const Expr& object = *e.operands[0];
    if (object.kind == Expr::Kind::Name && object.text == "target") {
      if (e.isMethodCall) {
        if (e.text != "has" || e.operands.size() != 2 || e.operands[1]->kind != Expr::Kind::String) {
          diags_.emitError(e.range, "the target's only method is `has(\"feature\")`");
          return out;
        }
        out.kind = RuleExpr::Kind::TargetHas;
        out.args.push_back(expr(*e.operands[1], s, ctx));
        out.type = ExprType::Bool;
        return out;
      }
      const auto& props = targetProperties();
      if (std::find(props.begin(), props.end(), e.text) == props.end()) {
        std::string known;
        for (const std::string& p : props) known += (known.empty() ? "" : ", ") + p;
        diags_.emitError(e.range, "unknown target property " + quoted(e.text) + "; the properties are " + known);
        return out;
      }
      out.kind = RuleExpr::Kind::Target;
      out.text = e.text;
      out.type = ExprType::Float;
      return out;
    }
    if (e.isMethodCall) {
      diags_.emitError(e.range, "only the target has methods");
      return out;
    }
    // `c.epsilon`: an attribute of the node that produces `c`.
    int b = object.kind == Expr::Kind::Name ? s.pattern.findBinding(object.text) : -1;
    if (b < 0 || s.pattern.bindings[static_cast<size_t>(b)].producer < 0) {
      diags_.emitError(object.range, "attributes are read from the result of a matched node, such as `c.group`");
      return out;
    }
    ++s.uses[static_cast<size_t>(b)];
    const PatternNode& node = s.pattern.nodes[static_cast<size_t>(s.pattern.bindings[static_cast<size_t>(b)].producer)];
    out.kind = RuleExpr::Kind::NodeAttr;
    out.binding = b;
    out.text = e.text;
    for (const OpDef* op : node.ops) {
      const AttrSpec* spec = op->findAttr(e.text);
      if (!spec) {
        diags_.emitError(e.range, quoted(op->name.str()) + " has no attribute " + quoted(e.text));
        return out;
      }
      switch (spec->type) {
        case AttrType::Int: out.type = ExprType::Int; break;
        case AttrType::Float: out.type = ExprType::Float; break;
        case AttrType::String: out.type = ExprType::String; break;
        case AttrType::Ints: out.type = ExprType::IntList; break;
        default: out.type = ExprType::Unknown; break;
      }
    }
    (void)ctx;
    return out;
  }

  RuleExpr binary(const Expr& e, Scope& s, Context ctx) {
    RuleExpr out;
    out.loc = loc(e.range);
    out.kind = RuleExpr::Kind::Binary;
    out.text = e.text;
    out.args.push_back(expr(*e.operands[0], s, ctx));
    out.args.push_back(expr(*e.operands[1], s, ctx));
    const ExprType a = out.args[0].type, b = out.args[1].type;
    const std::string& op = e.text;
    auto fail = [&](const std::string& m) {
      diags_.emitError(e.range, m);
      return out;
    };
    const bool tensor = a == ExprType::Tensor || b == ExprType::Tensor;
    if (op == "and" || op == "or") {
      auto condition = [&](ExprType t) {
        return t == ExprType::Bool || t == ExprType::Unknown || (t == ExprType::Tensor && ctx == Context::Rewrite);
      };
      if (!condition(a) || !condition(b)) return fail(quoted(op) + " needs two conditions");
      out.type = tensor && ctx == Context::Rewrite ? ExprType::Tensor : ExprType::Bool;
    } else if (op == "??") {
      if (ctx != Context::Rewrite) return fail("`??` gives a default for an optional operand in a rewrite");
      const RuleExpr& lhs = out.args[0];
      if (lhs.kind != RuleExpr::Kind::Binding || lhs.binding < 0 || !s.pattern.bindings[static_cast<size_t>(lhs.binding)].optional)
        return fail("the left side of `??` must be an optional operand of the pattern (written `b?`)");
      out.type = ExprType::Tensor;
    } else if (op == "==" || op == "!=" || op == "<" || op == "<=" || op == ">" || op == ">=") {
      const bool comparable = a == b || a == ExprType::Unknown || b == ExprType::Unknown || (isNumeric(a) && isNumeric(b)) ||
                              (tensor && ctx == Context::Rewrite);
      if (!comparable)
        return fail("cannot compare a " + std::string(exprTypeName(a)) + " with a " + std::string(exprTypeName(b)));
      out.type = tensor && ctx == Context::Rewrite ? ExprType::Tensor : ExprType::Bool;
    } else {
      if (tensor) {
        if (ctx != Context::Rewrite) return fail("tensors can only be computed in a rewrite; use `shape`, `numel` or `rank` here");
        if (!(a == ExprType::Tensor || isNumeric(a)) || !(b == ExprType::Tensor || isNumeric(b)))
          return fail(quoted(op) + " needs numbers or tensors");
        out.type = ExprType::Tensor;
      } else {
        if (!isNumeric(a) || !isNumeric(b))
          return fail(quoted(op) + " needs numbers, got a " + std::string(exprTypeName(isNumeric(a) ? b : a)));
        out.type = a == ExprType::Int && b == ExprType::Int && op != "/" ? ExprType::Int
                   : a == ExprType::Unknown || b == ExprType::Unknown ? ExprType::Unknown : ExprType::Float;
      }
    }
    return out;
  }

  RuleExpr call(const Expr& e, Scope& s, Context ctx) {
    RuleExpr out;
    out.loc = loc(e.range);
    out.text = e.text;
    for (const Expr* a : e.operands) out.args.push_back(expr(*a, s, ctx));
    const size_t n = e.operands.size();
    auto arity = [&](size_t lo, size_t hi) {
      if (n >= lo && n <= hi) return true;
      std::string want = lo == hi ? plural(lo, "argument") : hi == SIZE_MAX ? "at least " + plural(lo, "argument")
                                                                               : std::to_string(lo) + " to " + plural(hi, "argument");
      diags_.emitError(e.range, quoted(e.text) + " takes " + want + ", got " + std::to_string(n));
      return false;
    };
    if (ctx == Context::Rewrite) {
      if (const OpDef* op = out_.catalog.find(e.text)) {
        out.kind = RuleExpr::Kind::OpCall;
        out.op = op;
        out.type = ExprType::Tensor;
        arity(op->minOperands(), op->maxOperands());
        return out;
      }
      if (const Builtin* b = findBuiltin(e.text, Builtin::Form::Call, kInRewrite)) {
        out.kind = RuleExpr::Kind::Builtin;
        out.type = ExprType::Tensor;
        arity(callArity(*b).first, callArity(*b).second);
        return out;
      }
      if (out_.catalog.findClass(e.text)) {
        diags_.emitError(e.range, quoted(e.text) + " is a class; a rewrite creates a specific op");
        return out;
      }
      diags_.emitError(e.range, "unknown op or function " + quoted(e.text) + " in a rewrite");
      return out;
    }
    const Builtin* spec = findBuiltin(e.text, Builtin::Form::Call, kInGuard);
    if (!spec) {
      if (out_.catalog.find(e.text))
        diags_.emitError(e.range, "ops are created only in a rewrite; " + quoted(e.text) + " cannot be called here");
      else
        diags_.emitError(e.range, "unknown function " + quoted(e.text));
      return out;
    }
    out.kind = RuleExpr::Kind::Builtin;
    out.type = spec->guardType;
    if (!arity(callArity(*spec).first, callArity(*spec).second)) return out;
    for (size_t i = 0; i < n; ++i) {
      const ExprType t = out.args[i].type;
      const bool numberToo = e.text == "value" && isNumeric(t);  // value(eps) of an attribute binding
      if (spec->queriesValues && t != ExprType::Tensor && t != ExprType::Unknown && !numberToo)
        diags_.emitError(e.operands[i]->range, quoted(e.text) + " takes a value bound by the pattern");
      if (!spec->queriesValues && e.text != "len" && !isNumeric(t) && t != ExprType::Bool)
        diags_.emitError(e.operands[i]->range, quoted(e.text) + " takes numbers");
    }
    if ((e.text == "min" || e.text == "max" || e.text == "abs") &&
        std::all_of(out.args.begin(), out.args.end(), [](const RuleExpr& a) { return a.type == ExprType::Int; }))
      out.type = ExprType::Int;
    return out;
  }

  const SourceManager& sources_;
  DiagnosticEngine& diags_;
  const KernelFamilies* families_;
  RuleSet& out_;
  std::map<std::string, ast::OpDecl*> opDecls_;
  std::vector<ast::OpDecl*> opOrder_;
  std::map<std::string, ast::ClassDecl*> classDecls_;
  std::vector<ast::ClassDecl*> classOrder_;
  std::set<std::string> inProgress_;
  std::map<std::string, RuleEntry> rules_;
  size_t nextOrder_ = 0;
  std::vector<std::pair<size_t, Rule>> finalRules_;
};

}  // namespace

size_t checkPacks(const std::vector<ast::File*>& files, const SourceManager& sources, DiagnosticEngine& diags,
                  const KernelFamilies* families, RuleSet& out) {
  return Checker(sources, diags, families, out).run(files);
}

}  // namespace fusec::grammar
