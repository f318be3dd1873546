/// Elementwise kernels the op catalog does not run (CatalogKernel.cpp runs
/// every op from its scalar semantics otherwise): exact 64-bit integer
/// arithmetic and comparisons (a double holds 53 bits), Cast, CastLike,
/// and Where, Identity and Dropout on any element type, and the forms of
/// older opsets (Clip's bounds as attributes, per-channel PRelu).
#include <algorithm>
#include <cmath>
#include <limits>

#include "KernelUtil.h"

namespace fusec::interp {
namespace {

// ---- unary ------------------------------------------------------------------

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

/// base^exp in T's wrapping arithmetic, by squaring: log2(exp) steps, so a
/// model's exponent of 2^62 does not loop 2^62 times.
template <class T>
T integerPow(T base, T exp) {
  using U = std::make_unsigned_t<T>;
  if (exp < 0) return base == 1 ? 1 : (base == T(-1) ? ((-exp) % 2 ? T(-1) : T(1)) : T(0));
  U result = 1, b = static_cast<U>(base);
  for (U e = static_cast<U>(exp); e; e >>= 1) {
    if (e & 1) result = static_cast<U>(result * b);
    b = static_cast<U>(b * b);
  }
  return static_cast<T>(result);
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
      if (ctx.has(1)) lo = ctx.scalarIn<T>(1, "min");
      if (ctx.has(2)) hi = ctx.scalarIn<T>(2, "max");
    }
    Tensor y(x.dtype(), x.shape());
    const T* in = x.data<T>();
    T* out = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = std::min(std::max(in[i], lo), hi);
    ctx.setOutput(0, std::move(y));
  });
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
  // Inference: the identity. training_mode (opset 12+, input 2) is refused
  // unless the ratio is 0, where training keeps every element too.
  const bool training = ctx.has(2) && ctx.in(2).dtype() == DType::Bool && ctx.in(2).numel() > 0 && ctx.in(2).data<bool>()[0];
  const bool keepsAll = ctx.has(1) && ctx.in(1).numel() == 1 && ctx.in(1).scalarAt(0) == 0;
  if (training && !keepsAll) ctx.unsupported("training mode is not supported");
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

}  // namespace

void registerElementwiseKernels(KernelRegistry& r) {
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
  r["Where"] = where;
  r["Clip"] = clip;
  r["Cast"] = cast;
  r["CastLike"] = castLike;
  r["Identity"] = identity;
  r["Dropout"] = dropout;
  r["PRelu"] = prelu;
}

}  // namespace fusec::interp
