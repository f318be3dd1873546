/// The rule verifier; see Verify.h.
#include "fusec/driver/Verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "fusec/driver/Prove.h"
#include "fusec/codegen/Executor.h"
#include "fusec/codegen/Families.h"
#include "fusec/driver/Pipeline.h"
#include "fusec/engine/Files.h"
#include "fusec/engine/Interpreter.h"
#include "fusec/engine/Matcher.h"
#include "fusec/engine/OnnxIO.h"
#include "fusec/engine/Rewriter.h"

namespace fusec::driver {

std::string_view verdictName(RuleVerdict::Kind k) {
  switch (k) {
    case RuleVerdict::Kind::Proved: return "proved";
    case RuleVerdict::Kind::Verified: return "verified";
    case RuleVerdict::Kind::Counterexample: return "counterexample";
    case RuleVerdict::Kind::NoInstance: return "no instance";
    case RuleVerdict::Kind::NotChecked: return "not checked";
  }
  return "?";
}

namespace {

using Rng = std::mt19937_64;
using Clock = std::chrono::steady_clock;

/// What checking one instance gave.
struct Outcome {
  /// NotForTarget: the guard excludes the target whatever the graph.
  enum class Kind { Discarded, Passed, Failed, Refused, NotForTarget } kind = Kind::Discarded;
  std::string why;
  std::vector<Tensor> want, got;
};

Outcome discarded(std::string why) { return {Outcome::Kind::Discarded, std::move(why), {}, {}}; }

/// The rule alone, with the catalog: the rewriter and planner see nothing else.
std::unique_ptr<RuleSet> alone(const RuleSet& rules, const Rule& rule) {
  auto set = std::make_unique<RuleSet>();
  set->catalog = rules.catalog;
  set->rules = {rule};
  set->packs = rules.packs;
  return set;
}

/// Simulated rounding: every float64 element times (1 + u * eps), u
/// uniform in [-1, 1]. Continuous, so two such errors never cancel exactly
/// (steps of one ulp do, half the time). In float32 (graphs with an op that
/// has no float64 kernel) each element moves by eps times its scale in a
/// random direction, rounded stochastically to a neighbouring float and by
/// at least one ulp: rounding to nearest would take a move under half an
/// ulp back to where it started, and the simulated error would vanish (a
/// BatchNorm of values near 3000 then looked exact in a run in three).
void jitter(Tensor& t, double eps, Rng& rng, const Tensor* magnitude = nullptr) {
  std::uniform_real_distribution<double> u(-1, 1), coin(0, 1);
  auto scaleAt = [&](double x, int64_t i) { return magnitude ? magnitude->scalarAt(i) : std::fabs(x); };
  if (t.dtype() == DType::Float64) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      double& x = t.data<double>()[i];
      x += u(rng) * eps * scaleAt(x, i);
    }
  } else if (t.dtype() == DType::Float32) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      float& x = t.data<float>()[i];
      if (!std::isfinite(x)) continue;
      const bool upward = coin(rng) < 0.5;
      const double target = x + (upward ? 1 : -1) * eps * scaleAt(x, i);
      float lo = static_cast<float>(target);
      if (static_cast<double>(lo) > target) lo = std::nextafter(lo, -INFINITY);
      const float hi = std::nextafter(lo, INFINITY);
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      float moved = coin(rng) < (target - lo) / (static_cast<double>(hi) - lo) ? hi : lo;
      if (moved == x && x != 0) moved = std::nextafter(x, upward ? INFINITY : -INFINITY);
      x = moved;
    }
  }
}

/// Ops whose result is a sum of many products of their operands.
bool accumulates(const std::string& op) {
  static const std::set<std::string> ops = {"Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "ReduceSum", "ReduceMean"};
  return ops.count(op) > 0;
}

/// Whether a scalar expression is built only of operations IEEE arithmetic
/// rounds exactly once, to one result on every device: sums and
/// differences, comparisons, min, max, select, abs and rounding to integers.
/// Products are not (OpenCL C may contract `a * b + c` into one fused
/// multiply-add), nor are quotients, square roots and transcendental
/// functions (OpenCL allows them a few ulp), nor sums of many terms (their
/// order is free).
bool exactSemantics(const ScalarExpr& e) {
  using K = ScalarExpr::Kind;
  static const std::set<std::string> exactOps = {"+",  "-",  "<",   ">",   "<=",  ">=",    "==",   "!=",    "and",  "or",
                                                 "not", "min", "max", "select", "abs", "floor", "ceil", "round", "trunc",
                                                 "sign", "isnan", "isinf"};
  if ((e.kind == K::Unary || e.kind == K::Binary || e.kind == K::Call) && !exactOps.count(e.op)) return false;
  for (const ScalarExpr& a : e.args)
    if (!exactSemantics(a)) return false;
  return true;
}

/// Whether every float evaluation of node `n` gives the same result: its
/// op's semantics is exact (above), or it only moves data (injective ops but
/// an interpolating Resize).
bool roundsExactly(const Graph& g, NodeRef n, const OpCatalog& catalog) {
  const NodeData& d = g.node(n);
  const OpDef* op = d.domain.empty() ? catalog.find(d.op.str()) : nullptr;
  if (!op) return false;
  if (op->kind == OpKind::Injective) return d.op != "Resize" || d.attrString("mode", "nearest") == "nearest";
  return (op->kind == OpKind::Elementwise || op->kind == OpKind::Broadcast) && op->semantics &&
         exactSemantics(*op->semantics);
}

/// |t| element by element (float64), for magnitude runs.
Tensor absolute(const Tensor& t) {
  Tensor out = t;
  if (t.dtype() == DType::Float64)
    for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] = std::fabs(out.data<double>()[i]);
  else if (t.dtype() == DType::Float32)
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = std::fabs(out.data<float>()[i]);
  return out;
}

/// The graph in double precision: float32 values, constants and casts to
/// float32 become float64, so rounding can be simulated finer than it happens.
Graph promoted(const Graph& g) {
  Graph h = g.clone();
  for (size_t v = 0; v < h.valueCapacity(); ++v) {
    Value& val = h.value(static_cast<ValueId>(v));
    if (val.type.dtype != DType::Float32) continue;
    val.type.dtype = DType::Float64;
    if (val.constant) val.constant = std::make_shared<const Tensor>(val.constant->castTo(DType::Float64));
  }
  for (NodeRef n : h.nodes())
    for (const char* attr : {"to", "dtype"})
      if (const Attribute* a = h.node(n).attr(attr); a && std::get_if<int64_t>(a) &&
                                                     std::get<int64_t>(*a) == static_cast<int64_t>(DType::Float32))
        h.node(n).attrs[attr] = static_cast<int64_t>(DType::Float64);
  return h;
}

/// Per output element: how far the graph's result moves when every node
/// result that another correct evaluation could round differently (a sum in
/// another order, a product contracted into a multiply-add, a function a few
/// ulp off; not an exactly rounded sum or a data movement, not the inputs and
/// constants, which are given) is rounded once more. The largest move over
/// three runs, measured in double precision. Infinite where a finite result
/// can become NaN or infinite. `(a + b) - b` thus has no noise: rewriting it
/// to `a` changes what every device computes for it.
std::vector<std::vector<double>> roundingNoise(const Graph& g, const std::vector<Tensor>& inputs,
                                               const OpCatalog& catalog, Rng& rng) {
  bool single = false;
  for (size_t v = 0; v < g.valueCapacity(); ++v) single |= g.value(static_cast<ValueId>(v)).type.dtype == DType::Float32;
  const double eps = single ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
  Graph h = promoted(g);
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) in.push_back(t.dtype() == DType::Float32 ? t.castTo(DType::Float64) : t);
  Expected<std::vector<Tensor>> clean = runGraph(h, in, &catalog);
  if (!clean) {  // an op without a float64 kernel: simulate in the graph's own precision
    h = g.clone();
    in = inputs;
    clean = runGraph(h, in, &catalog);
  }
  std::vector<std::vector<double>> noise;
  if (!clean) return noise;
  for (const Tensor& t : clean.value()) noise.emplace_back(static_cast<size_t>(t.numel()), 0.0);
  for (int run = 0; run < 3; ++run) {
    Expected<std::vector<Tensor>> noisy =
        runGraph(h, in, &catalog, [&](NodeRef n, const std::vector<const Tensor*>& operands, std::vector<Tensor>& results) {
          if (roundsExactly(h, n, catalog)) return;
          // A sum of many terms rounds at the scale of its terms, not of its
          // result (3000x - 3000x): for the ops that accumulate, the error is
          // drawn against the same op over the terms' magnitudes.
          // Every other op is evaluated as a backward-stable kernel would
          // compute it: exactly, on operands each rounded once more, then
          // rounded (a LayerNorm of values near 10^4 moves by their ulp over
          // the deviation, whatever order its mean is summed in).
          // The node evaluated again on operands each transformed by `f`;
          // nullopt where that gives results of other shapes.
          auto evaluatedOn = [&](const std::function<Tensor(const Tensor&)>& f) -> std::optional<std::vector<Tensor>> {
            std::vector<Tensor> changed;
            std::vector<const Tensor*> ptrs;
            for (const Tensor* t : operands) changed.push_back(t ? f(*t) : Tensor());
            for (size_t i = 0; i < changed.size(); ++i) ptrs.push_back(operands[i] ? &changed[i] : nullptr);
            Expected<std::vector<Tensor>> m = evaluateNode(h, n, ptrs, &catalog);
            if (!m || m->size() != results.size() ||
                !std::equal(m->begin(), m->end(), results.begin(),
                            [](const Tensor& a, const Tensor& b) { return a.shape() == b.shape(); }))
              return std::nullopt;
            return std::move(m.value());
          };
          if (accumulates(h.node(n).op.str()) && results.size() == 1)
            if (std::optional<std::vector<Tensor>> m = evaluatedOn(absolute)) {
              jitter(results[0], eps, rng, &(*m)[0]);
              return;
            }
          if (std::optional<std::vector<Tensor>> m = evaluatedOn([&](const Tensor& t) {
                Tensor moved = t;
                jitter(moved, eps, rng);
                return moved;
              }))
            results = std::move(*m);
          for (Tensor& t : results) jitter(t, eps, rng);
        });
    if (!noisy) continue;
    for (size_t o = 0; o < noise.size() && o < noisy->size(); ++o)
      for (int64_t i = 0; i < clean.value()[o].numel() && i < (*noisy)[o].numel(); ++i) {
        const double c = clean.value()[o].scalarAt(i), n = (*noisy)[o].scalarAt(i);
        if (std::isnan(c) && std::isnan(n)) continue;
        const double d = std::isfinite(c) && std::isfinite(n) ? std::fabs(n - c)
                         : (c == n) ? 0.0 : std::numeric_limits<double>::infinity();
        noise[o][static_cast<size_t>(i)] = std::max(noise[o][static_cast<size_t>(i)], d);
      }
  }
  // Three draws estimate each element's sensitivity with luck: a row of
  // three LayerNorm inputs all moved the same way keeps its deviations, and
  // its elements look exact. Each element's allowance is at least its
  // output's median (0 where the ops round exactly, as before).
  for (std::vector<double>& n : noise) {
    std::vector<double> finite;
    for (double d : n)
      if (std::isfinite(d)) finite.push_back(d);
    if (finite.empty()) continue;
    std::nth_element(finite.begin(), finite.begin() + static_cast<std::ptrdiff_t>(finite.size() / 2), finite.end());
    const double median = finite[finite.size() / 2];
    for (double& d : n) d = std::max(d, median);
  }
  return noise;
}

std::string formatNumber(double x) {
  if (std::isnan(x)) return "nan";
  std::ostringstream os;
  os.precision(7);
  os << x;
  return os.str();
}

std::string formatTensor(const Tensor& t, int64_t limit = 24) {
  std::string s = std::string(dtypeName(t.dtype())) + "[";
  for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? "," : "") + std::to_string(t.shape()[i]);
  s += "] {";
  for (int64_t i = 0; i < t.numel() && i < limit; ++i) s += (i ? ", " : "") + formatNumber(t.scalarAt(i));
  if (t.numel() > limit) s += ", ... (" + std::to_string(t.numel()) + " in all)";
  return s + "}";
}

/// Element-by-element comparison with the noise allowance of Verify.h:
/// `noise[i]` is the allowance for element i's rounding sensitivity, from
/// the graph before the rule (empty when unknown).
std::string compare(const std::string& name, const Tensor& got, const Tensor& want, const std::vector<double>& noise,
                    const Tolerance& tol) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return "output `" + name + "` is " + formatTensor(got, 0) + " after the rule, " + formatTensor(want, 0) + " before";
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::isfinite(want.scalarAt(i))) scale = std::max(scale, std::fabs(want.scalarAt(i)));
  const bool exact = !isFloatingPoint(want.dtype());
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.scalarAt(i), g = got.scalarAt(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (w == g) continue;
    double bound = exact ? 0 : tol.atol + tol.rtol * scale;
    if (!exact && static_cast<size_t>(i) < noise.size()) bound += 8 * noise[static_cast<size_t>(i)];
    if (std::fabs(g - w) <= bound) continue;
    if (std::isnan(g) != std::isnan(w))
      return "output `" + name + "` element " + std::to_string(i) + ": " + formatNumber(g) + " after the rule, " +
             formatNumber(w) + " before";
    return "output `" + name + "` element " + std::to_string(i) + ": " + formatNumber(g) + " after the rule, " +
           formatNumber(w) + " before (allowed difference " + formatNumber(bound) + ")";
  }
  return "";
}

/// Where `after` names the model's inputs or outputs differently from
/// `before`, what changed: a rule must keep a model's interface (its names
/// are what callers pass and read).
std::string interfaceChange(const Graph& before, const Graph& after) {
  auto names = [](const Graph& g, const std::vector<ValueId>& vs) {
    std::vector<std::string> out;
    for (ValueId v : vs) out.push_back(g.value(v).name);
    return out;
  };
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& n : v) s += (s.empty() ? "`" : ", `") + n + "`";
    return "(" + s + ")";
  };
  for (const bool inputs : {true, false}) {
    const auto b = names(before, inputs ? before.inputs() : before.outputs());
    const auto a = names(after, inputs ? after.inputs() : after.outputs());
    if (a != b)
      return std::string("the graph's ") + (inputs ? "inputs" : "outputs") + " " + list(b) + " become " + list(a) +
             ": a rule must keep a model's input and output names";
  }
  return "";
}

/// Counterexamples of different kinds one rule reports at most.
constexpr size_t kMaxDefects = 3;

/// Instances that each choice a rule's draws make is checked in, at least
/// (within the extra instances' budget): a rewrite rule's instances are
/// cheap, a fusion rule's build kernels.
constexpr int kCoverings = 10, kFusionCoverings = 2;

/// Draws in a row that the family refuses, with no instance checked yet,
/// after which a fusion rule is reported as refused.
constexpr int kRefusalsBeforeGivingUp = 24;

class RuleChecker {
 public:
  RuleChecker(const RuleSet& rules, const Rule& rule, const VerifyOptions& options)
      : rules_(rules), rule_(rule), options_(options), single_(alone(rules, rule)), matcher_(*single_, options.target) {
    unguarded_ = rule;
    unguarded_.guard.reset();
    // Kernels flush subnormals (kKernelBuildOptions): a fusion rule's
    // instances hold none, where the interpreter would keep them.
    limits_.subnormals = rule.kind != Rule::Kind::Fusion;
    if (rule.kind == Rule::Kind::Fusion && options.target) {
      // Every group the rule forms is worth fusing: the check is of the
      // kernel, not of the cost model's choice.
      eager_ = *options.target;
      eager_.launchOverhead = 1.0;
      if (options.device) kernelOptions_ = codegen::KernelOptions::forDevice(eager_, options.device->info());
    }
  }

  RuleVerdict run() {
    RuleVerdict v;
    v.rule = &rule_;
    const auto start = Clock::now();
    const bool fusion = rule_.kind == Rule::Kind::Fusion;
    if (fusion && !options_.device) {
      v.kind = RuleVerdict::Kind::NotChecked;
      v.detail = "no OpenCL device to run its kernels on";
      return v;
    }
    ProofResult proof;
    if (!fusion && options_.prove) {
      proof = proveRewrite(rule_);
      if (proof.proved) v.kind = RuleVerdict::Kind::Proved;
      v.detail = proof.detail;
    }
    const int wanted = fusion ? options_.fusionInstances : options_.instances;
    const int maxDraws = wanted * (fusion ? options_.fusionDrawsPerInstance : options_.drawsPerInstance);
    Rng rng(options_.seed ^ std::hash<std::string>{}(rule_.name));
    std::map<std::string, int> discards, refusals;
    std::map<std::string, int> covered;  // the choices of the instances checked, how often
    // First, instances holding the values where Z3 separates the two sides
    // over the reals: if float arithmetic separates them too, that is the
    // counterexample.
    if (!proof.witness.empty()) {
      InstanceLimits at = limits_;
      at.witness = proof.witness;
      constexpr int kWitnessInstances = 8;
      for (int d = 0, checked = 0; checked < kWitnessInstances && d < 100 * kWitnessInstances; ++d) {
        ++v.draws;
        Expected<Instance> inst = generateInstance(rule_, rng, at, Data::Deferred);
        if (!inst) continue;
        Staged st(std::move(inst.value()));
        if (std::optional<Outcome> o = stage(st); o && o->kind != Outcome::Kind::Failed) continue;
        ++checked;
        if (checkStaged(st, v, covered, rng, wanted)) break;
      }
      if (!v.counterexample) v.detail += " (instances holding them agree in float arithmetic)";
    }
    bool stop = v.counterexample && 1 + v.others.size() >= kMaxDefects;
    while (!stop && v.instances < wanted && v.draws < maxDraws) {
      // A fusion rule stages the instances still wanted (drawn, accepted,
      // compiled), then builds all their kernels at once, in parallel where
      // the device has build helpers, and runs them; a rewrite rule checks
      // each instance as it is drawn.
      std::vector<Staged> batch;
      const size_t room = fusion ? static_cast<size_t>(wanted - v.instances) : 1;
      while (batch.size() < room && v.draws < maxDraws) {
        ++v.draws;
        Expected<Instance> inst = generateInstance(rule_, rng, limits_, Data::Deferred);
        if (!inst) {
          ++discards[inst.error().message];
          continue;
        }
        Staged st(std::move(inst.value()));
        if (std::optional<Outcome> o = stage(st); o && o->kind != Outcome::Kind::Failed) {
          if (o->kind == Outcome::Kind::NotForTarget) {
            v.kind = RuleVerdict::Kind::NotChecked;
            v.detail = "it never applies to target `" + options_.target->name + "`: " + o->why;
            v.seconds = std::chrono::duration<double>(Clock::now() - start).count();
            return v;
          }
          if (o->kind == Outcome::Kind::Refused) {
            ++v.refused;
            ++refusals[o->why];
            ++discards["the family refused the group: " + o->why];
            // A family that has refused every group of the first draws
            // refuses the rule's groups by their shape (more buffers than a
            // kernel takes): more draws would only cost time.
            if (v.instances == 0 && batch.empty() && v.refused >= kRefusalsBeforeGivingUp) {
              stop = true;
              break;
            }
            continue;
          }
          ++discards[o->why];
          continue;
        }
        batch.push_back(std::move(st));
      }
      if (batch.size() > 1) {
        codegen::Device::Sources sources;
        for (const Staged& st : batch) sources.insert(sources.end(), st.sources.begin(), st.sources.end());
        // A kernel that does not build fails its own instance below, with its log.
        (void)options_.device->prepare(sources);
      }
      for (Staged& st : batch) {
        if (checkStaged(st, v, covered, rng, wanted)) {
          stop = true;
          break;
        }
      }
    }
    // Then draws until the checked instances cover every choice the draws
    // made that the rule accepts (an element type, an alternative, an
    // optional operand absent, a flag's other value) kCoverings times: a
    // choice that only some draws make gets its instances, whatever the
    // seed (more than one: a choice may be wrong only with others, as
    // keepdims 0 on rank 1 is not). Draws are cheap; checks are counted.
    const int extraChecks = fusion ? 4 : 2 * wanted;
    const int extraDraws = wanted * (fusion ? 400 : 100);
    for (int d = 0, checked = 0; !stop && v.instances > 0 && checked < extraChecks && d < extraDraws; ++d) {
      ++v.draws;
      Expected<Instance> inst = generateInstance(rule_, rng, limits_, Data::Deferred);
      auto known = [&](const std::set<std::string>& choices) {
        return std::all_of(choices.begin(), choices.end(), [&](const std::string& f) {
          auto it = covered.find(f);
          return it != covered.end() && it->second >= (fusion ? kFusionCoverings : kCoverings);
        });
      };
      if (!inst || (known(inst->features) && known(guardBranchesOf(*inst)))) continue;
      Staged st(std::move(inst.value()));
      if (std::optional<Outcome> o = stage(st); o && o->kind != Outcome::Kind::Failed) continue;
      if (!st.sources.empty()) (void)options_.device->prepare(st.sources);
      ++checked;
      stop = checkStaged(st, v, covered, rng, wanted);
    }
    for (const auto& [choice, times] : covered) v.covered.push_back(choice);
    if (!refusals.empty())
      v.refusal = std::max_element(refusals.begin(), refusals.end(), [](const auto& a, const auto& b) {
                    return a.second < b.second;
                  })->first;
    // A proof is over the reals: it never ends a rule's check alone. Without
    // an instance (a guard nothing drawn satisfies) the rule is unchecked in
    // float32, where kernels compute: "no instance", as for any rule.
    const bool provedAndRun = v.kind == RuleVerdict::Kind::Proved && v.instances > 0;
    if (v.kind != RuleVerdict::Kind::Counterexample && !provedAndRun) {
      if (v.instances > 0) v.kind = RuleVerdict::Kind::Verified;
      else if (v.refused > 0) {
        // It never fuses anything: planning refuses every group it forms.
        v.kind = RuleVerdict::Kind::NotChecked;
        v.detail = "the family refuses every group it forms (" + std::to_string(v.refused) + " drawn), so it changes no model: " + v.refusal;
      } else {
        v.kind = RuleVerdict::Kind::NoInstance;
        auto commonest = std::max_element(discards.begin(), discards.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
        v.detail = commonest == discards.end() ? "no draw was made" : commonest->first;
      }
    }
    v.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return v;
  }

 private:
  /// The rule's match that covers exactly the instance's nodes; when there
  /// is none, why (the first guard conjunct that fails, located).
  std::optional<Match> matchWhole(const Graph& g, const std::vector<NodeRef>& nodes, std::string& why,
                                  bool& targetOnly) const {
    const std::set<NodeRef> want(nodes.begin(), nodes.end());
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      MatchFailure failure;
      std::optional<Match> m = matcher_.matchAt(g, *it, rule_, &failure);
      if (m) {
        const std::vector<NodeRef> all = m->allNodes();
        if (std::set<NodeRef>(all.begin(), all.end()) == want) return m;
        why = "the rule matches only part of the drawn graph";
        continue;
      }
      if (std::optional<Match> bare = matcher_.matchAt(g, *it, unguarded_)) {
        const RuleExpr* failing = failingConjunct(g, *bare, *rule_.guard);
        if (failing) {
          why = "the guard at " + failing->loc.str() + " is false";
          targetOnly = readsOnlyTarget(*failing);
        }
        return std::nullopt;
      }
      if (why.empty()) why = failure.reason;
    }
    if (why.empty()) why = "the pattern does not match the drawn graph";
    return std::nullopt;
  }

  /// Which sides of the guard's `or`s hold on `m` (`guard at 12:9: left`,
  /// `... right`): choices the instances should cover as they cover the
  /// pattern's, so that each way a guard can be true is checked.
  std::set<std::string> guardBranches(const Graph& g, const Match& m) const {
    std::set<std::string> out;
    std::function<void(const RuleExpr&)> walk = [&](const RuleExpr& e) {
      if (e.kind == RuleExpr::Kind::Binary && e.text == "or" && e.args.size() == 2)
        for (int side = 0; side < 2; ++side) {
          std::optional<double> holds = matcher_.evaluate(g, m, e.args[static_cast<size_t>(side)]);
          if (holds && *holds != 0) out.insert("guard `or` at " + e.loc.str() + ": " + (side ? "right" : "left") + " side true");
        }
      for (const RuleExpr& a : e.args) walk(a);
    };
    if (rule_.guard) walk(*rule_.guard);
    return out;
  }

  /// The branches of the guard's `or`s a draw takes, when it matches whole
  /// (none when it does not).
  std::set<std::string> guardBranchesOf(const Instance& inst) const {
    std::string why;
    bool targetOnly = false;
    std::optional<Match> m = matchWhole(inst.graph, inst.matched, why, targetOnly);
    return m ? guardBranches(inst.graph, *m) : std::set<std::string>{};
  }

  /// The first conjunct of the guard that does not hold on `m`.
  const RuleExpr* failingConjunct(const Graph& g, const Match& m, const RuleExpr& e) const {
    if (e.kind == RuleExpr::Kind::Binary && e.text == "and") {
      const RuleExpr* left = failingConjunct(g, m, e.args[0]);
      return left ? left : failingConjunct(g, m, e.args[1]);
    }
    std::optional<double> ok = matcher_.evaluate(g, m, e);
    return ok && *ok != 0 ? nullptr : &e;
  }

  /// A condition on the target alone (`target.has("int8")`): no graph can change it.
  static bool readsOnlyTarget(const RuleExpr& e) {
    if (e.kind == RuleExpr::Kind::Binding || e.kind == RuleExpr::Kind::NodeAttr) return false;
    for (const RuleExpr& a : e.args)
      if (!readsOnlyTarget(a)) return false;
    return true;
  }

  /// The rule's own `tolerance { }`, else the caller's, else the default.
  Tolerance tolerance() const {
    // OpenCL C's built-in functions are allowed a few ulp (exp, erf, tanh);
    // the interpreter's are the C library's.
    Tolerance t = rule_.kind == Rule::Kind::Fusion ? Tolerance::verifyFusion() : Tolerance::verifyRewrite();
    if (options_.tolerance) t = *options_.tolerance;
    if (rule_.atol) t.atol = *rule_.atol;
    if (rule_.rtol) t.rtol = *rule_.rtol;
    return t;
  }

  /// An instance on its way through check(): accepted by the rule, its
  /// reference outputs computed and, for a fusion rule, compiled with the
  /// rule; what is left is running what the rule made of it.
  struct Staged {
    explicit Staged(Instance i) : inst(std::move(i)) {}
    Instance inst;
    std::vector<Tensor> want;
    std::optional<Outcome> early;        ///< failed before anything ran (a compile error)
    std::unique_ptr<Compiled> compiled;  ///< fusion rules
    codegen::Device::Sources sources;    ///< the kernels a run of `compiled` builds
  };

  /// The first half of check(): draws the instance's data once the rule's
  /// match and guard accept it, runs the interpreter and compiles a fusion
  /// rule's kernels (not built yet). An outcome when the instance is
  /// decided here: discarded, refused, not for the target; a failure is
  /// kept in `st.early` and reported by finish().
  std::optional<Outcome> stage(Staged& st) const {
    Instance& inst = st.inst;
    std::string why;
    bool targetOnly = false;
    std::optional<Match> m = matchWhole(inst.graph, inst.matched, why, targetOnly);
    if (!m) return targetOnly ? Outcome{Outcome::Kind::NotForTarget, why, {}, {}} : discarded(why);
    const std::set<std::string> branches = guardBranches(inst.graph, *m);
    inst.features.insert(branches.begin(), branches.end());
    inst.drawData();
    Expected<std::vector<Tensor>> want = runGraph(inst.graph, inst.inputs, &rules_.catalog);
    if (!want) return discarded("the interpreter refuses the drawn graph: " + want.error().message);
    st.want = std::move(want.value());
    if (rule_.kind != Rule::Kind::Fusion) return std::nullopt;
    std::optional<Outcome> o = compileFused(st);
    if (o && o->kind == Outcome::Kind::Failed) {
      o->want = st.want;
      st.early = std::move(o);
      return st.early;
    }
    return o;
  }

  Outcome check(Staged& st, Rng& rng) const {
    if (std::optional<Outcome> o = stage(st)) return *o;
    return finish(st, rng);
  }

  /// The second half of check(): runs the rewritten graph or the fused
  /// kernels and compares their outputs with the interpreter's.
  Outcome finish(Staged& st, Rng& rng) const {
    if (st.early) return *st.early;
    const Instance& inst = st.inst;
    const OpCatalog& catalog = rules_.catalog;
    std::optional<Outcome> early;  // rewrite rules: decided before anything ran
    std::optional<Graph> after;    // rewrite rules: the graph the rule left
    Expected<std::vector<Tensor>> got = rule_.kind == Rule::Kind::Fusion ? runFused(st) : rewritten(inst, early, after);
    if (early) {
      if (early->kind == Outcome::Kind::Failed) early->want = std::move(st.want);
      return *early;
    }
    Outcome o;
    o.want = std::move(st.want);
    if (!got) {
      o.kind = Outcome::Kind::Failed;
      o.why = got.error().message;
      return o;
    }
    o.got = std::move(got.value());
    // Rounding sensitivity of the graph before the rule, twice (the graph
    // before and what runs after, were it as well conditioned): the
    // instance's own conditioning. Never the rewritten graph's: a rewrite
    // that makes the computation more sensitive than it was (a one-pass
    // variance `E[x²] − E[x]²` at a large offset) is blamed, not excused by
    // the sensitivity it introduced.
    std::vector<std::vector<double>> noise = roundingNoise(inst.graph, inst.inputs, catalog, rng);
    for (std::vector<double>& n : noise)
      for (double& x : n) x *= 2;
    for (size_t i = 0; i < o.want.size(); ++i) {
      std::string diff = compare(inst.graph.value(inst.graph.outputs()[i]).name, o.got[i], o.want[i],
                                 i < noise.size() ? noise[i] : std::vector<double>{}, tolerance());
      if (!diff.empty()) {
        o.kind = Outcome::Kind::Failed;
        o.why = diff;
        return o;
      }
    }
    o.kind = Outcome::Kind::Passed;
    return o;
  }

  /// Rewrite rules: the interpreter after the rule has rewritten the graph
  /// (left in `rewrittenGraph`).
  Expected<std::vector<Tensor>> rewritten(const Instance& inst, std::optional<Outcome>& o,
                                          std::optional<Graph>& rewrittenGraph) const {
    Graph after = inst.graph.clone();
    Expected<RewriteStats> stats = rewriteToFixpoint(after, *single_, options_.target);
    if (!stats) {
      o = Outcome{Outcome::Kind::Failed, "the rewrite fails: " + stats.error().message, {}, {}};
      return stats.error();
    }
    if (stats->rewrites == 0) {
      o = discarded("the rule did not fire on the drawn graph");
      return Error{o->why};
    }
    if (stats->capHit) {
      o = Outcome{Outcome::Kind::Failed, "the rule fires again on its own result, without end", {}, {}};
      return Error{o->why};
    }
    eliminateDeadCode(after);
    if (std::string changed = interfaceChange(inst.graph, after); !changed.empty()) {
      o = Outcome{Outcome::Kind::Failed, changed, {}, {}};
      return Error{changed};
    }
    Expected<std::vector<Tensor>> out = runGraph(after, inst.inputs, &rules_.catalog);
    rewrittenGraph = std::move(after);
    return out;
  }

  /// Fusion rules, first half: the instance compiled with the rule's
  /// family, and the kernels a run of it builds. An outcome when no group
  /// forms (discarded or refused) or compiling fails.
  std::optional<Outcome> compileFused(Staged& st) const {
    const Instance& inst = st.inst;
    PipelineOptions options;
    options.rewrite = false;
    options.generate = true;
    Expected<std::unique_ptr<Compiled>> compiled = compile(inst.graph.clone(), *single_, eager_, options);
    if (!compiled) return Outcome{Outcome::Kind::Failed, "compiling with the rule fails: " + compiled.error().message, {}, {}};
    const Compiled& c = *compiled.value();
    if (std::string changed = interfaceChange(inst.graph, c.graph); !changed.empty())
      return Outcome{Outcome::Kind::Failed, changed, {}, {}};
    const bool grouped = std::any_of(c.plan.groups.begin(), c.plan.groups.end(),
                                     [&](const Group& g) { return g.rule && g.rule->name == rule_.name; });
    if (!grouped && inst.matched.size() == 1) return discarded("one node: nothing to fuse");
    if (!grouped && c.graph.numNodes() < inst.graph.numNodes())
      return discarded("part of the drawn graph folds to constants at compile time");
    if (!grouped) {
      std::string why = "no group formed";
      for (const Candidate& cand : c.plan.candidates)
        if (cand.status != Candidate::Status::Chosen && !cand.why.empty()) why = cand.why;
      return Outcome{Outcome::Kind::Refused, why, {}, {}};
    }
    if (Expected<codegen::Schedule> s = codegen::DeviceProgram::scheduleFor(*options_.device, c.graph, c.groups,
                                                                          rules_.catalog, kernelOptions_))
      for (const codegen::KernelSource& k : s->kernels) st.sources.emplace_back(k.source, k.name);
    st.compiled = std::move(compiled.value());
    return std::nullopt;
  }

  /// Fusion rules, second half: the kernels run on OpenCL.
  Expected<std::vector<Tensor>> runFused(const Staged& st) const {
    const Compiled& c = *st.compiled;
    Expected<codegen::DeviceRun> run =
        codegen::runOnDevice(*options_.device, c.graph, c.groups, rules_.catalog, st.inst.inputs, kernelOptions_);
    if (!run) return Error{"the fused kernels fail to run: " + run.error().message};
    return std::move(run->outputs);
  }

  /// What kind of defect a failure shows: the class of its result's element
  /// type (float, integer, bool) and its message up to the first number,
  /// without names, and whether it involves NaN or inf (a NaN where a
  /// number was expected, a value off, a rewrite that fails, a kernel that
  /// does not build). Failures of one kind are one defect, reported once.
  static std::string defectKind(const Instance& inst, const std::string& error) {
    const DType t = inst.graph.outputs().empty() ? DType::Undefined : inst.graph.value(inst.graph.outputs()[0]).type.dtype;
    std::string kind = isFloatingPoint(t) ? "float|" : t == DType::Bool ? "bool|" : "integer|";
    // The message up to its first number, names left out; then whether a
    // NaN or an infinity is involved.
    const std::string line = error.substr(0, error.find('\n'));
    bool quoted = false;
    for (char c : line) {
      if (std::isdigit(static_cast<unsigned char>(c))) break;
      if (c == '`') quoted = !quoted;
      else if (!quoted) kind += c;
    }
    if (line.find("nan") != std::string::npos) kind += "|nan";
    if (line.find("inf") != std::string::npos) kind += "|inf";
    return kind;
  }

  /// Runs a staged instance and counts it. A failure of a kind not seen
  /// before is shrunk and kept (the first as the counterexample, others
  /// after it); true once kMaxDefects are kept.
  bool checkStaged(Staged& st, RuleVerdict& v, std::map<std::string, int>& covered, Rng& rng, int wanted) {
    Outcome o = finish(st, rng);
    ++v.instances;
    for (const std::string& f : st.inst.features) ++covered[f];
    if (options_.progress) options_.progress(rule_, std::min(v.instances, wanted), wanted);
    if (o.kind != Outcome::Kind::Failed || !defectsSeen_.insert(defectKind(st.inst, o.why)).second) return false;
    Counterexample c = shrink(Counterexample{std::move(st.inst), std::move(o.want), std::move(o.got), o.why, {}}, rng);
    c.keptConstants = constantsToKeep(c.instance);
    v.kind = RuleVerdict::Kind::Counterexample;
    if (!v.counterexample) v.counterexample = std::move(c);
    else v.others.push_back(std::move(c));
    return 1 + v.others.size() >= kMaxDefects;
  }

  /// The constants of an instance that must stay constants for the rule to
  /// fire: those the guard reads (const(), value()) and the operands an op
  /// takes only as constants (the catalog's `static`: a Reshape's shape).
  std::set<ValueId> constantsToKeep(const Instance& inst) const {
    std::set<ValueId> keep;
    const Graph& g = inst.graph;
    for (NodeRef n : g.nodes()) {
      const NodeData& d = g.node(n);
      const OpDef* op = d.domain.empty() ? rules_.catalog.find(d.op.str()) : nullptr;
      for (size_t i = 0; op && i < d.inputs.size() && i < op->params.size(); ++i)
        if (op->params[i].staticValue && d.inputs[i] != kNoValue) keep.insert(d.inputs[i]);
    }
    std::string why;
    bool targetOnly = false;
    if (!rule_.guard) return keep;
    std::optional<Match> m = matchWhole(g, inst.matched, why, targetOnly);
    std::function<void(const RuleExpr&)> read = [&](const RuleExpr& e) {
      if (e.kind == RuleExpr::Kind::Builtin && (e.text == "const" || e.text == "value"))
        for (const RuleExpr& a : e.args)
          if (a.kind == RuleExpr::Kind::Binding && a.binding >= 0 && m && static_cast<size_t>(a.binding) < m->values.size() &&
              m->values[static_cast<size_t>(a.binding)] != kNoValue)
            keep.insert(m->values[static_cast<size_t>(a.binding)]);
      for (const RuleExpr& a : e.args) read(a);
    };
    read(*rule_.guard);
    return keep;
  }

  /// A smaller instance that fails too: draws under tighter limits,
  /// smallest first, keeping the smallest failure found. High ranks with
  /// dims of 1 and 2 come before larger dims: a guard on rank 4 or a Conv
  /// (rank 3 to 5) is met by 16 or 32 elements, not by 4^4.
  Counterexample shrink(Counterexample found, Rng& rng) const {
    const bool fusion = rule_.kind == Rule::Kind::Fusion;
    const std::vector<InstanceLimits> ladder = {{1, 1, 1, true},  {2, 2, 1, true},  {2, 2, 1, false}, {4, 1, 1, true},
                                                {5, 1, 1, true},  {4, 1, 1, false}, {5, 1, 1, false}, {3, 3, 2, true},
                                                {3, 3, 2, false}, {4, 4, 3, false}};
    const int drawsPerLevel = fusion ? 40 : 300;
    int checks = fusion ? 12 : 400;
    for (InstanceLimits limits : ladder) {
      limits.subnormals = limits_.subnormals;
      for (int d = 0; d < drawsPerLevel && checks > 0; ++d) {
        Expected<Instance> inst = generateInstance(rule_, rng, limits, Data::Deferred);
        if (!inst || inst->size() >= found.instance.size()) continue;
        --checks;
        Staged st(std::move(inst.value()));
        Outcome o = check(st, rng);
        if (o.kind != Outcome::Kind::Failed) continue;
        found = Counterexample{std::move(st.inst), std::move(o.want), std::move(o.got), o.why, {}};
      }
      if (found.instance.size() <= 2 * static_cast<int64_t>(found.instance.matched.size()) + 8) break;
    }
    return found;
  }

  const RuleSet& rules_;
  const Rule& rule_;
  const VerifyOptions& options_;
  std::unique_ptr<RuleSet> single_;
  Matcher matcher_;
  Rule unguarded_;
  InstanceLimits limits_;
  std::set<std::string> defectsSeen_;  ///< defectKind of each failure kept
  Target eager_;
  codegen::KernelOptions kernelOptions_;  ///< fusion rules' kernels on the device
};

}  // namespace

std::vector<RuleVerdict> verifyRules(const RuleSet& rules, const VerifyOptions& options,
                                     const std::vector<std::string>& only) {
  std::vector<RuleVerdict> out;
  for (const Rule& rule : rules.rules) {
    if (!only.empty() && std::find(only.begin(), only.end(), rule.name) == only.end()) continue;
    out.push_back(RuleChecker(rules, rule, options).run());
  }
  return out;
}

std::string describeCounterexample(const RuleVerdict& v) {
  if (!v.counterexample) return "";
  std::string out = describeCounterexample(v, *v.counterexample);
  for (const Counterexample& c : v.others) out += describeCounterexample(v, c);
  return out;
}

std::string describeCounterexample(const RuleVerdict& v, const Counterexample& c) {
  const Graph& g = c.instance.graph;
  std::ostringstream os;
  os << v.rule->loc.str() << ": rule `" << v.rule->name << "`: counterexample: " << c.error << "\n";
  os << "  the graph (ONNX text):\n";
  std::istringstream text(exportOnnxText(g));
  for (std::string line; std::getline(text, line);) os << "    " << line << "\n";
  for (size_t i = 0; i < c.instance.inputs.size() && i < g.inputs().size(); ++i)
    os << "  input  " << g.value(g.inputs()[i]).name << " = " << formatTensor(c.instance.inputs[i]) << "\n";
  const char* after = v.rule->kind == Rule::Kind::Fusion ? "fused (OpenCL)" : "rewritten";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const std::string& name = g.value(g.outputs()[i]).name;
    if (i < c.want.size()) os << "  output " << name << " before the rule = " << formatTensor(c.want[i]) << "\n";
    if (i < c.got.size()) os << "  output " << name << " " << after << " = " << formatTensor(c.got[i]) << "\n";
  }
  return os.str();
}

Status saveCounterexample(const RuleVerdict&, const Counterexample& c, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "test_data_set_0", ec);
  if (ec) return Error{dir + ": cannot create the folder: " + ec.message()};
  // Constants the rule does not need as constants become graph inputs, with
  // their data as test inputs: compiling the case must not fold them (and
  // the nodes the rule matches) away before the rule fires.
  Graph g = c.instance.graph.clone();
  std::vector<Tensor> inputs = c.instance.inputs;
  for (ValueId k : g.constants()) {
    if (c.keptConstants.count(k) || g.uses(k).empty()) continue;
    Value& old = g.value(k);
    const std::string name = old.name;
    old.name += "_constant";
    const ValueId in = g.addInput(name, old.type);
    inputs.push_back(*g.value(k).constant);
    g.replaceKeepingInterface(k, in);
  }
  if (Status s = writeOutputFile((fs::path(dir) / "model.onnx").string(), exportOnnxBinary(g)); !s) return s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string file = (fs::path(dir) / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb")).string();
    if (Status s = writeOutputFile(file, serializeTensorProto(inputs[i], g.value(g.inputs()[i]).name)); !s) return s;
  }
  for (size_t i = 0; i < c.want.size(); ++i) {
    const std::string file = (fs::path(dir) / "test_data_set_0" / ("output_" + std::to_string(i) + ".pb")).string();
    if (Status s = writeOutputFile(file, serializeTensorProto(c.want[i], g.value(g.outputs()[i]).name)); !s) return s;
  }
  return Status::success();
}

}  // namespace fusec::driver
