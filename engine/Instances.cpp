/// Instance generation for rules; see Instances.h.
///
/// A pattern is built node by node, operands first. For each op, the
/// operands the pattern already knows (values built before, names bound
/// earlier) fix the shapes; the others ("leaves") are drawn as the op
/// needs them: the op's own rules where it has some (Conv, BatchNorm,
/// MatMul, Gemm, the normalizations, index operands), broadcast partners of
/// the known operands otherwise. Attributes are drawn for every attribute
/// the op declares, pinned by the pattern or not.
#include "fusec/engine/Instances.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

#include "fusec/engine/TypeInference.h"

namespace fusec {

int64_t Instance::size() const {
  int64_t n = static_cast<int64_t>(graph.numNodes());
  for (ValueId v : graph.inputs()) n += shapeNumel(graph.value(v).type.staticShape());  // drawn or pending alike
  for (ValueId v : graph.constants()) n += graph.value(v).constant->numel();
  return n;
}

void Instance::drawData() {
  for (PendingData& p : pending) {
    if (p.constant) *p.constant = p.draw();
    else inputs.at(p.input) = p.draw();
  }
  pending.clear();
}

namespace {

using Rng = std::mt19937_64;

/// The generator of one leaf's data: xoshiro256** seeded through splitmix64
/// (Blackman and Vigna). A leaf's numbers depend on its seed alone, so they
/// can be drawn late and are the same whenever they are; a number costs a
/// few nanoseconds (a guard on wide maps draws tensors of millions).
class LeafRng {
 public:
  using result_type = uint64_t;
  explicit LeafRng(uint64_t seed) {
    for (uint64_t& w : s_) {
      uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      w = z ^ (z >> 31);
    }
  }
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }
  result_type operator()() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>((*this)() >> 11) * 0x1.0p-53; }
  /// Standard normal (Marsaglia's polar method; the second of each pair kept).
  double normal() {
    if (spare_) {
      const double x = *spare_;
      spare_.reset();
      return x;
    }
    double u, v, q;
    do {
      u = uniform(-1, 1);
      v = uniform(-1, 1);
      q = u * u + v * v;
    } while (q >= 1 || q == 0);
    const double f = std::sqrt(-2 * std::log(q) / q);
    spare_ = v * f;
    return u * f;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
  std::optional<double> spare_;
};

/// A draw the ops or the pattern cannot use.
struct Discard {
  std::string why;
};

template <class G>
bool chance(G& rng, double p) {
  return std::uniform_real_distribution<double>(0, 1)(rng) < p;
}
template <class G>
int64_t between(G& rng, int64_t lo, int64_t hi) {
  return hi <= lo ? lo : std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
template <class G, class T>
const T& oneOf(G& rng, const std::vector<T>& v) {
  return v[static_cast<size_t>(between(rng, 0, static_cast<int64_t>(v.size()) - 1))];
}

/// What a leaf operand's data should look like.
enum class DataKind { Any, Positive, Bool };

/// What most leaves of one instance hold: anything, IEEE's special values
/// (NaN, ±inf, ±0, subnormals), a wide range (±100: exp overflows), or few
/// distinct values (ties, halves).
enum class DataCharacter { Plain, Special, Wide, Ties };

const char* characterName(DataCharacter c) {
  switch (c) {
    case DataCharacter::Plain: return "mixed";
    case DataCharacter::Special: return "NaN, inf and zeros";
    case DataCharacter::Wide: return "wide range";
    case DataCharacter::Ties: return "few distinct values";
  }
  return "?";
}

/// How one leaf's data is drawn, from its own seed.
struct LeafRecipe {
  uint64_t seed = 0;
  Shape shape;
  DType dtype = DType::Float32;
  DataKind kind = DataKind::Any;
  std::vector<double> hints;  ///< numbers it should sometimes hold
  bool holdHint = false;      ///< the guard compares it with a number: mostly hold one
  bool simpleValues = false;
  /// The instance's character: most of its leaves hold data of one kind,
  /// so that two operands meet as inf and -inf, or as 90 and -5 (exp
  /// overflows on one side of a rewrite only), or as equal values.
  DataCharacter character = DataCharacter::Plain;
  /// A constant, or a weight-like operand (a Conv's, a MatMul's second):
  /// finite data only, no NaN, inf or subnormals.
  bool finite = false;
  bool subnormals = true; ///< InstanceLimits::subnormals

  /// The element type draw() returns.
  DType dataType() const { return kind == DataKind::Bool ? DType::Bool : dtype; }

  Tensor draw() const {
    LeafRng rng(seed);
    if (dataType() == DType::Bool) {
      // Sometimes all true or all false: an `And` with a constant mask.
      Tensor t(DType::Bool, shape);
      const double p = oneOf(rng, std::vector<double>{0.5, 0.5, 0.0, 1.0});
      for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = chance(rng, p);
      return t;
    }
    if (holdHint && chance(rng, 0.7)) {
      Tensor t(DType::Float64, shape);
      std::fill(t.data<double>(), t.data<double>() + t.numel(), oneOf(rng, hints));
      return t.castTo(dtype);
    }
    if (isInteger(dtype)) return integers(rng);
    return floats(rng);
  }

 private:
  double number(LeafRng& rng, const std::vector<double>& from) const {
    static const std::vector<double> simple = {0.0, 1.0, -1.0, 2.0, 0.5};
    if (simpleValues) return oneOf(rng, simple);
    if (!from.empty() && chance(rng, 0.3)) return oneOf(rng, from);
    return rng.normal();
  }

  Tensor floats(LeafRng& rng) const {
    Tensor t(DType::Float64, shape);
    double* p = t.data<double>();
    const int64_t n = t.numel();
    // One character per tensor: plain normal data, corners mixed in, one
    // repeated number (the guard's, or a simple one), tiny values, a large
    // offset with a small spread, where float32 cancels (a one-pass variance
    // `E[x²] − E[x]²` loses the spread); IEEE's special values among normal
    // ones (NaN, ±inf, ±0, subnormals, the largest finite float); magnitudes
    // where exp overflows and products saturate; and few distinct values,
    // halves among them (ties: ArgMax's first or last, Round's halves).
    //
    // NaN, ±inf and subnormals go into activations, never into constants
    // or weight-like operands (`finite`): a model's weights are normal
    // numbers or zeros, and rules that fold constants (BatchNorm into Conv:
    // w * gamma / sigma) are sound for those only (a subnormal product
    // underflows to 0, and inf * 0 is NaN). Finite data stays small enough
    // (|x| of 1e4 at most) that products of a few values do not overflow: overflow
    // is reached through the ops that reach it from moderate inputs (exp,
    // pow), and through inf itself.
    const bool single = dtype == DType::Float32;
    const double tiniest = single ? 1.4e-45 : 4.9e-324, subnormal = single ? 3e-39 : 2e-310;
    const std::vector<double> corners = {0.0, -0.0, 1.0, -1.0, 1e-6, -1e-6, 100.0, -100.0, 3e3, -3e3, 0.5};
    const std::vector<double> special =
        finite ? std::vector<double>{0.0, -0.0, 1.0, -1.0}
        : subnormals ? std::vector<double>{NAN, INFINITY, -INFINITY, 0.0, -0.0, tiniest, -subnormal}
                     : std::vector<double>{NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-30, -1e-30};
    const std::vector<double> extremes = finite ? std::vector<double>{0.0, -0.0} : std::vector<double>{NAN, INFINITY, -INFINITY};
    const std::vector<double> few = {-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.5};
    const bool forced = character != DataCharacter::Plain && chance(rng, 0.8);
    double mode = rng.uniform(0, 1);
    if (forced) mode = character == DataCharacter::Wide ? 0.85 : 0.95;  // the modes below
    const double fill =
        hints.empty() || chance(rng, 0.3) ? number(rng, {0.0, 1.0, -1.0, 2.0, 0.5, 3.0}) : oneOf(rng, hints);
    const double offset = oneOf(rng, std::vector<double>{3e3, -3e3, 1e4});
    for (int64_t i = 0; i < n; ++i) {
      double x;
      if (simpleValues) x = number(rng, {});
      else if (forced && character == DataCharacter::Special) x = !chance(rng, 0.8) ? oneOf(rng, std::vector<double>{1.0, -1.0, 2.0, 0.5})
                             : chance(rng, 0.5) ? oneOf(rng, extremes)
                                                : oneOf(rng, special);
      else if (mode < 0.30) x = rng.normal();
      else if (mode < 0.44) x = rng.uniform(0, 1) < 0.5 ? oneOf(rng, corners) : rng.uniform(-4, 4);
      else if (mode < 0.54) x = fill;
      else if (mode < 0.61) x = 1e-3 * rng.normal();
      else if (mode < 0.67) x = rng.uniform(-10, 10);
      else if (mode < 0.75) x = offset + rng.normal();
      else if (mode < 0.84) x = chance(rng, 0.3) ? oneOf(rng, special) : rng.normal();
      else if (mode < 0.91) x = rng.uniform(-100, 100);
      else x = oneOf(rng, few);
      if (kind == DataKind::Positive) x = std::fabs(x);
      p[i] = x;
    }
    return t.castTo(dtype);
  }

  /// Integers: small ones, sometimes with zeros and values a division
  /// truncates, sometimes one repeated value; never near the type's limits
  /// (the interpreter refuses an overflow no rule can be blamed for).
  Tensor integers(LeafRng& rng) const {
    Tensor t(DType::Int64, shape);
    int64_t* p = t.data<int64_t>();
    const double mode = rng.uniform(0, 1);
    const int64_t fill = oneOf(rng, std::vector<int64_t>{1, 2, -3, 7});
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t x;
      if (simpleValues) x = oneOf(rng, std::vector<int64_t>{0, 1, -1, 2});
      else if (mode < 0.55) x = (chance(rng, 0.5) ? 1 : -1) * static_cast<int64_t>(rng.uniform(1, 10));  // no zeros
      else if (mode < 0.75) x = static_cast<int64_t>(std::floor(rng.uniform(-9, 10)));
      else if (mode < 0.9) x = oneOf(rng, std::vector<int64_t>{0, 1, -1, 2, -2, 3, 7, -7, 100, -1000});
      else x = fill;
      if (kind == DataKind::Positive) x = std::abs(x);
      p[i] = x;
    }
    return t.castTo(dtype);
  }
};

/// One operand of the op being built.
struct Slot {
  bool present = true;
  ValueId value = kNoValue;  ///< known already, or made from the fields below
  int binding = -1;          ///< the pattern name a new leaf is bound to
  bool constant = false;     ///< a new leaf must be a constant
  std::optional<Shape> shape;
  DType dtype = DType::Undefined;
  DataKind data = DataKind::Any;
  std::optional<Tensor> fixed;  ///< the leaf's data, decided by the op (a Reshape's shape)
  std::vector<DType> allowed;   ///< the element types ONNX's schema allows here (empty: any)
  bool finite = false;          ///< a weight-like operand: LeafRecipe::finite
};

/// Numbers written in `e` (guards): the values data should sometimes hold.
void collectLiterals(const RuleExpr& e, std::vector<double>& out) {
  if (e.kind == RuleExpr::Kind::Number) out.push_back(e.number);
  for (const RuleExpr& a : e.args) collectLiterals(a, out);
}

/// Bindings the guard needs constant: named in const(...) or value(...).
void collectConstants(const RuleExpr& e, std::set<int>& out) {
  if (e.kind == RuleExpr::Kind::Builtin && (e.text == "const" || e.text == "value"))
    for (const RuleExpr& a : e.args)
      if (a.kind == RuleExpr::Kind::Binding && a.binding >= 0) out.insert(a.binding);
  for (const RuleExpr& a : e.args) collectConstants(a, out);
}

/// Whether `e` calls the builtin `name`.
bool callsBuiltin(const RuleExpr& e, const std::string& name) {
  if (e.kind == RuleExpr::Kind::Builtin && e.text == name) return true;
  for (const RuleExpr& a : e.args)
    if (callsBuiltin(a, name)) return true;
  return false;
}

/// `value(b) == 2.0`: per binding, the numbers the guard compares it with.
void collectValueHints(const RuleExpr& e, std::map<int, std::vector<double>>& out) {
  if (e.kind == RuleExpr::Kind::Binary && e.args.size() == 2)
    for (int side = 0; side < 2; ++side) {
      const RuleExpr& v = e.args[static_cast<size_t>(side)];
      const RuleExpr& n = e.args[static_cast<size_t>(1 - side)];
      const bool number = n.kind == RuleExpr::Kind::Number ||
                          (n.kind == RuleExpr::Kind::Unary && n.args[0].kind == RuleExpr::Kind::Number);
      if (v.kind == RuleExpr::Kind::Builtin && v.text == "value" && v.args[0].kind == RuleExpr::Kind::Binding && number)
        out[v.args[0].binding].push_back(n.kind == RuleExpr::Kind::Number ? n.number : -n.args[0].number);
    }
  for (const RuleExpr& a : e.args) collectValueHints(a, out);
}

/// A literal of an attribute pattern (`{ axis: -1 }`) as an attribute of `type`.
std::optional<Attribute> literalAttribute(const RuleExpr& e, AttrType type) {
  auto number = [](const RuleExpr& x) -> std::optional<double> {
    if (x.kind == RuleExpr::Kind::Number || x.kind == RuleExpr::Kind::Bool) return x.number;
    if (x.kind == RuleExpr::Kind::Unary && x.text == "-" && x.args[0].kind == RuleExpr::Kind::Number)
      return -x.args[0].number;
    return std::nullopt;
  };
  if (e.kind == RuleExpr::Kind::String) return Attribute(e.text);
  if (e.kind == RuleExpr::Kind::List) {
    std::vector<double> items;
    for (const RuleExpr& x : e.args) {
      auto n = number(x);
      if (!n) return std::nullopt;
      items.push_back(*n);
    }
    if (type == AttrType::Floats) return Attribute(std::vector<float>(items.begin(), items.end()));
    std::vector<int64_t> ints;
    for (double d : items) ints.push_back(static_cast<int64_t>(d));
    return Attribute(ints);
  }
  auto n = number(e);
  if (!n) return std::nullopt;
  if (type == AttrType::Float) return Attribute(static_cast<float>(*n));
  return Attribute(static_cast<int64_t>(*n));
}

/// The largest of a guard's numbers drawn as a dim (with a few past it):
/// a guard such as `shape(d)[3] >= 32` (a CPU's wide maps) gets instances,
/// a size bound such as `numel(x) <= 262144` does not make tensors huge.
constexpr int64_t kGuardDims = 32;

class Generator {
 public:
  Generator(const Rule& rule, Rng& rng, const InstanceLimits& limits, Data data)
      : rng_(rng), lim_(limits), data_(data), p_(rule.pattern) {
    if (rule.guard) {
      collectLiterals(*rule.guard, literals_);
      for (double l : literals_)  // the number and a few past it (a bound: `>= 8` holds for 10)
        if (l == std::floor(l) && l > lim_.maxDim && l <= kGuardDims)
          for (int64_t d = static_cast<int64_t>(l); d <= std::min<int64_t>(kGuardDims, static_cast<int64_t>(l) + 4); d += 2)
            dimLiterals_.push_back(d);
      collectConstants(*rule.guard, constants_);
      collectValueHints(*rule.guard, hints_);
      usesGuard_ = callsBuiltin(*rule.guard, "uses");
    }
    dtype_ = drawElementType();
    const double c = std::uniform_real_distribution<double>(0, 1)(rng_);
    character_ = c < 0.25 ? DataCharacter::Special : c < 0.37 ? DataCharacter::Wide : c < 0.45 ? DataCharacter::Ties
                                                                                     : DataCharacter::Plain;
    values_.assign(p_.bindings.size(), kNoValue);
    attrs_.assign(p_.bindings.size(), std::nullopt);
    built_.assign(p_.nodes.size(), {});
    done_.assign(p_.nodes.size(), false);
  }

  Instance run() {
    for (size_t i = 0; i < p_.nodes.size(); ++i) build(static_cast<int>(i));
    for (int root : p_.roots)
      for (ValueId v : built_[static_cast<size_t>(root)])
        if (v != kNoValue && !g_.isGraphOutput(v)) g_.addOutput(v);
    if (g_.outputs().empty()) throw Discard{"the pattern builds no value"};
    addOutsideReaders();
    Instance inst;
    features_.insert("element types: " + std::string(dtypeName(dtype_)));
    if (isFloatingPoint(dtype_)) features_.insert("data: " + std::string(characterName(character_)));
    inst.features = std::move(features_);
    inst.inputs = std::move(inputs_);
    inst.pending = std::move(pending_);
    inst.matched = std::move(matched_);
    inst.graph = std::move(g_);
    return inst;
  }

 private:
  // ---- element types ------------------------------------------------------------

  /// The types ONNX lets `op` carry data in: its first operand's that has a
  /// choice (a Where's values, not its bool condition), else its first's.
  /// Empty (no constraint) for ops ONNX does not know.
  static std::vector<DType> dataTypes(const OpDef& op) {
    std::vector<DType> first;
    for (size_t i = 0; i < std::max<size_t>(op.params.size(), 1); ++i) {
      std::vector<DType> t = schemaOperandTypes(op.name.str(), i);
      if (i == 0) first = t;
      if (t.size() > 1) return t;
    }
    return first;
  }

  /// The instance's element type: one that every node of the pattern takes
  /// in at least one of its alternatives (float32 mostly; float64, int64,
  /// int32 and bool where the ops allow them).
  DType drawElementType() {
    std::vector<DType> allowed = {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Bool};
    for (const PatternNode& pn : p_.nodes) {
      std::set<DType> any;
      bool unconstrained = false;
      for (const OpDef* op : pn.ops) {
        std::vector<DType> t = dataTypes(*op);
        unconstrained |= t.empty();
        any.insert(t.begin(), t.end());
      }
      if (unconstrained) continue;
      std::vector<DType> kept;
      for (DType d : allowed)
        if (any.count(d)) kept.push_back(d);
      if (!kept.empty()) allowed = kept;  // no common type: float32 as before, and the draw may be discarded
    }
    static const std::map<DType, double> weight = {{DType::Float32, 0.6},  {DType::Float64, 0.15}, {DType::Int64, 0.1},
                                                   {DType::Int32, 0.05}, {DType::Bool, 0.1}};
    double total = 0;
    for (DType d : allowed) total += weight.at(d);
    double r = std::uniform_real_distribution<double>(0, total)(rng_);
    for (DType d : allowed)
      if ((r -= weight.at(d)) < 0) return d;
    return allowed.front();
  }

  // ---- structure around the pattern ------------------------------------------

  /// Values the pattern computes that the rest of a model also reads: an
  /// intermediate read by a node outside the pattern or itself a model
  /// output, a root read once more. A rewrite that replaces such a value
  /// changes what those readers see, and a guard on `uses()` needs them to
  /// hold. Readers are `Identity` nodes whose results are model outputs.
  void addOutsideReaders() {
    // A guard on uses() wants one reader (`uses(a) == 1`, most often) or
    // more: half its instances have no outside reader, half have many.
    const double p = !usesGuard_ ? 0.1 : chance(rng_, 0.5) ? 0.0 : 0.5;
    std::set<int> roots(p_.roots.begin(), p_.roots.end());
    for (size_t i = 0; i < p_.nodes.size(); ++i) {
      const bool root = roots.count(static_cast<int>(i)) > 0;
      if (root && !usesGuard_) continue;
      for (ValueId v : std::vector<ValueId>(built_[i])) {
        if (v == kNoValue || !g_.value(v).producer) continue;
        for (int r = 0; r < 2 && chance(rng_, p); ++r) {
          features_.insert(std::string("outside the pattern: ") + (root ? "a result" : "an intermediate") + " read by another node");
          const std::string name = "reader_" + std::to_string(next_++);
          ValueId out = g_.addValue(name, g_.value(v).type);
          g_.addNode("Identity", {v}, {out}, {}, name);
          g_.addOutput(out);
        }
        if (!root && !g_.isGraphOutput(v) && chance(rng_, p)) {
          features_.insert("outside the pattern: an intermediate as a model output");
          g_.addOutput(v);
        }
      }
    }
  }

  // ---- data ------------------------------------------------------------------

  /// A dim: sometimes 1 (broadcasting), sometimes a number the guard
  /// compares with or a little past it (up to kGuardDims: `shape(d)[3] >=
  /// 32`),
  /// sometimes a multiple of 4 (the vector widths kernels block by:
  /// attention's keys and head size), else any.
  int64_t dim() {
    if (chance(rng_, 0.2)) return 1;
    if (!dimLiterals_.empty() && chance(rng_, 0.3)) return oneOf(rng_, dimLiterals_);
    if (lim_.maxDim >= 4 && chance(rng_, 0.3)) return 4 * between(rng_, 1, lim_.maxDim / 4);
    return between(rng_, 2, std::max<int64_t>(2, lim_.maxDim));
  }

  Shape randomShape(int lo, int hi) {
    Shape s(static_cast<size_t>(between(rng_, lo, std::max(lo, std::min(hi, lim_.maxRank)))));
    for (int64_t& d : s) d = dim();
    return s;
  }

  /// A shape that broadcasts with `ref`: the same, a suffix, size-1 dims, a scalar.
  Shape partner(const Shape& ref) {
    const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (ref.empty() || r < 0.45) return ref;
    if (r < 0.6) return Shape(ref.end() - between(rng_, 1, static_cast<int64_t>(ref.size())), ref.end());
    if (r < 0.72 || (r < 0.82 && ref.size() < 3)) {
      Shape s = ref;
      for (int64_t& d : s)
        if (chance(rng_, 0.5)) d = 1;
      return s;
    }
    if (r < 0.82) {  // one factor per channel (dim 1), per image or for all: a BatchNorm's, an SE block's scale
      Shape s(ref.size(), 1);
      s[1] = ref[1];
      if (chance(rng_, 0.5)) s[0] = ref[0];
      return s;
    }
    if (r < 0.9) return Shape{};
    return Shape{1};
  }

  /// How slot `s`'s data is drawn: the guard's numbers as hints (a binding
  /// the guard compares with numbers: those, mostly held).
  LeafRecipe recipe(const Slot& s) {
    LeafRecipe r;
    r.seed = rng_();
    r.shape = s.shape.value_or(Shape{});
    r.dtype = s.dtype;
    if (r.dtype == DType::Undefined)  // the instance's type where the op takes it here, else the op's first
      r.dtype = s.allowed.empty() || std::count(s.allowed.begin(), s.allowed.end(), dtype_) ? dtype_ : s.allowed.front();
    r.kind = r.dtype == DType::Bool ? DataKind::Bool : s.data;
    r.simpleValues = lim_.simpleValues;
    r.character = character_;
    r.subnormals = lim_.subnormals;
    r.hints = literals_;
    if (s.binding >= 0)
      if (auto it = hints_.find(s.binding); it != hints_.end()) {
        r.hints = it->second;
        r.holdHint = true;
      }
    if (s.binding >= 0)
      if (auto it = lim_.witness.find(p_.bindings[static_cast<size_t>(s.binding)].name); it != lim_.witness.end()) {
        r.hints = {it->second};
        r.holdHint = true;
      }
    return r;
  }

  ValueId makeLeaf(Slot& s) {
    const std::string name = s.binding >= 0 ? p_.bindings[static_cast<size_t>(s.binding)].name + "_" + std::to_string(next_++)
                                            : "in" + std::to_string(next_++);
    const bool guardReads = s.binding >= 0 && (constants_.count(s.binding) || hints_.count(s.binding));
    // (An instance of special values keeps its free leaves inputs: constants hold none.)
    const bool constant = s.constant || s.fixed || (s.binding >= 0 && constants_.count(s.binding)) ||
                          (character_ != DataCharacter::Special && chance(rng_, 0.25));
    std::optional<LeafRecipe> r;
    if (!s.fixed) r = recipe(s);
    if (r) r->finite = constant || s.finite;
    const DType dtype = s.fixed ? s.fixed->dtype() : r->dataType();
    const Shape shape = s.fixed ? s.fixed->shape() : r->shape;
    // Data nothing reads before the check (neither the guard nor type
    // inference, which sees constants up to kInferenceDataBytes) waits.
    const bool defer = data_ == Data::Deferred && r && !guardReads &&
                       (!constant || shapeNumel(shape) * static_cast<int64_t>(dtypeSize(dtype)) >
                                         static_cast<int64_t>(kInferenceDataBytes));
    ValueId v;
    if (constant && defer) {
      // The graph's constant is this tensor, zeros of the leaf's type and
      // shape (all that matching and typing read) until drawData() fills it.
      auto data = std::make_shared<Tensor>(dtype, shape);
      v = g_.addConstant(name, std::shared_ptr<const Tensor>(data));
      pending_.push_back({0, std::move(data), [r = *r] { return r.draw(); }});
    } else if (constant) {
      v = g_.addConstant(name, s.fixed ? *s.fixed : r->draw());
    } else {
      v = g_.addInput(name, TensorType::of(dtype, shape));
      if (defer) pending_.push_back({inputs_.size(), nullptr, [r = *r] { return r.draw(); }});
      inputs_.push_back(defer ? Tensor() : s.fixed ? *s.fixed : r->draw());  // a deferred input: drawData() fills it
    }
    if (s.binding >= 0) values_[static_cast<size_t>(s.binding)] = v;
    return v;
  }

  Shape shapeOf(ValueId v) const { return g_.value(v).type.staticShape(); }

  // ---- attributes --------------------------------------------------------------

  /// A value for attribute `a` of an op whose first operand has rank `rank`;
  /// nullopt leaves it absent (its default).
  std::optional<Attribute> drawAttr(const AttrSpec& a, int64_t rank, bool force) {
    const std::string& n = a.name;
    if (!force && !a.required && chance(rng_, 0.5)) return std::nullopt;
    const int64_t r = std::max<int64_t>(rank, 1);
    if (n == "axis") return Attribute(between(rng_, -r, r - 1));
    if (n == "axes") {
      std::vector<int64_t> axes;
      for (int64_t i = 0; i < r; ++i)
        if (chance(rng_, 0.4)) axes.push_back(chance(rng_, 0.5) ? i - r : i);
      if (axes.empty()) axes.push_back(-1);
      return Attribute(axes);
    }
    if (n == "perm") {
      std::vector<int64_t> perm(static_cast<size_t>(r));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng_);
      return Attribute(perm);
    }
    if (n == "keepdims" || n == "transA" || n == "transB") return Attribute(between(rng_, 0, 1));
    if (n == "to") return Attribute(oneOf(rng_, std::vector<int64_t>{1, 11, 7}));  // float, double, int64
    if (n == "epsilon") return Attribute(static_cast<float>(oneOf(rng_, std::vector<double>{1e-5, 1e-3, 0.1, 0.5})));
    if (a.type == AttrType::Float) {
      std::vector<double> options = {0.0, 0.5, -1.5, 2.0, 0.01};
      // The guard's numbers too, but not its size bounds (`numel(x) <=
      // 262144`): a Celu's alpha of 2^18 measures float32's exp near 1.
      for (double l : literals_)
        if (std::abs(l) <= 64) options.push_back(l);
      return Attribute(static_cast<float>(oneOf(rng_, options)));
    }
    if (isFlag(a)) return Attribute(between(rng_, 0, 1));  // select_last_index, ceil_mode, detect_negative, ...
    if (a.defaultValue) return *a.defaultValue;
    if (!a.required && !force) return std::nullopt;  // an op's own rules may set it (Conv's dilations)
    throw Discard{"cannot draw attribute `" + n + "`"};
  }

  /// An int attribute whose default is 0 or 1: a switch (keepdims,
  /// select_last_index, ceil_mode, ...), drawn either way.
  static bool isFlag(const AttrSpec& a) {
    if (a.type != AttrType::Int || !a.defaultValue) return false;
    const int64_t* d = std::get_if<int64_t>(&*a.defaultValue);
    return d && (*d == 0 || *d == 1);
  }

  // ---- ops -------------------------------------------------------------------

  ValueId build(int index) {
    const auto i = static_cast<size_t>(index);
    if (done_[i]) return built_[i].empty() ? kNoValue : built_[i][0];
    if (inProgress_.count(index)) throw Discard{"the pattern is cyclic"};
    inProgress_.insert(index);
    const PatternNode& pn = p_.nodes[i];
    int length = 1;
    // `*` is empty half the time: a pattern with several optional chains
    // (attention's views on Q, K, V and its result) then often has none or
    // one, whose shapes the ops around them can take.
    if (pn.repeat == PatternNode::Repeat::ZeroOrMore)
      length = chance(rng_, 0.5) ? 0 : static_cast<int>(between(rng_, 1, lim_.maxRepeat));
    else if (pn.repeat == PatternNode::Repeat::OneOrMore)
      length = static_cast<int>(between(rng_, 1, lim_.maxRepeat));
    std::vector<ValueId> results;
    if (length == 0) {
      results.push_back(operandValue(pn.operands.at(0)));
    }
    if (pn.repeat != PatternNode::Repeat::Once)
      features_.insert("node " + std::to_string(index) + " repeated: " + (length > 1 ? "2x or more" : std::to_string(length) + "x"));
    ValueId previous = kNoValue;
    for (int k = 0; k < length; ++k) {
      const OpDef* op = oneOf(rng_, pn.ops);
      if (pn.ops.size() > 1) features_.insert("node " + std::to_string(index) + " ops: " + op->name.str());
      results = buildOp(pn, op, k == 0 ? kNoValue : previous);
      previous = results[0];
    }
    for (size_t r = 0; r < pn.results.size() && r < results.size(); ++r)
      if (pn.results[r] >= 0) values_[static_cast<size_t>(pn.results[r])] = results[r];
    built_[i] = results;
    done_[i] = true;
    inProgress_.erase(index);
    return results.empty() ? kNoValue : results[0];
  }

  /// The value of a pattern operand the pattern already knows, or kNoValue for a leaf.
  ValueId operandValue(const PatternOperand& o) {
    if (o.kind == PatternOperand::Kind::Node) return build(o.index);
    if (o.kind != PatternOperand::Kind::Binding) return kNoValue;
    const Binding& b = p_.bindings[static_cast<size_t>(o.index)];
    if (b.producer >= 0) {
      build(b.producer);
      return values_[static_cast<size_t>(o.index)];
    }
    return values_[static_cast<size_t>(o.index)];
  }

  std::vector<ValueId> buildOp(const PatternNode& pn, const OpDef* op, ValueId chained) {
    const std::string name = op->name.str();
    // Slots: one per operand the op gets.
    std::vector<Slot> slots;
    const bool rest = !pn.operands.empty() && pn.operands.back().kind == PatternOperand::Kind::Rest;
    const size_t given = pn.operands.size() - (rest ? 1 : 0);
    for (size_t i = 0; i < given; ++i) {
      const PatternOperand& o = pn.operands[i];
      Slot s;
      if (i == 0 && chained != kNoValue) s.value = chained;
      else {
        const bool unknown = o.kind != PatternOperand::Kind::Binding || values_[static_cast<size_t>(o.index)] == kNoValue;
        const bool absent = o.optional && unknown && chance(rng_, 0.5);
        if (o.optional && unknown) features_.insert("`" + name + "` operand " + std::to_string(i) + ": " + (absent ? "absent" : "present"));
        if (absent) {
          s.present = false;
        } else {
          s.value = operandValue(o);
          if (o.kind == PatternOperand::Kind::Binding) s.binding = o.index;
        }
      }
      slots.push_back(s);
    }
    if (rest) {
      const size_t max = op->maxOperands() == SIZE_MAX ? slots.size() + static_cast<size_t>(between(rng_, 0, 2))
                                                        : op->maxOperands();
      for (size_t i = slots.size(); i < max; ++i) {
        Slot s;
        if (i >= op->minOperands() && chance(rng_, 0.5)) break;
        slots.push_back(s);
      }
    }
    if (slots.size() < op->minOperands()) throw Discard{"`" + name + "` needs more operands than the pattern gives"};
    // `Elementwise+(x, s)` draws binary ops: a unary one (Cast) is no
    // model's node and no match of the pattern.
    if (slots.size() > op->maxOperands()) throw Discard{"`" + name + "` takes fewer operands than the pattern gives"};
    for (size_t i = 0; i < slots.size() && i < op->params.size(); ++i)
      if (op->params[i].staticValue) slots[i].constant = true;
    for (size_t i = 0; i < slots.size(); ++i) {
      slots[i].allowed = schemaOperandTypes(name, i);
      // The operands after an op's first are its weights, scales and biases
      // unless it is elementwise: finite, as a trained model's are (a direct
      // conv skips its padding where 0 * inf would be NaN).
      slots[i].finite = i > 0 && op->kind != OpKind::Elementwise && op->kind != OpKind::Broadcast;
    }

    AttrMap attrs;
    std::set<std::string> pinned;
    std::vector<std::pair<std::string, int>> boundAttrs;
    for (const AttrConstraint& c : pn.attrs) {
      const AttrSpec* spec = op->findAttr(c.name);
      if (!spec) throw Discard{"`" + name + "` has no attribute `" + c.name + "`"};
      pinned.insert(c.name);
      if (c.equals) {
        auto a = literalAttribute(*c.equals, spec->type);
        if (!a) throw Discard{"cannot read the pattern's value of `" + c.name + "`"};
        attrs[c.name] = *a;
      } else if (c.binding >= 0) {
        boundAttrs.emplace_back(c.name, c.binding);
      }
    }

    // The first operand: known, or drawn as the op's data operand.
    if (!slots.empty() && slots[0].present && slots[0].value == kNoValue) {
      if (name == "Conv" && convResult_.size() == 4 && chance(rng_, 0.5)) {
        // Convs in one pattern often meet in an elementwise op (a block's
        // conv and the projection shortcut added to it): half the time a
        // later Conv is a 1x1 projection onto the earlier one's result shape.
        projection_ = Projection{between(rng_, 1, 2), convResult_[1]};
        Shape in = {convResult_[0], between(rng_, 1, 4)};
        for (size_t d = 2; d < 4; ++d)
          in.push_back((convResult_[d] - 1) * projection_->stride + 1 + between(rng_, 0, projection_->stride - 1));
        slots[0].shape = in;
      } else if (name == "Conv" || name == "ConvTranspose" || name == "InstanceNormalization") {
        slots[0].shape = randomShape(3, 5);
      }
      else if (name == "BatchNormalization") slots[0].shape = randomShape(2, 5);
      else if (name == "MatMul" || name == "Gemm") slots[0].shape = randomShape(2, name == "Gemm" ? 2 : 3);
      else {
        // A broadcast partner of a known operand, or a fresh shape.
        for (const Slot& s : slots)
          if (s.value != kNoValue) {
            slots[0].shape = partner(shapeOf(s.value));
            break;
          }
        if (!slots[0].shape) slots[0].shape = randomShape(1, 4);
      }
      if (name == "Where") slots[0].dtype = DType::Bool;  // its condition, drawn here when the pattern leaves it open
      slots[0].value = makeLeaf(slots[0]);
    }
    const Shape x = slots.empty() ? Shape{} : shapeOf(slots[0].value);
    const int64_t rank = static_cast<int64_t>(x.size());

    for (const AttrSpec& a : op->attrs) {
      if (pinned.count(a.name)) continue;
      if (name == "Conv" && a.name == "group") continue;  // drawn with the channels (proposeOperands)
      std::optional<Attribute> v = drawAttr(a, rank, false);
      if (v) attrs[a.name] = *v;
      if (isFlag(a))
        features_.insert("`" + name + "` " + a.name + ": " + (v ? std::to_string(std::get<int64_t>(*v)) : "absent"));
    }
    for (const auto& [attr, binding] : boundAttrs) {
      auto& known = attrs_[static_cast<size_t>(binding)];
      if (!known) known = drawAttr(*op->findAttr(attr), rank, true);
      attrs[attr] = *known;
    }
    proposeOperands(name, op, x, slots, attrs, pinned, std::max<size_t>(1, pn.results.size()));
    projection_.reset();

    std::vector<ValueId> inputs;
    for (Slot& s : slots) {
      if (!s.present) {
        inputs.push_back(kNoValue);
        continue;
      }
      if (s.value == kNoValue && s.binding >= 0) s.value = values_[static_cast<size_t>(s.binding)];  // `Mul(x, x)`
      if (s.value == kNoValue) {
        // What the guard compares with one number is mostly one number.
        if (!s.shape && s.binding >= 0 && hints_.count(s.binding) && chance(rng_, 0.6))
          s.shape = chance(rng_, 0.5) ? Shape{} : Shape{1};
        if (!s.shape) s.shape = op->kind == OpKind::Broadcast ? partner(x) : x;
        s.value = makeLeaf(s);
      }
      inputs.push_back(s.value);
    }
    while (!inputs.empty() && inputs.back() == kNoValue) inputs.pop_back();
    const size_t results = std::max<size_t>(1, pn.results.size());
    NodeRef n = g_.addNodeWithNewOutputs(name, inputs, results, attrs, name + "_" + std::to_string(next_++));
    matched_.push_back(n);
    if (std::string p = operandTypeProblem(g_, g_.node(n)); !p.empty()) throw Discard{"`" + name + "`: " + p};
    inferNodeTypes(g_, n);
    if (name == "Conv" && g_.value(g_.node(n).outputs[0]).type.isStatic())
      convResult_ = g_.value(g_.node(n).outputs[0]).type.staticShape();
    std::vector<ValueId> out;
    for (ValueId v : g_.node(n).outputs) {
      if (v != kNoValue && !g_.value(v).type.isStatic())
        throw Discard{"ONNX's inference cannot type `" + name + "` on the drawn operands"};
      out.push_back(v);
    }
    return out;
  }

  /// Shapes and data of the operands an op needs in a particular form.
  /// `results`: how many results the pattern binds (Split's parts).
  void proposeOperands(const std::string& op, const OpDef* def, const Shape& x, std::vector<Slot>& slots, AttrMap& attrs,
                       const std::set<std::string>& pinned, size_t results) {
    auto leaf = [&](size_t i) -> Slot* {
      return i < slots.size() && slots[i].present && slots[i].value == kNoValue ? &slots[i] : nullptr;
    };
    auto ints = [](Shape shape, std::vector<int64_t> v) { return Tensor::fromVector<int64_t>(std::move(shape), v); };
    const auto rank = static_cast<int64_t>(x.size());
    const int64_t channels = rank >= 2 ? x[1] : 1;
    if (op == "Conv") {
      if (rank < 3) throw Discard{"Conv needs an input of rank 3 or more"};
      const size_t spatial = x.size() - 2;
      int64_t group = 1;
      if (auto* g = std::get_if<int64_t>(attrs.count("group") ? &attrs["group"] : nullptr)) group = *g;
      else {
        group = chance(rng_, 0.5) ? channels : 1;  // depthwise half the time: MobileNets are full of them
        if (group != 1) attrs["group"] = group;
      }
      if (group <= 0 || channels % group != 0) throw Discard{"the channels do not divide into the groups"};
      std::vector<int64_t> kernel(spatial), strides(spatial, 1), dilations(spatial, 1), pads(2 * spatial, 0);
      for (size_t d = 0; d < spatial; ++d) {
        // 1x1 often: pointwise convs are most of a CNN's, and rules ask for them.
        kernel[d] = chance(rng_, 0.4) ? 1 : between(rng_, 1, std::min<int64_t>(3, x[d + 2]));
        if (chance(rng_, 0.3)) strides[d] = 2;
        if (chance(rng_, 0.3)) pads[d] = pads[d + spatial] = 1;
      }
      if (projection_) {
        group = 1;
        attrs.erase("group");
        kernel.assign(spatial, 1);
        strides.assign(spatial, projection_->stride);
        pads.assign(2 * spatial, 0);
      }
      // The pattern's or the generic draws of these attributes may not fit the
      // shapes drawn here: the op's own choice replaces them.
      attrs.erase("kernel_shape");
      attrs.erase("auto_pad");
      attrs["strides"] = strides;
      attrs["pads"] = pads;
      attrs["dilations"] = dilations;
      const int64_t out = projection_ ? projection_->channels : group * between(rng_, 1, 3);
      Shape w = {out, channels / group};
      w.insert(w.end(), kernel.begin(), kernel.end());
      if (Slot* s = leaf(1)) s->shape = w;
      if (Slot* s = leaf(2)) s->shape = Shape{out};
    } else if (op == "BatchNormalization" || op == "InstanceNormalization") {
      for (size_t i = 1; i < slots.size(); ++i)
        if (Slot* s = leaf(i)) s->shape = Shape{channels};
      if (op == "BatchNormalization") {
        if (Slot* var = leaf(4)) var->data = DataKind::Positive;
        attrs.erase("training_mode");
      }
    } else if (op == "MatMul") {
      if (rank < 1) throw Discard{"MatMul needs an operand of rank 1 or more"};
      if (Slot* s = leaf(1)) {
        // A matrix (broadcast over A's batches), A's batches of matrices (as
        // attention's keys and values are), or a vector.
        Shape b = {x.back(), dim()};
        if (rank >= 3 && chance(rng_, 0.7)) b.insert(b.begin(), x.begin(), x.end() - 2);
        s->shape = chance(rng_, 0.8) ? b : Shape{x.back()};
      }
    } else if (op == "Gemm") {
      if (rank != 2) throw Discard{"Gemm needs a matrix"};
      auto flag = [&](const char* n) { auto* v = attrs.count(n) ? std::get_if<int64_t>(&attrs[n]) : nullptr; return v && *v; };
      const int64_t m = flag("transA") ? x[1] : x[0], k = flag("transA") ? x[0] : x[1], n = dim();
      if (Slot* s = leaf(1)) s->shape = flag("transB") ? Shape{n, k} : Shape{k, n};
      if (Slot* s = leaf(2)) s->shape = partner(Shape{m, n});
    } else if (op == "LayerNormalization") {
      int64_t axis = -1;
      if (auto* a = attrs.count("axis") ? std::get_if<int64_t>(&attrs["axis"]) : nullptr) axis = *a;
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= std::max<int64_t>(rank, 1)) throw Discard{"the drawn axis is outside the rank"};
      const Shape normalized(x.begin() + axis, x.end());
      for (size_t i = 1; i < slots.size(); ++i)
        if (Slot* s = leaf(i)) s->shape = normalized;
    } else if (op == "Clip") {
      for (size_t i = 1; i < 3; ++i)
        if (Slot* s = leaf(i)) s->shape = Shape{};
    } else if (op == "Where") {
      if (Slot* s = leaf(0)) s->dtype = DType::Bool;
    } else if (op == "Dropout") {
      // A ratio in [0, 1) and a training flag, both scalars; inference mostly.
      if (Slot* s = leaf(1)) s->fixed = Tensor::fromVector<float>({}, {0.25f});
      if (Slot* s = leaf(2)) {
        s->fixed = Tensor::fromVector<bool>({}, {!chance(rng_, 0.8)});
        s->constant = true;
      }
    } else if (op == "And" || op == "Or" || op == "Xor" || op == "Not") {
      for (size_t i = 0; i < slots.size(); ++i)
        if (Slot* s = leaf(i)) s->dtype = DType::Bool;
    } else if (op == "Reshape") {
      if (Slot* s = leaf(1)) {
        // A random factorization of the element count, sometimes with -1,
        // sometimes with 0 (the input's dim at that position) where
        // `allowzero` is not set; the pattern's `allowzero` kept, a drawn
        // one dropped.
        int64_t left = shapeNumel(x);
        std::vector<int64_t> dims;
        for (int64_t d : x)
          if (d > 1 && chance(rng_, 0.5)) dims.push_back(d), left /= d;
        dims.push_back(left);
        std::shuffle(dims.begin(), dims.end(), rng_);
        if (!pinned.count("allowzero")) attrs.erase("allowzero");
        const auto* az = attrs.count("allowzero") ? std::get_if<int64_t>(&attrs["allowzero"]) : nullptr;
        if (!az || *az == 0)
          for (size_t i = 0; i < dims.size() && i < x.size(); ++i)
            if (dims[i] == x[i] && chance(rng_, 0.3)) dims[i] = 0;
        if (chance(rng_, 0.3)) {
          const auto i = static_cast<size_t>(between(rng_, 0, static_cast<int64_t>(dims.size()) - 1));
          if (dims[i] != 0) dims[i] = -1;
        }
        s->fixed = ints({static_cast<int64_t>(dims.size())}, dims);
      }
    } else if (op == "Pad") {
      // Half the time no padding at all, else 0 or 1 per side; a scalar fill.
      if (Slot* s = leaf(1)) {
        std::vector<int64_t> pads(2 * x.size(), 0);
        if (chance(rng_, 0.5))
          for (int64_t& p : pads) p = between(rng_, 0, 1);
        s->fixed = ints({2 * rank}, pads);
      }
      if (Slot* s = leaf(2)) s->shape = Shape{};
    } else if (op == "Split") {
      // One part per result the pattern binds: sizes of at least 1 that sum
      // to the axis (uneven, or equal), or, without the sizes operand, equal
      // parts, which the axis must hold a whole number of times.
      int64_t axis = 0;
      if (auto* a = attrs.count("axis") ? std::get_if<int64_t>(&attrs["axis"]) : nullptr) axis = *a;
      if (axis < -rank || axis >= rank) throw Discard{"the drawn axis is outside the rank"};
      const int64_t length = x[static_cast<size_t>(axis < 0 ? axis + rank : axis)];
      const auto parts = static_cast<int64_t>(results);
      if (Slot* s = leaf(1)) {
        if (length < parts) throw Discard{"the split axis is shorter than the parts the pattern binds"};
        std::vector<int64_t> sizes(results, 1);
        if (length % parts == 0 && chance(rng_, 0.4)) {
          sizes.assign(results, length / parts);
        } else {
          for (int64_t left = length - parts; left > 0; --left) ++sizes[static_cast<size_t>(between(rng_, 0, parts - 1))];
        }
        s->fixed = ints({parts}, sizes);
      } else if (length % parts != 0) {
        throw Discard{"without sizes, Split needs an axis its parts divide"};
      }
    } else if (op == "Slice") {
      if (rank == 0) throw Discard{"Slice needs an operand of rank 1 or more"};
      // Per axis a non-empty range: steps 1 mostly, else 2, 3 or backwards
      // (-1 reverses, -2); starts and ends sometimes counted from the end
      // (negative) or past it (clamped), INT64_MAX and INT64_MIN as PyTorch
      // exports "to the end". Without a steps operand, step 1.
      const bool stepped = leaf(4) != nullptr;
      constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
      std::vector<int64_t> axes, starts, ends, steps;
      const bool withAxes = leaf(3) != nullptr;  // else starts and ends apply to the first axes
      for (int64_t a = 0; a < rank; ++a)
        if (axes.empty() || chance(rng_, 0.3)) {
          if (!withAxes && static_cast<int64_t>(axes.size()) != a) break;
          axes.push_back(chance(rng_, 0.5) ? a - rank : a);
          const int64_t d = x[static_cast<size_t>(a)];
          const int64_t step = stepped && chance(rng_, 0.45) ? oneOf(rng_, std::vector<int64_t>{2, 3, -1, -1, -2}) : 1;
          int64_t start, end;  // in [0, d]: start < end forwards, start > end (end may be -1) backwards
          const bool whole = chance(rng_, 0.4);  // the whole axis: a reversal, a stride, a no-op
          if (step > 0) {
            start = whole ? 0 : between(rng_, 0, d - 1);
            end = whole ? d : between(rng_, start + 1, d);
          } else {
            start = whole ? d - 1 : between(rng_, 0, d - 1);
            end = whole ? -1 : between(rng_, -1, start - 1);
          }
          // Written as an exporter might: from the end, clamped, or "all".
          auto spell = [&](int64_t i, bool isEnd) -> int64_t {
            const double r = std::uniform_real_distribution<double>(0, 1)(rng_);
            if (i == d && isEnd && step > 0) return r < 0.4 ? kMax : r < 0.6 ? d + 3 : d;
            if (i == -1 && isEnd) return r < 0.5 ? kMin : -d - 1 - between(rng_, 0, 2);
            if (i == d - 1 && !isEnd && step < 0 && r < 0.3) return r < 0.15 ? kMax : d + 2;
            if (i == 0 && !isEnd && step > 0 && r < 0.2) return -d - 2;
            return r < 0.35 && i < d ? i - d : i;
          };
          starts.push_back(spell(start, false));
          ends.push_back(spell(end, true));
          steps.push_back(step);
        }
      const auto k = static_cast<int64_t>(axes.size());
      if (Slot* s = leaf(1)) s->fixed = ints({k}, starts);
      if (Slot* s = leaf(2)) s->fixed = ints({k}, ends);
      if (Slot* s = leaf(3)) s->fixed = ints({k}, axes);
      if (Slot* s = leaf(4)) s->fixed = ints({k}, steps);
    }
    // Index operands by name, for ops without their own rules above.
    for (size_t i = 1; i < slots.size() && i < def->params.size(); ++i) {
      Slot* s = leaf(i);
      if (!s || s->fixed) continue;
      const std::string& p = def->params[i].name;
      if (p == "axes") {
        std::vector<int64_t> axes;
        for (int64_t a = 0; a < rank; ++a)
          if (chance(rng_, 0.4)) axes.push_back(chance(rng_, 0.5) ? a - rank : a);
        if (axes.empty() && rank > 0) axes.push_back(-1);
        s->fixed = ints({static_cast<int64_t>(axes.size())}, axes);
      } else if (p == "repeats") {
        std::vector<int64_t> r(x.size());
        for (int64_t& v : r) v = between(rng_, 1, 2);
        s->fixed = ints({rank}, r);
      } else if (p == "split") {
        // One part per result the pattern builds (one): the whole axis.
        int64_t axis = 0;
        if (auto* a = attrs.count("axis") ? std::get_if<int64_t>(&attrs["axis"]) : nullptr) axis = *a;
        if (axis < 0) axis += rank;
        if (axis < 0 || axis >= rank) throw Discard{"the drawn axis is outside the rank"};
        s->fixed = ints({1}, {x[static_cast<size_t>(axis)]});
      } else if (p == "indices") {
        const int64_t d = rank > 0 ? x[0] : 1;
        std::vector<int64_t> idx(static_cast<size_t>(between(rng_, 1, 3)));
        for (int64_t& v : idx) v = between(rng_, -d, d - 1);
        s->fixed = ints({static_cast<int64_t>(idx.size())}, idx);
      }
    }
  }

  Rng& rng_;
  InstanceLimits lim_;
  Data data_;
  const Pattern& p_;
  DType dtype_ = DType::Float32;
  std::vector<double> literals_;
  std::vector<int64_t> dimLiterals_;  // the guard's whole numbers past maxDim, up to kGuardDims: dims it may ask for
  std::set<int> constants_;
  std::map<int, std::vector<double>> hints_;
  DataCharacter character_ = DataCharacter::Plain;  ///< see LeafRecipe::character
  bool usesGuard_ = false;  ///< the guard counts readers: outside readers drawn often
  Graph g_;
  std::vector<Tensor> inputs_;
  std::vector<Instance::PendingData> pending_;
  std::vector<NodeRef> matched_;
  std::set<std::string> features_;
  std::vector<ValueId> values_;
  std::vector<std::optional<Attribute>> attrs_;
  std::vector<std::vector<ValueId>> built_;
  std::vector<bool> done_;
  std::set<int> inProgress_;
  int next_ = 0;
  Shape convResult_;  ///< the last Conv's result
  /// The Conv being drawn is a 1x1 projection onto convResult_.
  struct Projection {
    int64_t stride = 1, channels = 1;
  };
  std::optional<Projection> projection_;
};

}  // namespace

Expected<Instance> generateInstance(const Rule& rule, std::mt19937_64& rng, const InstanceLimits& limits, Data data) {
  try {
    Instance inst = Generator(rule, rng, limits, data).run();
    if (data == Data::Drawn) inst.drawData();
    return inst;
  } catch (const Discard& d) {
    return Error{d.why};
  } catch (const UserError& e) {
    return Error{e.message};
  }
}

}  // namespace fusec
