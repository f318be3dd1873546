/// Elementwise kernels: unary math, activations, binary arithmetic with
/// multidirectional broadcasting, comparisons, logic, Where, Clip, Cast.
#include <algorithm>
#include <cmath>
#include <limits>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

// ---- unary ------------------------------------------------------------------

/// A unary op on floating-point values; attrs read through the context.
using UnaryFloatFn = std::function<double(double)>;

void runUnaryFloat(KernelContext& ctx, const std::function<UnaryFloatFn(const KernelContext&)>& make) {
  const Tensor& x = ctx.in(0);
  UnaryFloatFn f = make(ctx);
  dispatchFloat(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<T>(f(static_cast<double>(in[i])));
    ctx.setOutput(0, std::move(y));
  });
}

void registerUnary(KernelRegistry& r, const std::string& name, UnaryFloatFn f) {
  r[name] = [f](KernelContext& ctx) { runUnaryFloat(ctx, [&](const KernelContext&) { return f; }); };
}

void registerUnaryWithAttrs(KernelRegistry& r, const std::string& name,
                            std::function<UnaryFloatFn(const KernelContext&)> make) {
  r[name] = [make](KernelContext& ctx) { runUnaryFloat(ctx, make); };
}

double roundHalfEven(double x) { return std::nearbyint(x); }  // default FE_TONEAREST

/// Unary ops that keep integer types too (Abs, Neg, Sign).
template <class Op>
void runUnaryNumeric(KernelContext& ctx, Op op) {
  const Tensor& x = ctx.in(0);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = op(in[i]);
    ctx.setOutput(0, std::move(y));
  });
}

// ---- binary with broadcasting ---------------------------------------------------

/// out = op(a, b) over numeric types with broadcasting; Out is the result type
/// (void: same as the operands).
template <class Out, bool AllowBool = false, class Op>
void runBinary(KernelContext& ctx, Op op) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.dtype() != b.dtype())
    ctx.fail("operands have different element types (`" + std::string(dtypeName(a.dtype())) +
             "` and `" + std::string(dtypeName(b.dtype())) + "`)");
  Shape shape = broadcastShapes(ctx, {a.shape(), b.shape()});
  std::array<Shape, 2> strides = {broadcastStrides(a.shape(), shape), broadcastStrides(b.shape(), shape)};
  auto body = [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<std::is_void_v<Out>, T, Out>;
    Tensor y(DTypeOf<R>::value, shape);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    R* out = y.data<R>();
    if (a.shape() == b.shape()) {
      for (int64_t i = 0; i < y.numel(); ++i) out[i] = static_cast<R>(op(pa[i], pb[i]));
    } else {
      forEachBroadcast<2>(shape, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
        out[i] = static_cast<R>(op(pa[off[0]], pb[off[1]]));
      });
    }
    ctx.setOutput(0, std::move(y));
  };
  if constexpr (AllowBool) {
    if (a.dtype() == DType::Bool) return body(TypeTag<bool>{});
  }
  dispatchNumeric(ctx, a.dtype(), body);
}

/// Sum/Min/Max/Mean: a left fold of a binary op over 1..N operands.
template <class Op>
void runVariadic(KernelContext& ctx, Op op, bool mean) {
  if (ctx.numInputs() == 0) ctx.fail("needs at least one operand");
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.numInputs(); ++i) shapes.push_back(ctx.in(i).shape());
  Shape shape = broadcastShapes(ctx, shapes);
  const DType dt = ctx.in(0).dtype();
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    if (ctx.in(i).dtype() != dt) ctx.fail("operands have different element types");
  dispatchNumeric(ctx, dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor acc(dt, shape);
    T* out = acc.data<T>();
    for (size_t k = 0; k < ctx.numInputs(); ++k) {
      const Tensor& x = ctx.in(k);
      const T* px = x.data<T>();
      std::array<Shape, 1> strides = {broadcastStrides(x.shape(), shape)};
      forEachBroadcast<1>(shape, strides, [&](int64_t i, const std::array<int64_t, 1>& off) {
        out[i] = k == 0 ? px[off[0]] : static_cast<T>(op(out[i], px[off[0]]));
      });
    }
    if (mean)
      for (int64_t i = 0; i < acc.numel(); ++i)
        out[i] = static_cast<T>(out[i] / static_cast<T>(ctx.numInputs()));
    ctx.setOutput(0, std::move(acc));
  });
}

template <class T>
T integerPow(T base, T exp) {
  if (exp < 0) return base == 1 ? 1 : 0;
  T result = 1;
  for (T i = 0; i < exp; ++i) result *= base;
  return result;
}

void pow(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  Shape shape = broadcastShapes(ctx, {a.shape(), b.shape()});
  std::array<Shape, 2> strides = {broadcastStrides(a.shape(), shape), broadcastStrides(b.shape(), shape)};
  // The exponent may have another type than the base (opset 12+).
  Tensor e = b.dtype() == a.dtype() ? b : b.castTo(a.dtype());
  dispatchNumeric(ctx, a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(a.dtype(), shape);
    const T* pa = a.data<T>();
    const T* pb = e.data<T>();
    T* out = y.data<T>();
    forEachBroadcast<2>(shape, strides, [&](int64_t i, const std::array<int64_t, 2>& off) {
      if constexpr (std::is_floating_point_v<T>)
        out[i] = static_cast<T>(std::pow(pa[off[0]], pb[off[1]]));
      else
        out[i] = integerPow<T>(pa[off[0]], pb[off[1]]);
    });
    ctx.setOutput(0, std::move(y));
  });
}

void where(KernelContext& ctx) {
  const Tensor& c = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& y = ctx.in(2);
  expectDType(ctx, 0, DType::Bool);
  if (x.dtype() != y.dtype()) ctx.fail("the two branches have different element types");
  Shape shape = broadcastShapes(ctx, {c.shape(), x.shape(), y.shape()});
  std::array<Shape, 3> strides = {broadcastStrides(c.shape(), shape),
                                  broadcastStrides(x.shape(), shape),
                                  broadcastStrides(y.shape(), shape)};
  dispatchAny(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out(x.dtype(), shape);
    const bool* pc = c.data<bool>();
    const T* px = reinterpret_cast<const T*>(x.raw());
    const T* py = reinterpret_cast<const T*>(y.raw());
    T* po = reinterpret_cast<T*>(out.raw());
    forEachBroadcast<3>(shape, strides, [&](int64_t i, const std::array<int64_t, 3>& off) {
      po[i] = pc[off[0]] ? px[off[1]] : py[off[2]];
    });
    ctx.setOutput(0, std::move(out));
  });
}

void clip(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  dispatchNumeric(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    if (ctx.opset() < 11) {
      lo = static_cast<T>(ctx.attrFloat("min", -std::numeric_limits<float>::max()));
      hi = static_cast<T>(ctx.attrFloat("max", std::numeric_limits<float>::max()));
    } else {
      if (ctx.has(1)) lo = ctx.in(1).template data<T>()[0];
      if (ctx.has(2)) hi = ctx.in(2).template data<T>()[0];
    }
    Tensor y(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = std::min(std::max(in[i], lo), hi);
    ctx.setOutput(0, std::move(y));
  });
}

void logicalNot(KernelContext& ctx) {
  expectDType(ctx, 0, DType::Bool);
  const Tensor& x = ctx.in(0);
  Tensor y(DType::Bool, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<bool>()[i] = !x.data<bool>()[i];
  ctx.setOutput(0, std::move(y));
}

template <class Op>
KernelFn logical(Op op) {
  return [op](KernelContext& ctx) {
    expectDType(ctx, 0, DType::Bool);
    expectDType(ctx, 1, DType::Bool);
    runBinary<bool, true>(ctx, op);
  };
}

void cast(KernelContext& ctx) {
  if (!ctx.hasAttr("to")) ctx.fail("attribute `to` is required");
  auto to = static_cast<DType>(ctx.attrInt("to", 0));
  const Tensor& x = ctx.in(0);
  if (to == x.dtype()) {
    ctx.setOutput(0, x);
    return;
  }
  try {
    ctx.setOutput(0, x.castTo(to));
  } catch (const UserError& e) {
    if (e.unsupported) ctx.unsupported(e.message);
    ctx.fail(e.message);
  }
}

void castLike(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  DType to = ctx.in(1).dtype();
  try {
    ctx.setOutput(0, to == x.dtype() ? x : x.castTo(to));
  } catch (const UserError& e) {
    if (e.unsupported) ctx.unsupported(e.message);
    ctx.fail(e.message);
  }
}

void identity(KernelContext& ctx) { ctx.setOutput(0, ctx.in(0)); }

void dropout(KernelContext& ctx) {
  // Inference: the identity. training_mode (opset 12+, input 2) is refused.
  if (ctx.has(2) && ctx.in(2).dtype() == DType::Bool && ctx.in(2).data<bool>()[0])
    ctx.unsupported("training mode is not supported");
  const Tensor& x = ctx.in(0);
  ctx.setOutput(0, x);
  if (ctx.wantsOutput(1)) {
    Tensor mask(DType::Bool, x.shape());
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = true;
    ctx.setOutput(1, std::move(mask));
  }
}

void prelu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& slope = ctx.in(1);
  if (ctx.opset() < 7 && slope.rank() == 1 && x.rank() >= 2 && slope.dim(0) == x.dim(1) && slope.dim(0) != 1) {
    // Before opset 7 a 1-D slope is per channel (axis 1).
    Shape perChannel(static_cast<size_t>(x.rank() - 1), 1);
    perChannel[0] = slope.dim(0);
    Tensor reshaped = slope.reshaped(perChannel);
    KernelContext inner(ctx.node(), ctx.opset(), {&x, &reshaped});
    prelu(inner);
    ctx.setOutput(0, std::move(inner.outputs()[0]));
    return;
  }
  // Unidirectional broadcast of the slope to x.
  Shape shape = broadcastShapes(ctx, {x.shape(), slope.shape()});
  if (shape != x.shape()) ctx.fail("slope shape " + shapeToString(slope.shape()) + " does not broadcast to " + shapeToString(x.shape()));
  runBinary<void>(ctx, [](auto a, auto s) { return a < 0 ? a * s : a; });
}

void isInfNan(KernelContext& ctx, bool nan) {
  const Tensor& x = ctx.in(0);
  const bool detectPos = ctx.attrInt("detect_positive", 1) != 0;
  const bool detectNeg = ctx.attrInt("detect_negative", 1) != 0;
  dispatchFloat(ctx, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor y(DType::Bool, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      T v = x.data<T>()[i];
      y.data<bool>()[i] = nan ? std::isnan(v) : (std::isinf(v) && ((v > 0 && detectPos) || (v < 0 && detectNeg)));
    }
    ctx.setOutput(0, std::move(y));
  });
}

}  // namespace

void registerElementwiseKernels(KernelRegistry& r) {
  registerUnary(r, "Sqrt", [](double x) { return std::sqrt(x); });
  registerUnary(r, "Exp", [](double x) { return std::exp(x); });
  registerUnary(r, "Log", [](double x) { return std::log(x); });
  registerUnary(r, "Reciprocal", [](double x) { return 1.0 / x; });
  registerUnary(r, "Floor", [](double x) { return std::floor(x); });
  registerUnary(r, "Ceil", [](double x) { return std::ceil(x); });
  registerUnary(r, "Round", roundHalfEven);
  registerUnary(r, "Erf", [](double x) { return std::erf(x); });
  registerUnary(r, "Tanh", [](double x) { return std::tanh(x); });
  registerUnary(r, "Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  registerUnary(r, "Relu", [](double x) { return x > 0 ? x : 0.0; });
  registerUnary(r, "Softplus", [](double x) { return std::log1p(std::exp(-std::abs(x))) + std::max(x, 0.0); });
  registerUnary(r, "Softsign", [](double x) { return x / (1.0 + std::abs(x)); });
  registerUnary(r, "HardSwish", [](double x) { return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5)); });
  registerUnary(r, "Sin", [](double x) { return std::sin(x); });
  registerUnary(r, "Cos", [](double x) { return std::cos(x); });
  registerUnary(r, "Tan", [](double x) { return std::tan(x); });
  registerUnary(r, "Asin", [](double x) { return std::asin(x); });
  registerUnary(r, "Acos", [](double x) { return std::acos(x); });
  registerUnary(r, "Atan", [](double x) { return std::atan(x); });
  registerUnary(r, "Sinh", [](double x) { return std::sinh(x); });
  registerUnary(r, "Cosh", [](double x) { return std::cosh(x); });
  registerUnary(r, "Asinh", [](double x) { return std::asinh(x); });
  registerUnary(r, "Acosh", [](double x) { return std::acosh(x); });
  registerUnary(r, "Atanh", [](double x) { return std::atanh(x); });
  registerUnaryWithAttrs(r, "LeakyRelu", [](const KernelContext& c) -> UnaryFloatFn {
    double alpha = c.attrFloat("alpha", 0.01f);
    return [alpha](double x) { return x >= 0 ? x : alpha * x; };
  });
  registerUnaryWithAttrs(r, "Elu", [](const KernelContext& c) -> UnaryFloatFn {
    double alpha = c.attrFloat("alpha", 1.0f);
    return [alpha](double x) { return x >= 0 ? x : alpha * (std::exp(x) - 1.0); };
  });
  registerUnaryWithAttrs(r, "Celu", [](const KernelContext& c) -> UnaryFloatFn {
    double alpha = c.attrFloat("alpha", 1.0f);
    return [alpha](double x) { return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1.0)); };
  });
  registerUnaryWithAttrs(r, "Selu", [](const KernelContext& c) -> UnaryFloatFn {
    double alpha = c.attrFloat("alpha", 1.67326319217681884765625f);
    double gamma = c.attrFloat("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](double x) { return gamma * (x > 0 ? x : alpha * (std::exp(x) - 1.0)); };
  });
  registerUnaryWithAttrs(r, "HardSigmoid", [](const KernelContext& c) -> UnaryFloatFn {
    double alpha = c.attrFloat("alpha", 0.2f), beta = c.attrFloat("beta", 0.5f);
    return [alpha, beta](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); };
  });
  registerUnaryWithAttrs(r, "ThresholdedRelu", [](const KernelContext& c) -> UnaryFloatFn {
    double alpha = c.attrFloat("alpha", 1.0f);
    return [alpha](double x) { return x > alpha ? x : 0.0; };
  });

  r["Abs"] = [](KernelContext& c) {
    runUnaryNumeric(c, [](auto v) -> decltype(v) {
      if constexpr (std::is_unsigned_v<decltype(v)>) return v;
      else return v < 0 ? static_cast<decltype(v)>(-v) : v;
    });
  };
  r["Neg"] = [](KernelContext& c) {
    runUnaryNumeric(c, [](auto v) { return static_cast<decltype(v)>(-v); });
  };
  r["Sign"] = [](KernelContext& c) {
    runUnaryNumeric(c, [](auto v) { return static_cast<decltype(v)>((v > 0) - (v < 0)); });
  };

  r["Add"] = [](KernelContext& c) { runBinary<void>(c, [](auto a, auto b) { return a + b; }); };
  r["Sub"] = [](KernelContext& c) { runBinary<void>(c, [](auto a, auto b) { return a - b; }); };
  r["Mul"] = [](KernelContext& c) { runBinary<void>(c, [](auto a, auto b) { return a * b; }); };
  r["Div"] = [](KernelContext& c) {
    runBinary<void>(c, [&c](auto a, auto b) {
      if constexpr (std::is_integral_v<decltype(b)>) {
        if (b == 0) c.fail("integer division by zero");
      }
      return a / b;
    });
  };
  r["Mod"] = [](KernelContext& c) {
    const bool fmod = c.attrInt("fmod", 0) != 0;
    runBinary<void>(c, [&](auto a, auto b) -> decltype(a) {
      using T = decltype(a);
      if constexpr (std::is_floating_point_v<T>) {
        if (fmod) return std::fmod(a, b);
        T m = std::fmod(a, b);
        return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
      } else {
        if (b == 0) c.fail("integer modulo by zero");
        T m = static_cast<T>(a % b);
        if constexpr (std::is_signed_v<T>)
          if (!fmod && m != 0 && ((m < 0) != (b < 0))) m = static_cast<T>(m + b);
        return m;
      }
    });
  };
  r["Pow"] = pow;
  r["Sum"] = [](KernelContext& c) { runVariadic(c, [](auto a, auto b) { return a + b; }, false); };
  r["Mean"] = [](KernelContext& c) { runVariadic(c, [](auto a, auto b) { return a + b; }, true); };
  r["Min"] = [](KernelContext& c) {
    runVariadic(c, [](auto a, auto b) { return (std::isnan(static_cast<double>(a)) || a < b) ? a : b; }, false);
  };
  r["Max"] = [](KernelContext& c) {
    runVariadic(c, [](auto a, auto b) { return (std::isnan(static_cast<double>(a)) || a > b) ? a : b; }, false);
  };
  r["Equal"] = [](KernelContext& c) { runBinary<bool, true>(c, [](auto a, auto b) { return a == b; }); };
  r["Less"] = [](KernelContext& c) { runBinary<bool>(c, [](auto a, auto b) { return a < b; }); };
  r["Greater"] = [](KernelContext& c) { runBinary<bool>(c, [](auto a, auto b) { return a > b; }); };
  r["LessOrEqual"] = [](KernelContext& c) { runBinary<bool>(c, [](auto a, auto b) { return a <= b; }); };
  r["GreaterOrEqual"] = [](KernelContext& c) { runBinary<bool>(c, [](auto a, auto b) { return a >= b; }); };
  r["And"] = logical([](bool a, bool b) { return a && b; });
  r["Or"] = logical([](bool a, bool b) { return a || b; });
  r["Xor"] = logical([](bool a, bool b) { return a != b; });
  r["Not"] = logicalNot;
  r["Where"] = where;
  r["Clip"] = clip;
  r["Cast"] = cast;
  r["CastLike"] = castLike;
  r["Identity"] = identity;
  r["Dropout"] = dropout;
  r["PRelu"] = prelu;
  r["IsNaN"] = [](KernelContext& c) { isInfNan(c, true); };
  r["IsInf"] = [](KernelContext& c) { isInfNan(c, false); };
}

}  // namespace fusec::interp
