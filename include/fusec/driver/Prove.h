/// Symbolic proof of rewrite rules with Z3, for `fusec verify`.
///
/// A rewrite rule whose pattern and replacement are made only of ops with
/// scalar semantics (elementwise and broadcast ops) computes, element by
/// element, one real expression before and one after. Each is built from
/// the catalog's semantics, the same expressions the interpreter and the
/// code generator run; every pattern input and attribute is a real unknown
/// (constrained by the guard's `value(c) == k` conjuncts), and functions
/// without an algebraic definition (exp, erf, tanh, sqrt, ...) are
/// uninterpreted, so a proof holds for any definition of them. The rule is
/// proved when Z3 shows the two differ nowhere, for every choice of
/// alternative op and optional operand.
///
/// What a proof over the reals does not cover: rounding (instances check
/// that within tolerance), NaN and infinities (rules using isnan or isinf
/// are not proved), and shapes (the rewriter refuses a replacement of
/// another shape or element type).
#pragma once

#include <map>
#include <string>

#include "fusec/engine/RuleSet.h"

namespace fusec::driver {

struct ProofResult {
  bool proved = false;
  /// Proved: what was shown; otherwise why not (the op or function that
  /// has no scalar semantics, or Z3's answer).
  std::string detail;
  /// Not proved because Z3 found real values of the pattern's inputs where
  /// the sides differ: those values, by binding name. `verify` runs
  /// instances that hold them; in float arithmetic they may agree (a
  /// division by zero the reals leave unspecified, an unknown function).
  std::map<std::string, double> witness;
};

ProofResult proveRewrite(const Rule& rule, unsigned timeoutMs = 5000);

}  // namespace fusec::driver
