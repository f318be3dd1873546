/// The elementwise expression emitter shared by the kernel families: it
/// turns a group of elementwise/broadcast members into OpenCL C statements
/// (loads through broadcasting index maps, each member's scalar semantics).
/// Private to codegen/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "Emitters.h"
#include "fusec/codegen/Pointwise.h"
#include "fusec/engine/Builtins.h"
#include "fusec/engine/Printable.h"

namespace fusec::codegen::detail {


/// A C literal of `v` with enough digits to round-trip (9 for float, 17
/// for double); infinities and NaN as OpenCL's float macros.
inline std::string realLiteral(double v, int digits, const char* suffix) {
  if (std::isnan(v)) return "NAN";
  if (std::isinf(v)) return v > 0 ? "INFINITY" : "(-INFINITY)";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  std::string s(buf);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return "(" + s + suffix + ")";
}

inline std::string floatLiteral(double v) { return realLiteral(v, 9, "f"); }

/// The larger (`max`) or smaller of float scalars or vectors `a` and `b`,
/// a NaN in either winning, as numpy's and PyTorch's max and min have it
/// (fmax and fmin drop a NaN operand): one select on two comparisons, lane
/// by lane. `a` is written twice and `b` once per operand use; pass names.
inline std::string extremeWithNaN(bool max, const std::string& a, const std::string& b) {
  return "select(" + b + ", " + a + ", (" + a + (max ? " > " : " < ") + b + ") | (" + a + " != " + a + "))";
}
inline std::string doubleLiteral(double v) { return realLiteral(v, 17, ""); }

/// Stores of the first `valid` lanes of the `width`-lane vector `value`
/// (width a power of two) at base[index], base[index + 1], ...: aligned
/// pieces of width / 2, ..., 2 and 1 lanes, each taken where `valid`
/// reaches its end (7 lanes: 4 + 2 + 1 stores, not 7).
inline std::string validLaneStores(const std::string& value, const std::string& base, const std::string& index,
                                   const std::string& valid, int width, const std::string& indent) {
  static const char* kLanes = "0123456789abcdef";
  std::function<std::string(int, int, const std::string&)> piece = [&](int first, int n, const std::string& in) {
    if (n == 1)
      return in + "if (" + valid + " > " + std::to_string(first) + ") " + base + "[" + index + " + " + std::to_string(first) +
             "] = " + value + ".s" + kLanes[first] + ";\n";
    const std::string lanes = value + ".s" + std::string(kLanes + first, kLanes + first + n);
    return in + "if (" + valid + " >= " + std::to_string(first + n) + ") vstore" + std::to_string(n) + "(" + lanes + ", 0, " +
           base + " + " + index + " + " + std::to_string(first) + ");\n" + in + "else {\n" + piece(first, n / 2, in + "  ") +
           piece(first + n / 2, n / 2, in + "  ") + in + "}\n";
  };
  return width == 1 ? piece(0, 1, indent) : piece(0, width / 2, indent) + piece(width / 2, width / 2, indent);
}

/// `#define SIGNATURE` with `body`'s lines as its replacement: each line
/// continued with a backslash, its `//` comment made a block comment (a
/// line comment would swallow the lines spliced after it). Comments hold
/// sanitized names, without '*' or '/'.
inline std::string macro(const std::string& signature, const std::string& body) {
  std::string out = "#define " + signature + " \\\n";
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find('\n', start);
    if (end == std::string::npos) end = body.size();
    std::string line = body.substr(start, end - start);
    if (const size_t c = line.find("//"); c != std::string::npos) line = line.substr(0, c) + "/*" + line.substr(c + 2) + " */";
    out += line + " \\\n";
    start = end + 1;
  }
  return out + "\n";
}

/// The OpenCL C type holding an element of `t` (bool as uchar); empty for
/// element types the kernels do not take (strings, float16, bfloat16, ...).
inline std::string cType(DType t) {
  switch (t) {
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    case DType::Bool: return "uchar";
    case DType::Int8: return "char";
    case DType::UInt8: return "uchar";
    case DType::Int16: return "short";
    case DType::UInt16: return "ushort";
    case DType::Int32: return "int";
    case DType::UInt32: return "uint";
    case DType::Int64: return "long";
    case DType::UInt64: return "ulong";
    default: return "";
  }
}

/// 16-bit floats are stored as such and computed in float: float16 through
/// OpenCL 1.2's vload_half/vstore_half (no cl_khr_fp16 needed), bfloat16 as
/// the upper half of a float's bits.
inline bool isHalfStorage(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

/// The type a value is computed in: its C type, float for 16-bit floats.
inline DType computeType(DType t) { return isHalfStorage(t) ? DType::Float32 : t; }

/// The C type of a buffer element of `t` (half, or ushort for bfloat16).
inline std::string storageType(DType t) {
  if (t == DType::Float16) return "half";
  if (t == DType::BFloat16) return "ushort";
  return cType(t);
}

/// Reading element `index` of buffer `param` of `t` as a computed value.
inline std::string loadElement(DType t, const std::string& param, const std::string& index) {
  if (t == DType::Float16) return "vload_half(" + index + ", " + param + ")";
  if (t == DType::BFloat16) return "as_float((uint)" + param + "[" + index + "] << 16)";
  return param + "[" + index + "]";
}

/// Writing computed value `var` to element `index` of buffer `param` of
/// `t`; 16-bit floats round to nearest even, as the interpreter does.
inline std::string storeElement(DType t, const std::string& param, const std::string& index, const std::string& var) {
  if (t == DType::Float16) return "vstore_half_rte(" + var + ", " + index + ", " + param + ");";
  if (t == DType::BFloat16) return param + "[" + index + "] = fusec_to_bfloat16(" + var + ");";
  return param + "[" + index + "] = " + var + ";";
}

inline bool isUnsignedType(DType t) {
  return t == DType::Bool || t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}

/// The OpenCL limit macros of an integer type: {lowest, highest}.
inline std::pair<std::string, std::string> integerLimits(DType t) {
  switch (t) {
    case DType::Bool: return {"0", "1"};
    case DType::Int8: return {"CHAR_MIN", "CHAR_MAX"};
    case DType::UInt8: return {"0", "UCHAR_MAX"};
    case DType::Int16: return {"SHRT_MIN", "SHRT_MAX"};
    case DType::UInt16: return {"0", "USHRT_MAX"};
    case DType::Int32: return {"INT_MIN", "INT_MAX"};
    case DType::UInt32: return {"0", "UINT_MAX"};
    case DType::Int64: return {"LONG_MIN", "LONG_MAX"};
    default: return {"0", "ULONG_MAX"};
  }
}


/// The rows form of a pointwise kernel: each work-item computes a run of
/// `length` consecutive elements (a row of the trailing dims, or a piece of
/// one) in a loop, so operands constant along the row are loaded once and
/// the others are contiguous: the compiler vectorizes the loop. The
/// element-per-work-item form computes a broadcast operand's offset lane by
/// lane, a gather: PoCL took 0.15 ms for DenseNet's 125440-element
/// per-channel BatchNorm + ReLU, 0.027 ms as rows of 196.
struct RowPieces {
  int64_t length = 0;  ///< elements of a row (the iteration space's trailing dims)
  int64_t pieces = 1;  ///< work-items per row
  int64_t step = 0;    ///< elements per piece (the last may have fewer)
  /// Rows of up to 2048 elements each in one piece; longer ones cut in
  /// pieces of a multiple of 16.
  static RowPieces of(int64_t length) {
    RowPieces r;
    r.length = length;
    r.pieces = (length + 2047) / 2048;
    r.step = (length + r.pieces - 1) / r.pieces;
    if (r.pieces > 1) r.step = (r.step + 15) / 16 * 16;
    r.pieces = (length + r.step - 1) / r.step;
    return r;
  }
  /// The loop over a work-item's elements of its row, `j` from the start
  /// of the row (`piece` the work-item's piece where there are several).
  std::string loop() const {
    const std::string R = std::to_string(length), s = std::to_string(step);
    if (pieces == 1) return "for (int j = 0; j < " + R + "; ++j)";
    return "for (int j = piece * " + s + "; j < min(piece * " + s + " + " + s + ", " + R + "); ++j)";
  }
};

/// Rows shorter than this keep the element-per-work-item form.
constexpr int64_t kMinRowLength = 8;

/// The widest float vector (16, 8 or 4 lanes) whose lanes tile `n`
/// elements exactly; 0 where none does.
inline int vectorLanes(int64_t n) { return n % 16 == 0 ? 16 : n % 8 == 0 ? 8 : n % 4 == 0 ? 4 : 0; }

/// A prologue that gives each work-group one segment of the iteration space
/// (a Concat's inputs, each a contiguous run of the result at batch 1): its
/// `head` declares the linear index `i` and the value's variable `var`, read
/// from one of `inputs` chosen by the work-group, so every work-item of a
/// group takes the same branch. In the rows form (`rowDims` > 0) the head
/// chooses the input by work-item and declares the result's row `row` (and
/// `piece`), and `element` reads the value at `j` along the row.
struct SegmentedPrologue {
  std::string head;
  std::vector<ValueId> inputs;  ///< kernel parameters in0, ... in order
  std::string params;
  ValueId value = kNoValue;     ///< the value the head computes
  std::string var;
  size_t globalSize = 0, localSize = 0;
  size_t rowDims = 0;           ///< rows form: the trailing dims a row spans
  RowPieces rows;
  std::string element;
};

/// A Concat as segments, each work-group reading one of its inputs of C
/// type `type`: each input's elements are a run of the result (at batch 1) or
/// runs at a stride. A per-element choice among n inputs costs every
/// vectorized work-item n masked loads (4.7x the time on a DenseNet Concat
/// of 17 inputs). In the rows form where rows of up to `rowDims` trailing
/// dims (those after the axis at most) hold kMinRowLength elements. nullopt
/// unless every value is static and `outputs` have the Concat's shape.
/// Defined in IndexMap.cpp.
std::optional<SegmentedPrologue> concatSegments(const Graph& g, NodeRef concat, const std::vector<ValueId>& outputs,
                                                const std::string& type, size_t rowDims = 0);

class Emitter {
 public:
  Emitter(const Graph& g, const OpCatalog& catalog) : g_(g), catalog_(catalog) {}

  /// The pointwise kernel of `members`. With `fetches`, the group's inputs
  /// that are their values are computed by the data-movement functions
  /// there (a movement prologue), not read from buffers. In the rows form
  /// (RowPieces) where an operand is broadcast along rows of at least
  /// kMinRowLength elements, or where `segmented` asks for it.
  Expected<KernelSource> emit(const std::vector<NodeRef>& members, const std::string& name, const std::string& comment,
                              const IndexMapFetches* fetches = nullptr, const std::set<ValueId>& fetched = {},
                              const SegmentedPrologue* segmented = nullptr) {
    KernelSource k;
    k.name = name;
    GroupBoundary b = groupBoundary(g_, members);
    fetched_ = fetched;
    fetchArgs_ = fetches ? fetches->args : "";
    if (fetches) k.inputs = fetches->inputs;
    if (segmented) {
      k.inputs = segmented->inputs;
      bind(segmented->value, segmented->var);
    }
    // The body loads every input but the segmented value (bound above);
    // the kernel takes as buffers those not computed by the prologue.
    std::vector<ValueId> bodyInputs;
    for (ValueId v : b.inputs) {
      if (segmented && v == segmented->value) continue;
      bodyInputs.push_back(v);
      if (!fetched.count(v)) k.inputs.push_back(v);
    }
    k.outputs = std::move(b.outputs);
    if (k.outputs.empty()) return Error{"group `" + name + "` computes nothing that is used", true};
    Shape space;
    if (Status st = staticShape(k.outputs[0], space); !st) return st.error();
    for (ValueId v : k.outputs) {
      Shape s;
      if (Status st = staticShape(v, s); !st) return st.error();
      if (s != space) return Error{"group `" + name + "` has results of different shapes", true};
    }
    k.globalSize = static_cast<size_t>(shapeNumel(space));
    if (rowLoops_ && !fetches && !segmented)
      if (std::optional<KernelSource> v = vectorForm(members, bodyInputs, space, k, comment)) return std::move(*v);
    rowDims_ = segmented                                                ? segmented->rowDims
               : !rowLoops_ || fetches || !broadcasts(bodyInputs, space) ? 0
                                                                          : rowDims(bodyInputs, space);
    const RowPieces rows = RowPieces::of(shapeNumel(Shape(space.end() - static_cast<std::ptrdiff_t>(rowDims_), space.end())));
    if (!segmented && rows.length < kMinRowLength) rowDims_ = 0;
    std::string params, body;
    allowDouble();  // this kernel's source declares cl_khr_fp64 when it needs it
    halfAllowed_ = true;  // and stores 16-bit floats itself
    const size_t firstParam = fetches ? fetches->inputs.size() : segmented ? segmented->inputs.size() : 0;
    if (Status st = emitBody(members, bodyInputs, space, "i", params, body, firstParam, !rowDims_); !st) return st.error();
    const std::string& prologueParams = fetches ? fetches->params : segmented ? segmented->params : std::string();
    if (!prologueParams.empty()) params = prologueParams + (params.empty() ? "" : ",\n    ") + params;
    if (segmented) {
      k.globalSize = segmented->globalSize;
      k.localSize = segmented->localSize;
    }
    std::ostringstream out;
    for (size_t o = 0; o < k.outputs.size(); ++o) {
      const ValueId v = k.outputs[o];
      const DType t = g_.value(v).type.dtype;
      params += ",\n    __global " + storageType(t) + "* restrict out" + std::to_string(o);
      out << "  " << storeElement(t, "out" + std::to_string(o), "i", vars_.at(v)) << "  // " << sanitize(g_.value(v).name)
          << "\n";
    }
    std::ostringstream src;
    src << "// " << comment << "\n";
    if (usesDouble_) src << "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
    src << prelude();
    if (usesBfloat16_)
      src << "inline ushort fusec_to_bfloat16(const float f) {  // round to nearest even\n"
             "  const uint u = as_uint(f);\n"
             "  return isnan(f) ? (ushort)((u >> 16) | 0x40) : (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);\n"
             "}\n";
    if (usesFloat16_)  // without cl_khr_fp16 a half is only ever a buffer element
      src << "inline float fusec_round_half(const float f) {  // to the nearest float16, even on ties\n"
             "  ushort h;\n"
             "  vstore_half_rte(f, 0, (__private half*)&h);\n"
             "  return vload_half(0, (const __private half*)&h);\n"
             "}\n";
    if (fetches) src << fetches->functions;
    src << "__kernel void " << name << "(\n    " << params << ") {\n";
    if (rowDims_) {
      const std::string R = std::to_string(rows.length);
      if (segmented) {
        src << segmented->head;
      } else {
        k.globalSize = static_cast<size_t>(shapeNumel(space) / rows.length * rows.pieces);
        src << "  const int item = get_global_id(0);\n";
        if (rows.pieces == 1)
          src << "  const int row = item;\n";
        else
          src << "  const int row = item / " << rows.pieces << ", piece = item % " << rows.pieces << ";\n";
      }
      src << coordinatesUsedBy(body, Shape(space.begin(), space.end() - static_cast<std::ptrdiff_t>(rowDims_)), "row", "  ");
      src << "  " << rows.loop() << " {\n";
      src << "    const int i = row * " << R << " + j;\n" << (segmented ? "  " + segmented->element : "")
          << indented(body + out.str()) << "  }\n}\n";
    } else {
      src << (segmented ? segmented->head : std::string("  const int i = get_global_id(0);\n"));
      src << body << out.str() << "}\n";
    }
    k.source = src.str();
    return k;
  }

  /// The vector form of emit() for CPUs: each work-item computes `lanes`
  /// neighbouring results along the innermost axis as float vectors, for a
  /// group that calls exp, erf or OpenCL's math library (Sigmoid, SiLU,
  /// GELU, Softplus, Tanh, Log, Pow, ...): PoCL vectorizes the scalar form
  /// across work-items, but with the straight-line fusec_exp and its
  /// divisions, and a library call per element, while its library on an
  /// explicit vector is vectorized code (EfficientNet's SiLU on 96x112x112:
  /// 0.32 -> 0.24 ms; tanh of 1Mi floats 0.48 -> 0.35 ms, log 6.0 -> 0.29).
  /// nullopt where the innermost extent is not a whole number of 4-lane
  /// vectors, the group has no vector form (see vectorize()), or it calls
  /// none of them.
  std::optional<KernelSource> vectorForm(const std::vector<NodeRef>& members, const std::vector<ValueId>& inputs,
                                         const Shape& space, const KernelSource& scalar, const std::string& comment) const {
    if (space.empty()) return std::nullopt;
    const int lanes = vectorLanes(space.back());
    if (!lanes || g_.info.defaultOpset() < 7) return std::nullopt;
    for (ValueId v : scalar.outputs)
      if (g_.value(v).type.dtype != DType::Float32) return std::nullopt;
    Emitter e(g_, catalog_);
    e.vectorize(lanes, 1);
    std::string params, body;
    if (!e.emitBody(members, inputs, space, "i", params, body) || !e.callsMath()) return std::nullopt;
    KernelSource k = scalar;
    k.globalSize = static_cast<size_t>(shapeNumel(space) / lanes);
    const std::string L = std::to_string(lanes);
    std::ostringstream src;
    src << "// " << comment << "\n// " << L << " results per work-item along the innermost axis, as float" << L
        << " vectors.\n"
        << prelude() << e.vectorHelpers();
    for (size_t o = 0; o < k.outputs.size(); ++o) params += ",\n    __global float* restrict out" + std::to_string(o);
    src << "__kernel void " << k.name << "(\n    " << params << ") {\n  const int i = get_global_id(0) * " << L << ";\n"
        << body;
    for (size_t o = 0; o < k.outputs.size(); ++o)
      src << "  vstore" << L << "(" << e.vars_.at(k.outputs[o]) << ", 0, out" << o << " + i);  // "
          << sanitize(g_.value(k.outputs[o]).name) << "\n";
    src << "}\n";
    k.source = src.str();
    return k;
  }

  /// Lets emit() take the rows form (for CPUs; see RowPieces).
  Emitter& rowLoops(bool on) {
    rowLoops_ = on;
    return *this;
  }

  /// Whether an operand of the space that is not a scalar is broadcast
  /// (read at an offset that is not the element's own).
  bool broadcasts(const std::vector<ValueId>& inputs, const Shape& space) const {
    for (ValueId v : inputs) {
      Shape s;
      if (staticShape(v, s) && s != space && shapeNumel(s) != 1) return true;
    }
    return false;
  }

  /// The most trailing dims of `space` along which every operand either
  /// runs as the space does or is constant (of extent 1 in each): rows of
  /// the rows form. 0 before opset 7 (legacy broadcasting).
  size_t rowDims(const std::vector<ValueId>& inputs, const Shape& space) const {
    if (g_.info.defaultOpset() < 7) return 0;
    std::vector<Shape> aligned;
    for (ValueId v : inputs) {
      Shape s;
      if (!staticShape(v, s) || s.size() > space.size()) return 0;
      s.insert(s.begin(), space.size() - s.size(), 1);
      aligned.push_back(std::move(s));
    }
    size_t dims = 0;
    for (size_t d = 1; d <= space.size(); ++d) {
      for (const Shape& s : aligned) {
        bool runs = true, constant = true;
        for (size_t p = space.size() - d; p < space.size(); ++p) {
          runs &= s[p] == space[p];
          constant &= s[p] == 1;
        }
        if (!runs && !constant) return dims;
      }
      dims = d;
    }
    return dims;
  }

  /// `code` with every line indented two more spaces.
  static std::string indented(const std::string& code) {
    std::string out;
    for (size_t start = 0; start < code.size();) {
      size_t end = code.find('\n', start);
      if (end == std::string::npos) end = code.size();
      out += "  " + code.substr(start, end - start) + "\n";
      start = end + 1;
    }
    return out;
  }

  static const std::string& prelude() {
    static const std::string text = std::string() +
           "#define FUSEC_MIN(a, b) ((isnan(a) || (a) < (b)) ? (a) : (b))\n"
           "#define FUSEC_MAX(a, b) ((isnan(a) || (a) > (b)) ? (a) : (b))\n"
           // The same on float vectors, lane by lane, as one select on two
           // comparisons (a NaN a fails neither test of the other form, a
           // NaN b fails `a < b`): PoCL compiles the ternary form of an
           // `isnan(a) || ...` vector to scalar code (a Clip epilogue on a
           // depthwise conv: +75 % time), and fmin / fmax under two selects
           // on isnan cost MobileNetV2's conv + Clip kernels 10-40 % (the
           // model 9.35 -> 8.54 ms, least per kernel of three alternating runs).
           "#define FUSEC_VMIN(a, b) select(b, a, ((a) < (b)) | ((a) != (a)))\n"
           "#define FUSEC_VMAX(a, b) select(b, a, ((a) > (b)) | ((a) != (a)))\n"
           "#define FUSEC_IMIN(a, b) ((a) < (b) ? (a) : (b))\n"
           "#define FUSEC_IMAX(a, b) ((a) > (b) ? (a) : (b))\n"
           // Integer division and remainder never trap: by zero they give 0
           // (the interpreter reports an error), and MIN / -1 wraps.
           "#define FUSEC_SDIV(a, b) ((b) == 0 ? 0 : (b) == -1 ? -(a) : (a) / (b))\n"
           "#define FUSEC_SMOD(a, b) ((b) == 0 || (b) == -1 ? 0 : (a) % (b))\n"
           "#define FUSEC_UDIV(a, b) ((b) == 0 ? 0 : (a) / (b))\n"
           "#define FUSEC_UMOD(a, b) ((b) == 0 ? 0 : (a) % (b))\n"
           "#define FUSEC_SFLOORDIV(a, b) \\\n"
           "  (FUSEC_SDIV(a, b) - (FUSEC_SMOD(a, b) != 0 && ((FUSEC_SMOD(a, b) < 0) != ((b) < 0))))\n"
           "#define FUSEC_SCEILDIV(a, b) \\\n"
           "  (FUSEC_SDIV(a, b) + (FUSEC_SMOD(a, b) != 0 && ((FUSEC_SMOD(a, b) < 0) == ((b) < 0))))\n"
           "#define FUSEC_UCEILDIV(a, b) (FUSEC_UDIV(a, b) + (FUSEC_UMOD(a, b) != 0))\n"
           // Straight-line exp: x = k ln2 + r with |r| <= ln2/2 (ln2 split in
           // two for an exact product), e^r by its degree-6 Taylor polynomial
           // (relative error < 2e-7 on that interval), 2^k built in the
           // exponent bits; below -87.33 (near the smallest normal float) it flushes to 0. PoCL's exp is a library call that stops
           // vectorization across work-items; this one vectorizes.
           "inline float fusec_exp(const float x) {\n"
           "  const float c = fmin(fmax(x, -87.33f), 88.7f);\n"
           "  const float t = c * 1.44269504f;\n"
           "  const int ki = (int)(t + (t >= 0.0f ? 0.5f : -0.5f));  // round to nearest\n"
           "  const float k = (float)ki;\n"
           "  const float r = fma(k, -1.42860677e-6f, fma(k, -0.693145752f, c));\n"
           "  float p = fma(r, 1.0f / 720.0f, 1.0f / 120.0f);\n"
           "  p = fma(p, r, 1.0f / 24.0f);\n"
           "  p = fma(p, r, 1.0f / 6.0f);\n"
           "  p = fma(p, r, 0.5f);\n"
           "  p = fma(p, r, 1.0f);\n"
           "  p = fma(p, r, 1.0f);\n"
           "  const int h = ki >> 1;  // 2^k as two normal halves: k spans -126..128\n"
           "  const float e = p * as_float((h + 127) << 23) * as_float((ki - h + 127) << 23);\n"
           "  return x < -87.33f ? 0.0f : x > 88.7f ? INFINITY : x != x ? x : e;\n"
           "}\n" +
           // erf and tanh: see OddRational.
           oddRational("fusec_erf", 0, kErf) + oddRational("fusec_tanh", 0, kTanh) + logistic(0);
    return text;
  }

  /// Vector mode: the body computes `lanes` (4, 8 or 16) neighbouring
  /// results at once, as float vectors. `index` is then the first lane's
  /// linear index, lane j is at `index + j`, and only the last
  /// `varyingDims` dims of the space may differ between lanes. Every input
  /// must be float32 and either have the space's shape (loaded as a vector)
  /// or be broadcast along the varying dims (loaded once and splat); every
  /// result float32; and no truth value may be used as a number (a vector
  /// comparison is -1, not 1). emitBody refuses other groups, and the
  /// caller falls back to one element at a time. Call before emitBody.
  /// With `validLanes` (an expression) set, only that many first lanes are
  /// results (an edge): operands are read lane by lane, the lanes past it
  /// repeating the last valid one, so nothing is read out of bounds.
  void vectorize(int lanes, size_t varyingDims, const std::string& validLanes = "") {
    lanes_ = lanes;
    varyingDims_ = varyingDims;
    validLanes_ = validLanes;
  }

  /// Vector mode: whether the body calls exp, erf, tanh or OpenCL's math
  /// library, the calls that are cheaper on explicit vectors.
  bool callsMath() const {
    return usesVectorExp_ || usesVectorErf_ || usesVectorTanh_ || usesVectorSigmoid_ || callsLibrary_;
  }

  /// The helper functions a vector body calls (vector forms of the
  /// prelude's fusec_exp, fusec_erf and fusec_tanh), to print before the kernel.
  std::string vectorHelpers() const {
    return (usesVectorExp_ || usesVectorSigmoid_ ? vectorExp(lanes_) : "") +
           (usesVectorErf_ ? oddRational("fusec_erf", lanes_, kErf) : "") +
           (usesVectorTanh_ ? oddRational("fusec_tanh", lanes_, kTanh) : "") + (usesVectorSigmoid_ ? logistic(lanes_) : "");
  }

  /// Two bodies' vector helpers, each function once: at the same width
  /// they are the same functions (a GEMM's Celu prologue and Sigmoid
  /// epilogue both call fusec_exp8; a row's reduction input and its
  /// epilogue both call fusec_exp4).
  static std::string helpersOnce(const std::string& first, const std::string& second) {
    // Each helper is one function from a line starting `inline` to the next.
    auto functions = [](const std::string& s) {
      std::vector<std::string> out;
      for (size_t at = 0; at < s.size();) {
        size_t next = s.find("\ninline ", at);
        next = next == std::string::npos ? s.size() : next + 1;
        out.push_back(s.substr(at, next - at));
        at = next;
      }
      return out;
    };
    std::vector<std::string> all = functions(first);
    for (std::string& f : functions(second))
      if (std::find(all.begin(), all.end(), f) == all.end()) all.push_back(std::move(f));
    std::string out;
    for (const std::string& f : all) out += f;
    return out;
  }

  /// `fusec_sigmoid` (lanes 0) or `fusec_sigmoidN` on floatN, after
  /// fusec_exp of the same width: see logisticArgument.
  static std::string logistic(int lanes) {
    const std::string n = lanes ? std::to_string(lanes) : "", t = "float" + n;
    return "inline " + t + " fusec_sigmoid" + n + "(const " + t + " x) {\n  return " + splat(lanes, "1.0f") + " / (" +
           splat(lanes, "1.0f") + " + fusec_exp" + n + "(-x));\n}\n";
  }

  /// The float literal `x` as a floatN of it (itself for lanes 0).
  static std::string splat(int lanes, const std::string& x) {
    return lanes ? "(float" + std::to_string(lanes) + ")(" + x + ")" : x;
  }

  /// Statements declaring `c`, x of type `type` clamped to [lo, hi] by
  /// comparisons that keep a NaN (`x < lo ? lo : x`, one vmaxps on x86;
  /// fmin / fmax would turn it into a bound), so that the arithmetic after
  /// carries a NaN to the result without a select.
  static std::string clampKeepingNaN(const std::string& type, const std::string& lo, const std::string& hi) {
    return "  const " + type + " lo = " + lo + ", hi = " + hi + ";\n  const " + type + " low = x < lo ? lo : x;\n  const " +
           type + " c = low > hi ? hi : low;\n";
  }

  /// `floatN fusec_expN(floatN)`: e^x = 2^k e^r, k the nearest integer
  /// to x log2(e) (rounded by adding 1.5 * 2^23, which also leaves k in
  /// the low bits, to shift into the exponent), r = x - k ln2 (ln2 in two
  /// parts), e^r by its degree-6 Taylor polynomial (relative error
  /// < 2e-7 on |r| <= ln2 / 2); 2^k as 2^(k-1) * 2 so that k = 128 still
  /// has an exponent. The limits come from the clamp alone, with no
  /// select after it: x is clamped to [-87.33, 89] (clampKeepingNaN), so
  /// NaN stays NaN through the arithmetic, the low end makes k = -126 whose 2^(k-1) has
  /// the exponent bits 0 (e^x = 0 below -86.99, where e^x < 1.7e-38), and
  /// the high end makes k = 128 and p 2^128 overflow to infinity (above
  /// 88.72). Nineteen vector instructions, inlined: PoCL's exp on a vector
  /// is a library routine, slower (kernel_roofline's softmax and SiLU rows
  /// 4-5 % faster; EfficientNet-B0 device time 7.3-7.7 -> 6.7-7.4 ms, BERT
  /// layer 8.8 -> 8.0-8.3, alternating runs). Three selects after the
  /// polynomial (0 below, infinity above, NaN kept) cost BERT-base's
  /// scale + mask + softmax row 0.129 -> 0.084 ms. An earlier
  /// straight-line form, rounding with rint and converting k to int, lost
  /// to the library (BERT's FF GEMM with its GELU epilogue 11.1 ms vs 6.9).
  static std::string vectorExp(int lanes) {
    const std::string n = std::to_string(lanes), f = "float" + n;
    auto c = [&](const std::string& x) { return splat(lanes, x); };
    std::string s = "inline " + f + " fusec_exp" + n + "(const " + f + " x) {\n";
    s += clampKeepingNaN(f, c("-87.33f"), c("89.0f"));
    s += "  const " + f + " t = fma(c, " + c("1.44269504f") + ", " + c("12582912.0f") + ");  // 1.5 * 2^23 + k\n";
    s += "  const " + f + " k = t - " + c("12582912.0f") + ";\n";
    s += "  const " + f + " r = fma(k, " + c("-1.42860677e-6f") + ", fma(k, " + c("-0.693145752f") + ", c));\n";
    s += "  " + f + " p = fma(r, " + c("1.0f / 720.0f") + ", " + c("1.0f / 120.0f") + ");\n";
    for (const char* k : {"1.0f / 24.0f", "1.0f / 6.0f", "0.5f", "1.0f", "1.0f"}) s += "  p = fma(p, r, " + c(k) + ");\n";
    s += "  return p * as_" + f + "((as_int" + n + "(t) << 23) + 0x3f000000) * 2.0f;\n}\n";
    return s;
  }

  /// An odd function as the quotient of an odd and an even polynomial in
  /// x, minimax-fitted on a range (past it the function is its limit, +-1,
  /// in float), as Eigen's and XLA's fast erf and tanh: a dozen
  /// FMAs and one divide, no library call. PoCL's erf and tanh are library
  /// calls, which on scalars stop vectorization across work-items and on
  /// vectors run a slower general routine (tanh on 1Mi floats as float16
  /// vectors: 0.41-0.74 -> 0.17 ms; BERT's exact GELU 0.111 -> 0.059 ms
  /// with the division by sqrt 2 made a multiply).
  struct OddRational {
    /// |x| past which the result is exactly +-1: the function is within
    /// the fit's error of it there, and below it the rational stays within
    /// [-1, 1] (with FMAs it first exceeds 1 at 3.673 for erf, 8.127 for
    /// tanh). Exactly, not the rational's 1 - 2.4e-7 at a clamp: 1 + tanh
    /// and 1 + erf of a large negative x are then 0, so SiLU and GELU of
    /// it are 0, not x times 1.2e-7 (SiLU(-3000) was -3.6e-4).
    const char* saturate;
    std::vector<const char*> numerator;    ///< x^1, x^3, ... coefficients, highest first
    std::vector<const char*> denominator;  ///< x^0, x^2, ... coefficients, highest first
  };
  /// erf: |error| < 4.5e-7 and relative error < 4e-7 everywhere.
  static inline const OddRational kErf{"3.65f",
                                       {"-2.72614225801306e-10f", "2.77068142495902e-08f", "-2.10102402082508e-06f",
                                        "-5.69250639462346e-05f", "-7.34990630326855e-04f", "-2.95459980854025e-03f",
                                        "-1.60960333262415e-02f"},
                                       {"-1.45660718464996e-05f", "-2.13374055278905e-04f", "-1.68282697438203e-03f",
                                        "-7.37332916720468e-03f", "-1.42647390514189e-02f"}};
  /// tanh: relative error < 3.5e-7 everywhere.
  static inline const OddRational kTanh{"8.0f",
                                        {"-2.76076847742355e-16f", "2.00018790482477e-13f", "-8.60467152213735e-11f",
                                         "5.12229709037114e-08f", "1.48572235717979e-05f", "6.37261928875436e-04f",
                                         "4.89352455891786e-03f"},
                                        {"1.19825839466702e-06f", "1.18534705686654e-04f", "2.26843463243900e-03f",
                                         "4.89352518554385e-03f"}};

  /// `name` (scalar, lanes 0) or `nameN` on floatN: `f` as an OddRational,
  /// +-1 past its saturation (the rational's overflow there, an infinity
  /// or NaN, is not selected); NaN stays NaN.
  static std::string oddRational(const std::string& name, int lanes, const OddRational& f) {
    const std::string n = lanes ? std::to_string(lanes) : "", t = "float" + n;
    auto c = [&](const std::string& x) { return splat(lanes, x); };
    std::string s = "inline " + t + " " + name + n + "(const " + t + " c) {\n  const " + t + " c2 = c * c;\n";
    auto horner = [&](const char* var, const std::vector<const char*>& k) {
      s += "  " + t + " " + var + " = fma(c2, " + c(k[0]) + ", " + c(k[1]) + ");\n";
      for (size_t i = 2; i < k.size(); ++i) s += "  " + std::string(var) + " = fma(c2, " + var + ", " + c(k[i]) + ");\n";
    };
    horner("p", f.numerator);
    horner("q", f.denominator);
    return s + "  return fabs(c) > " + c(f.saturate) + " ? copysign(" + c("1.0f") + ", c) : c * p / q;\n}\n";
  }

  /// The kernel parameters for `inputs` (`in<firstParam>`, ...) and
  /// statements that load them and compute every member's result at linear
  /// index `index` of the iteration space `space`; results are named in
  /// vars(). With `declareCoords` false the caller has already declared the
  /// coordinates c0, c1, ... of `index` in `space`.
  Status emitBody(const std::vector<NodeRef>& members, const std::vector<ValueId>& inputs, const Shape& space,
                  const std::string& index, std::string& params, std::string& bodyText, size_t firstParam = 0,
                  bool declareCoords = true) {
    space_ = space;
    std::map<ValueId, Shape> legacyShapes;
    if (Status st = legacyBroadcasts(members, inputs, legacyShapes); !st) return st;
    std::ostringstream body;
    bool needCoords = false;
    for (ValueId v : inputs) {
      Shape s;
      if (Status st = staticShape(v, s); !st) return st;
      needCoords |= s != space && shapeNumel(s) != 1;  // scalars read element 0
    }
    std::ostringstream ps;
    size_t nextParam = firstParam;
    for (size_t a = 0; a < inputs.size(); ++a) {
      const ValueId v = inputs[a];
      DType t = g_.value(v).type.dtype;
      if (Status st = checkType(v); !st) return st;
      Shape s;
      (void)staticShape(v, s);
      if (auto it = legacyShapes.find(v); it != legacyShapes.end()) s = it->second;
      const std::string var = "v" + std::to_string(v);
      if (!broadcastsTo(s, space)) {
        // An operand no member computes with (CastLike's `target_type`)
        // keeps its parameter and is never read; one that is computed with
        // must broadcast to the kernel's space, as the interpreter demands,
        // or its loads would index past it (`Clip(x, min)` with an empty
        // `min`).
        if (readBySemantics(v, members))
          return Error{"operand `" + printable(g_.value(v).name) + "` of shape " + shapeToString(s) +
                           " does not broadcast to the kernel's " + shapeToString(space),
                       true};
        const std::string param = "in" + std::to_string(nextParam++);
        ps << (ps.tellp() > 0 ? ",\n    " : "") << "__global const " << storageType(t) << "* restrict " << param;
        continue;
      }
      if (fetched_.count(v)) {
        // Computed by the movement prologue's function from its bits.
        const char* as = t == DType::Float32 ? "as_float" : t == DType::Float64 ? "as_double" : t == DType::Int32 ? "as_int"
                         : t == DType::Int64 ? "as_long" : t == DType::Bool || t == DType::UInt8 ? "(uchar)" : nullptr;
        if (!as || lanes_) return Error{"a data-movement prologue of " + std::string(dtypeName(t)) + " values has no kernel path", true};
        body << "  const " << cType(t) << " " << var << " = " << as << "(fetch" << v << "(" << offset(s, index) << fetchArgs_
             << "));  // " << sanitize(g_.value(v).name) << "\n";
        vars_[v] = var;
        continue;
      }
      const std::string param = "in" + std::to_string(nextParam++);
      ps << (ps.tellp() > 0 ? ",\n    " : "") << "__global const " << storageType(t) << "* restrict " << param;
      if (lanes_) {
        if (t != DType::Float32) return Error{"a vector epilogue takes float32 operands only", true};
        const bool whole = s == space_;
        // A bias along the last axis (lanes run along it): contiguous too.
        const bool alongRow = !whole && varyingDims_ == 1 && !s.empty() && !space_.empty() && s.back() == space_.back() &&
                              s.back() != 1;
        if (!whole && !alongRow && !uniformAcrossLanes(s))
          return Error{"an operand varies across the lanes but is broadcast", true};
        const std::string first = whole ? index : offset(s, index);
        std::string load = "(" + vectorType() + ")(" + param + "[" + first + "])";
        if ((whole || alongRow) && validLanes_.empty()) {
          load = "vload" + std::to_string(lanes_) + "(0, " + param + " + " + first + ")";
        } else if (whole || alongRow) {
          load = "(" + vectorType() + ")(";
          for (int j = 0; j < lanes_; ++j)
            load += (j ? ", " : "") + param + "[" + first + " + min(" + std::to_string(j) + ", (" + validLanes_ + ") - 1)]";
          load += ")";
        }
        body << "  const " << vectorType() << " " << var << " = " << load << ";  // " << sanitize(g_.value(v).name)
             << "\n";
        vars_[v] = var;
        continue;
      }
      body << "  const " << cType(computeType(t)) << " " << var << " = " << loadElement(t, param, offset(s, index))
           << ";  // " << sanitize(g_.value(v).name) << "\n";
      vars_[v] = var;
    }
    for (NodeRef n : members)
      if (Status st = emitNode(n, body); !st) return st;
    params = ps.str();
    bodyText = body.str();
    if (needCoords && declareCoords) bodyText = coordinatesUsedBy(bodyText, space, index, "  ") + bodyText;
    return Status::success();
  }

  /// Whether `s` broadcasts to `space` by numpy's rule: no more dims, each
  /// of its trailing dims 1 or the space's.
  static bool broadcastsTo(const Shape& s, const Shape& space) {
    if (s.size() > space.size()) return false;
    const size_t off = space.size() - s.size();
    for (size_t d = 0; d < s.size(); ++d)
      if (s[d] != 1 && s[d] != space[off + d]) return false;
    return true;
  }

  /// Whether a member's scalar semantics reads value `v` (an operand only
  /// the op's type rule looks at, such as CastLike's second, is not read;
  /// nor one read by an op that has no scalar semantics).
  bool readBySemantics(ValueId v, const std::vector<NodeRef>& members) const {
    std::function<bool(const ScalarExpr&, size_t)> reads = [&](const ScalarExpr& e, size_t param) {
      if (e.kind == ScalarExpr::Kind::Operand && e.index == param) return true;
      for (const ScalarExpr& a : e.args)
        if (reads(a, param)) return true;
      return false;
    };
    for (NodeRef n : members) {
      const NodeData& d = g_.node(n);
      const OpDef* op = d.domain.empty() ? catalog_.find(d.op.str()) : nullptr;
      for (size_t i = 0; i < d.inputs.size(); ++i) {
        if (d.inputs[i] != v) continue;
        // An op without scalar semantics is refused by emitNode, with its
        // own reason.
        if (!op || !op->semantics || op->params.empty()) continue;
        if (reads(*op->semantics, std::min(i, op->params.size() - 1))) return true;
      }
    }
    return false;
  }

  /// Before opset 7 a 1-D PRelu slope of X's channel count is per channel
  /// (axis 1), not aligned with X's last axis as numpy would. Such a slope
  /// is loaded as if it had shape [C, 1, ...]; that needs it to be an input
  /// of the kernel that no other member reads the numpy way.
  Status legacyBroadcasts(const std::vector<NodeRef>& members, const std::vector<ValueId>& inputs,
                          std::map<ValueId, Shape>& shapes) const {
    if (g_.info.defaultOpset() >= 7) return Status::success();
    for (NodeRef n : members) {
      const NodeData& d = g_.node(n);
      if (d.op != "PRelu" || d.inputs.size() < 2 || d.inputs[0] == kNoValue || d.inputs[1] == kNoValue) continue;
      const TensorType &x = g_.value(d.inputs[0]).type, &slope = g_.value(d.inputs[1]).type;
      if (!x.isStatic() || !slope.isStatic()) continue;
      const Shape xs = x.staticShape(), ss = slope.staticShape();
      if (ss.size() != 1 || xs.size() < 2 || ss[0] != xs[1] || ss[0] == 1) continue;
      Shape perChannel(xs.size() - 1, 1);
      perChannel[0] = ss[0];
      shapes[d.inputs[1]] = perChannel;
    }
    for (const auto& [v, shape] : shapes) {
      bool numpyReader = std::find(inputs.begin(), inputs.end(), v) == inputs.end();
      for (NodeRef n : members) {
        const NodeData& d = g_.node(n);
        for (size_t i = 0; i < d.inputs.size(); ++i)
          numpyReader |= d.inputs[i] == v && !(d.op == "PRelu" && i == 1);
      }
      if (numpyReader)
        return Error{"the per-channel PRelu slope `" + g_.value(v).name + "` (opset " +
                         std::to_string(g_.info.defaultOpset()) +
                         ") is computed in its kernel or also read with numpy broadcasting there; no kernel path",
                     true};
    }
    return Status::success();
  }

  /// Declarations of the coordinates c0, c1, ... of linear index `index` in
  /// `space`, as `type` (int, or long with L literals).
  /// coordinates(), only those the code `uses` names (generated code
  /// declares nothing it leaves unused: the OpenCL compiler warns).
  static std::string coordinatesUsedBy(const std::string& uses, const Shape& space, const std::string& index,
                                       const std::string& indent) {
    std::string out;
    std::istringstream all(coordinates(space, index, indent));
    for (std::string line; std::getline(all, line);) {
      const size_t at = line.find("const int ") + 10;
      if (names(uses, line.substr(at, line.find(' ', at) - at))) out += line + "\n";
    }
    return out;
  }

  /// Whether `code` names the identifier `id` (not as part of a longer one).
  static bool names(const std::string& code, const std::string& id) {
    auto identifier = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = code.find(id); at != std::string::npos; at = code.find(id, at + 1))
      if ((at == 0 || !identifier(code[at - 1])) && (at + id.size() == code.size() || !identifier(code[at + id.size()])))
        return true;
    return false;
  }

  static std::string coordinates(const Shape& space, const std::string& index, const std::string& indent,
                                 const std::string& type = "int") {
    const Shape strides = stridesOf(space);
    const std::string suffix = type == "long" ? "L" : "";
    std::string out;
    for (size_t d = 0; d < space.size(); ++d)
      out += indent + "const " + type + " c" + std::to_string(d) + " = (" + index + " / " +
             std::to_string(std::max<int64_t>(strides[d], 1)) + suffix + ") % " +
             std::to_string(std::max<int64_t>(space[d], 1)) + suffix + ";\n";
    return out;
  }

  /// A kernel whose first member computes `head` and whose other members are
  /// an elementwise epilogue applied to it: the epilogue's inputs from
  /// outside (not `head`), and the values to store (`head` first where the
  /// group's outside reads it). All results must have `head`'s shape.
  struct Epilogue {
    std::vector<NodeRef> members;
    std::vector<ValueId> inputs, outputs;
  };
  Expected<Epilogue> epilogue(const std::vector<NodeRef>& members, ValueId head, const std::string& family) const {
    Epilogue ep;
    ep.members.assign(members.begin() + 1, members.end());
    GroupBoundary boundary = groupBoundary(g_, ep.members);
    ep.inputs = std::move(boundary.inputs);
    std::erase(ep.inputs, head);  // computed by the kernel, not loaded
    bool storeHead = g_.isGraphOutput(head) || ep.members.empty();
    for (const Use& u : g_.uses(head))
      storeHead |= std::find(members.begin(), members.end(), u.node) == members.end();
    if (storeHead) ep.outputs.push_back(head);
    for (ValueId v : boundary.outputs)
      if (v != head) ep.outputs.push_back(v);
    const TensorType& ht = g_.value(head).type;
    for (ValueId v : ep.outputs)
      if (!g_.value(v).type.isStatic() || g_.value(v).type.staticShape() != ht.staticShape())
        return Error{"a " + family + " epilogue result with another shape has no kernel path", true};
    return ep;
  }

  /// Lets double values through emitBody; the caller's source then needs
  /// the cl_khr_fp64 pragma when usesDouble().
  void allowDouble() { doubleAllowed_ = true; }
  bool usesDouble() const { return usesDouble_; }

  const Graph& graph() const { return g_; }
  const std::map<ValueId, std::string>& vars() const { return vars_; }
  /// Makes `v` available under `var` (computed by the surrounding kernel).
  void bind(ValueId v, const std::string& var) { vars_[v] = var; }

 public:
  static std::string sanitize(const std::string& s) {
    std::string out;
    for (char c : s) out += (c == '\n' || c == '\r' || c == '\\' || c == '*' || c == '/') ? '_' : c;
    return out;
  }

  Status staticShape(ValueId v, Shape& out) const {
    const TensorType& t = g_.value(v).type;
    if (!t.isStatic()) return Error{"value `" + g_.value(v).name + "` has no static shape", true};
    out = t.staticShape();
    return Status::success();
  }

  /// The element offset of a value of shape `s` at the current coordinates.
  /// In the rows form the coordinates are those of the row's outer dims,
  /// and an operand that runs along the row adds `j`.
  std::string offset(const Shape& s, const std::string& index) const {
    if (s == space_) return index;
    if (shapeNumel(s) == 1) return "0";
    const size_t off = space_.size() - s.size();
    int64_t stride = 1;
    std::string expr;
    bool alongRow = false;
    for (size_t d = s.size(); d-- > 0;) {
      if (off + d >= space_.size() - rowDims_) {
        alongRow |= s[d] != 1;
      } else if (s[d] != 1) {
        const std::string term = "c" + std::to_string(off + d) + (stride == 1 ? "" : " * " + std::to_string(stride));
        expr = expr.empty() ? term : term + " + " + expr;
      }
      stride *= s[d];
    }
    if (alongRow) expr = expr.empty() ? "j" : expr + " + j";
    return expr.empty() ? "0" : expr;
  }

  Status emitNode(NodeRef n, std::ostringstream& body) {
    const NodeData& d = g_.node(n);
    const OpDef* op = d.domain.empty() ? catalog_.find(d.op.str()) : nullptr;
    if (!op || !op->semantics || (op->kind != OpKind::Elementwise && op->kind != OpKind::Broadcast))
      return Error{"op `" + (d.domain.empty() ? "" : d.domain + ".") + d.op.str() + "` has no kernel path", true};
    if (d.op == "Cast" || d.op == "CastLike") {
      DType to = DType::Undefined;
      if (d.op == "Cast") {
        const Attribute* a = d.attr("to");
        if (a && std::holds_alternative<int64_t>(*a)) to = static_cast<DType>(std::get<int64_t>(*a));
      } else if (d.inputs.size() > 1 && d.inputs[1] != kNoValue) {
        to = g_.value(d.inputs[1]).type.dtype;
      }
      if (cType(computeType(to)).empty() || (isHalfStorage(to) && !halfAllowed_))
        return Error{"Cast to `" + std::string(dtypeName(to)) + "` has no pointwise kernel path", true};
    }
    // The catalog states opset-17 semantics. Where older opsets differ,
    // compute the old meaning or refuse, never something else: Clip's bounds
    // were attributes before 11 (below), PRelu's slope was per channel before
    // 7 (legacyBroadcasts), and before 7 binary ops broadcast by
    // `broadcast`/`axis` attributes (refused unless that is numpy's rule).
    const int64_t opset = g_.info.defaultOpset();
    // Legacy broadcasting aligns B at `axis` of A; without one (or with the
    // axis that aligns B's last dim with A's) it is numpy's suffix rule.
    bool legacyAxis = false;
    if (d.attr("axis") && d.attrInt("broadcast", 0) != 0 && d.inputs.size() == 2 && d.inputs[0] != kNoValue &&
        d.inputs[1] != kNoValue) {
      const TensorType &a = g_.value(d.inputs[0]).type, &b = g_.value(d.inputs[1]).type;
      legacyAxis = !a.dims || !b.dims ||
                   d.attrInt("axis", 0) != static_cast<int64_t>(a.dims->size()) - static_cast<int64_t>(b.dims->size());
    } else if (d.attr("axis") && opset < 7) {
      legacyAxis = true;
    }
    if (legacyAxis)
      return Error{"`" + d.op.str() + "` at opset " + std::to_string(opset) +
                       " has semantics the catalog does not describe; no kernel path",
                   true};
    if (d.op == "Dropout" && d.inputs.size() > 2 && d.inputs[2] != kNoValue) {
      // Training mode keeps every element at a ratio of 0 (as inference).
      const Value& mode = g_.value(d.inputs[2]);
      const bool keepsAll = d.inputs[1] != kNoValue && scalarConstant(d.inputs[1]) == 0.0;
      if (!keepsAll && (!mode.constant || mode.constant->dtype() != DType::Bool || mode.constant->data<bool>()[0]))
        return Error{"Dropout in training mode has no kernel path", true};
    }
    if (lanes_) {
      for (ValueId v : d.outputs)
        if (v != kNoValue && g_.value(v).type.dtype != DType::Float32)
          return Error{"a vector epilogue computes float32 results only", true};
      if (d.op == "Cast" || d.op == "CastLike" || d.op == "Dropout" || !vectorSafe(*op->semantics, false))
        return Error{"`" + d.op.str() + "` has no vector form", true};
    }
    node_ = &d;
    op_ = op;
    for (size_t r = 0; r < d.outputs.size(); ++r) {
      const ValueId v = d.outputs[r];
      if (v == kNoValue) continue;
      if (r == 1 && d.op == "Dropout") {  // inference keeps every element: the mask is all true
        if (Status st = checkType(v); !st) return st;
        const std::string var = "v" + std::to_string(v);
        body << "  const uchar " << var << " = 1;  // Dropout mask " << sanitize(d.name) << "\n";
        vars_[v] = var;
        continue;
      }
      if (r > 0) return Error{"op `" + d.op.str() + "` with a second result has no pointwise kernel path", true};
      const DType t = computeType(g_.value(v).type.dtype);
      if (Status st = checkType(v); !st) return st;
      // The dialect of the expression: the result's type, or for a bool
      // result (comparisons) the first operand's.
      compute_ = t;
      if (t == DType::Bool)
        for (ValueId in : d.inputs)
          if (in != kNoValue) {
            compute_ = computeType(g_.value(in).type.dtype);
            break;
          }
      if (d.op == "Cast" || d.op == "CastLike") compute_ = t;  // `= input`: the conversion is the assignment
      std::string e;
      if (d.op == "Clip" && opset < 11) {
        // Before opset 11 the bounds were attributes, float's limits by default.
        const float low = d.attrFloat("min", -std::numeric_limits<float>::max()),
                    high = d.attrFloat("max", std::numeric_limits<float>::max());
        const std::optional<std::string> raised = boundedBy(false, operand(0).at(0), low);
        const std::optional<std::string> both = raised ? boundedBy(true, *raised, high) : std::nullopt;
        if (both) {
          e = *both;
        } else {
          std::string lo, hi;
          if (Status st = literal(low, lo); !st) return st;
          if (Status st = literal(high, hi); !st) return st;
          e = minMaxPrefix() + "MIN(" + minMaxPrefix() + "MAX(" + operand(0).at(0) + ", " + lo + "), " + hi + ")";
        }
      } else {
        statements_ = &body;  // calls may name intermediate steps there
        Status st = expr(*op->semantics, e);
        statements_ = nullptr;
        if (!st) return st;
      }
      const std::string var = "v" + std::to_string(v);
      const DType stored = g_.value(v).type.dtype;
      // (OpenCL C takes no float as a condition: compare with zero; NaN is true.)
      if (t == DType::Bool) e = "(uchar)((" + e + ") != 0 ? 1 : 0)";
      else e = "(" + valueType(t) + ")(" + e + ")";
      // A 16-bit float result holds a value of its type also where the
      // group's next member reads it from a register.
      if (stored == DType::Float16) e = "fusec_round_half(" + e + ")";
      if (stored == DType::BFloat16) e = "as_float((uint)fusec_to_bfloat16(" + e + ") << 16)";
      usesFloat16_ |= stored == DType::Float16;
      body << "  const " << valueType(t) << " " << var << " = " << e << ";  // " << d.op.str() << " " << sanitize(d.name) << "\n";
      vars_[v] = var;
    }
    return Status::success();
  }

  /// Values of operand `index` (all of a variadic operand); empty if absent.
  std::vector<std::string> operand(uint32_t index) const {
    std::vector<std::string> out;
    const OpParam& p = op_->params[index];
    const size_t end = p.variadic ? node_->inputs.size() : std::min<size_t>(index + 1, node_->inputs.size());
    for (size_t i = index; i < end; ++i)
      if (node_->inputs[i] != kNoValue) out.push_back(vars_.at(node_->inputs[i]));
    return out;
  }

  /// Integer (and bool) results are computed in their own type, with
  /// C's integer arithmetic; everything else in float (double for double).
  bool integerDialect() const { return isInteger(compute_) || compute_ == DType::Bool; }

  /// A constant in the current dialect: in integer arithmetic an integral
  /// value is a literal of the compute type and infinities are its limits,
  /// so no value round-trips through float.
  /// The operands of a min or max with each repeated value once and the
  /// known constants folded into one, where the first stood: both are
  /// idempotent, and `Max(x, x, ..., x)` of thousands of operands would
  /// otherwise be a chain of thousands of selects that the device compiler
  /// takes quadratic time over. (A NaN constant is left as it is.)
  Status dedupeMinMax(bool isMin, std::vector<std::string>& args, std::vector<std::optional<double>>& known) const {
    std::vector<std::string> keptArgs;
    std::vector<std::optional<double>> keptKnown;
    std::set<std::string> seen;
    std::optional<size_t> constantSlot;
    double folded = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      if (known[i] && !std::isnan(*known[i])) {
        folded = !constantSlot ? *known[i] : isMin ? std::min(folded, *known[i]) : std::max(folded, *known[i]);
        if (!constantSlot) {
          constantSlot = keptArgs.size();
          keptArgs.emplace_back();
          keptKnown.emplace_back();
        }
        continue;
      }
      if (!known[i] && !seen.insert(args[i]).second) continue;
      keptArgs.push_back(args[i]);
      keptKnown.push_back(known[i]);
    }
    if (constantSlot) {
      if (Status st = literal(folded, keptArgs[*constantSlot]); !st) return st;
      keptKnown[*constantSlot] = folded;
    }
    args = std::move(keptArgs);
    known = std::move(keptKnown);
    return Status::success();
  }

  Status literal(double v, std::string& out) const {
    if (!integerDialect()) {
      out = compute_ == DType::Float64 ? doubleLiteral(v) : floatLiteral(v);
      if (lanes_) out = "((" + vectorType() + ")" + out + ")";
      return Status::success();
    }
    if (std::isnan(v)) return Error{"NaN in integer arithmetic has no kernel path", true};
    const std::string type = cType(compute_);
    if (std::isinf(v) || std::abs(v) >= 9.2e18) {
      const auto [lo, hi] = integerLimits(compute_);
      out = "((" + type + ")" + (v > 0 ? hi : lo) + ")";
    } else if (v == std::trunc(v)) {
      out = "((" + type + ")" + std::to_string(static_cast<int64_t>(v)) + ")";
    } else {
      out = floatLiteral(v);  // a fraction: the arithmetic around it is float
    }
    return Status::success();
  }

  /// Integer-dialect calls whose float form would be wrong or not compile.
  /// Returns false when `op` has no special integer form.
  bool integerCall(const ScalarExpr& e, const std::vector<std::string>& args, std::string& out) {
    using K = ScalarExpr::Kind;
    const bool isUnsigned = isUnsignedType(compute_);
    if (args.size() != 1) return false;
    const std::string& x = args[0];
    if (e.op == "floor" || e.op == "ceil") {
      // The floor or ceiling of a quotient is floor or ceiling division.
      const ScalarExpr& q = e.args[0];
      if (q.kind == K::Binary && q.op == "/") {
        std::string a, b;
        if (!expr(q.args[0], a) || !expr(q.args[1], b)) return false;
        if (e.op == "floor") out = std::string(isUnsigned ? "FUSEC_UDIV(" : "FUSEC_SFLOORDIV(") + a + ", " + b + ")";
        else out = std::string(isUnsigned ? "FUSEC_UCEILDIV(" : "FUSEC_SCEILDIV(") + a + ", " + b + ")";
        return true;
      }
      out = x;  // an integer is its own floor
      return true;
    }
    if (e.op == "trunc" || e.op == "round") out = x;
    else if (e.op == "abs") out = isUnsigned ? x : "abs(" + x + ")";
    else if (e.op == "sign") out = isUnsigned ? "(" + x + " > 0)" : "((" + x + " > 0) - (" + x + " < 0))";
    else if (e.op == "isnan" || e.op == "isinf") out = "0";
    else return false;
    return true;
  }

  /// An attribute's value (its default when not set).
  std::optional<double> attrValue(const ScalarExpr& e) const {
    const AttrSpec& spec = op_->attrs[e.index];
    const Attribute* a = node_->attr(spec.name);
    std::optional<Attribute> value = a ? std::optional<Attribute>(*a) : spec.defaultValue;
    if (!value) return std::nullopt;
    if (auto* i = std::get_if<int64_t>(&*value)) return static_cast<double>(*i);
    if (auto* f = std::get_if<float>(&*value)) return *f;
    return std::nullopt;
  }

  /// The value of a comparison or logical expression of constants and
  /// attributes; nullopt when it depends on an operand.
  std::optional<double> constantValue(const ScalarExpr& e) const {
    using K = ScalarExpr::Kind;
    if (e.kind == K::Constant) return e.value;
    if (e.kind == K::Attr) return attrValue(e);
    if (e.kind == K::Unary && e.op == "not")
      if (std::optional<double> x = constantValue(e.args[0])) return *x == 0;
    if (e.kind != K::Binary) return std::nullopt;
    const Builtin* op = findBuiltin(e.op, Builtin::Form::Infix, kInSemantics);
    if (!op || !op->truth) return std::nullopt;  // conditions only
    std::optional<double> a = constantValue(e.args[0]), b = constantValue(e.args[1]);
    // `false and x` and `true or x` are decided by one side.
    if (e.op == "and" && ((a && *a == 0) || (b && *b == 0))) return 0.0;
    if (e.op == "or" && ((a && *a != 0) || (b && *b != 0))) return 1.0;
    if (!a || !b) return std::nullopt;
    const double args[2] = {*a, *b};
    return op->eval(args, 2);
  }

  /// For the logistic function `1 / (1 + exp(-x))` (Sigmoid's semantics,
  /// also SiLU's gate) in float32: x. Such a division is emitted as
  /// fusec_sigmoid(x), that division with the straight-line fusec_exp:
  /// relative error a few ulp everywhere, down to the smallest normal
  /// results (x near -87). The form 0.5 tanh(x / 2) + 0.5 was ~10 % faster
  /// but only absolutely accurate: it returned 0 below x = -16, so SiLU's
  /// -1.6e-6 at x = -16 became 0, and a weight of 3000 after it made that
  /// an error of 0.005 (found by `fusec verify`).
  std::optional<ScalarExpr> logisticArgument(const ScalarExpr& e) const {
    using K = ScalarExpr::Kind;
    auto isOne = [&](const ScalarExpr& c) { return c.kind == K::Constant && c.value == 1.0; };
    if (compute_ != DType::Float32 || e.kind != K::Binary || e.op != "/" || !isOne(e.args[0])) return std::nullopt;
    const ScalarExpr& sum = e.args[1];
    if (sum.kind != K::Binary || sum.op != "+") return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const ScalarExpr& one = sum.args[side], &exp = sum.args[1 - side];
      if (isOne(one) && exp.kind == K::Call && exp.op == "exp" && exp.args.size() == 1 &&
          exp.args[0].kind == K::Unary && exp.args[0].op == "-")
        return exp.args[0].args[0];
    }
    return std::nullopt;
  }

  /// For a float32 division `x / c` whose divisor is a one-element
  /// constant of the graph: 1 / c, where it is a normal float (so x * (1 /
  /// c) is within 1.5 ulp of x / c, exactly it when c is a power of two,
  /// and the same infinities and NaNs). A divide costs ten times a
  /// multiply on CPUs (BERT's GELU divides by sqrt 2: 0.11 -> 0.09 ms).
  std::optional<float> constantReciprocal(const ScalarExpr& e) const {
    using K = ScalarExpr::Kind;
    if (e.op != "/" || compute_ != DType::Float32 || e.args[1].kind != K::Operand) return std::nullopt;
    const OpParam& p = op_->params[e.args[1].index];
    if (p.variadic || e.args[1].index >= node_->inputs.size() || node_->inputs[e.args[1].index] == kNoValue)
      return std::nullopt;
    const std::optional<double> c = scalarConstant(node_->inputs[e.args[1].index]);
    if (!c) return std::nullopt;
    const float r = static_cast<float>(1.0 / *c);
    if (std::fpclassify(r) != FP_NORMAL) return std::nullopt;
    return r;
  }

  /// min(x, c) (`isMin`) or max(x, c) for a bound c that is not NaN, as
  /// one comparison keeping a NaN x: `x > c ? c : x`, `x < c ? c : x`
  /// (one vminps / vmaxps on x86); nullopt in integer arithmetic or for a
  /// NaN c, which the general macros handle.
  std::optional<std::string> boundedBy(bool isMin, const std::string& x, double c) const {
    std::string bound;
    if (integerDialect() || std::isnan(c) || !literal(c, bound)) return std::nullopt;
    return "(" + x + (isMin ? " > " : " < ") + bound + " ? " + bound + " : " + x + ")";
  }

  /// What a Default expression (`a ?? b`) stands for: its optional
  /// operand where present, else the fallback.
  const ScalarExpr& chosen(const ScalarExpr& e) const {
    const ScalarExpr& first = e.args[0];
    const bool present = first.kind != ScalarExpr::Kind::Operand || !operand(first.index).empty();
    return present ? e.args[0] : e.args[1];
  }

  /// The value of `v` where it is a constant of one element.
  std::optional<double> scalarConstant(ValueId v) const {
    const std::shared_ptr<const Tensor>& c = g_.value(v).constant;
    if (!c || c->numel() != 1) return std::nullopt;
    return c->scalarAt(0);
  }

  /// The value of an argument known when the kernel is generated: a
  /// literal, an attribute, an operand that is a one-element constant
  /// (Clip's bounds), or an absent operand's default; nullopt otherwise.
  std::optional<double> knownValue(const ScalarExpr& e) const {
    using K = ScalarExpr::Kind;
    switch (e.kind) {
      case K::Constant: return e.value;
      case K::Attr: return attrValue(e);
      case K::Operand:
        if (op_->params[e.index].variadic || e.index >= node_->inputs.size() || node_->inputs[e.index] == kNoValue)
          return std::nullopt;
        return scalarConstant(node_->inputs[e.index]);
      case K::Default: return knownValue(chosen(e));
      case K::Unary:
        if (e.op == "-")
          if (std::optional<double> x = knownValue(e.args[0])) return -*x;
        return std::nullopt;
      default: return std::nullopt;
    }
  }

  Status expr(const ScalarExpr& e, std::string& out) {
    using K = ScalarExpr::Kind;
    switch (e.kind) {
      case K::Constant: return literal(e.value, out);
      case K::Operand: {
        auto v = operand(e.index);
        if (v.empty()) return Error{"a required operand is absent", true};
        out = v[0];
        return Status::success();
      }
      case K::Attr: {
        std::optional<double> x = attrValue(e);
        if (!x) return Error{"attribute `" + op_->attrs[e.index].name + "` of `" + node_->op.str() + "` is not set", true};
        return literal(*x, out);
      }
      case K::Default: return expr(chosen(e), out);
      case K::Unary: {
        std::string x;
        if (Status st = expr(e.args[0], x); !st) return st;
        const Builtin* prefix = findBuiltin(e.op, Builtin::Form::Prefix, kInSemantics);
        if (!prefix) return Error{"operator `" + e.op + "` has no OpenCL form", true};
        out = "(" + prefix->opencl + x + ")";
        return Status::success();
      }
      case K::Binary: {
        // Conditions on attributes are decided here, not left to the
        // device compiler (which warns about constant operands of && and ||).
        if (std::optional<double> c = constantValue(e)) {  // a truth value, as C's int
          out = *c != 0 ? "1" : "0";
          return Status::success();
        }
        if (e.op == "and" || e.op == "or")
          for (int side = 0; side < 2; ++side)
            if (std::optional<double> c = constantValue(e.args[side])) {
              if ((*c != 0) == (e.op == "and")) return expr(e.args[1 - side], out);  // true and x, false or x
              out = e.op == "and" ? "0" : "1";
              return Status::success();
            }
        if (std::optional<ScalarExpr> x = logisticArgument(e)) {
          std::string v;
          if (Status st = expr(*x, v); !st) return st;
          usesVectorSigmoid_ |= lanes_ != 0;
          out = "fusec_sigmoid" + (lanes_ ? std::to_string(lanes_) : std::string()) + "(" + v + ")";
          return Status::success();
        }
        std::string a, b;
        if (Status st = expr(e.args[0], a); !st) return st;
        if (std::optional<float> r = constantReciprocal(e)) {  // x / c as x * (1 / c): a multiply, not a divide
          if (Status st = literal(*r, b); !st) return st;
          out = "(" + a + " * " + b + ")";
          return Status::success();
        }
        if (Status st = expr(e.args[1], b); !st) return st;
        const Builtin* infix = findBuiltin(e.op, Builtin::Form::Infix, kInSemantics);
        if (!infix) return Error{"operator `" + e.op + "` has no OpenCL form", true};
        const bool isUnsigned = isUnsignedType(compute_);
        if (integerDialect() && (e.op == "/" || e.op == "%"))
          out = std::string(isUnsigned ? "FUSEC_U" : "FUSEC_S") + (e.op == "/" ? "DIV(" : "MOD(") + a + ", " + b + ")";
        else if (e.op == "%") out = "fmod(" + a + ", " + b + ")";
        else out = "(" + a + " " + infix->opencl + " " + b + ")";
        return Status::success();
      }
      case K::Call: break;
    }
    if (e.op == "select" && e.args.size() == 3)
      if (std::optional<double> c = constantValue(e.args[0])) return expr(e.args[*c != 0 ? 1 : 2], out);
    // Calls: reductions over a variadic operand or several arguments first.
    std::vector<std::string> args;
    std::vector<std::optional<double>> known;  // each argument's value where it is a known constant
    for (const ScalarExpr& a : e.args) {
      if (a.kind == K::Operand && op_->params[a.index].variadic) {
        for (const std::string& v : operand(a.index)) args.push_back(v);
        for (size_t i = a.index; i < node_->inputs.size(); ++i)
          if (node_->inputs[i] != kNoValue) known.push_back(scalarConstant(node_->inputs[i]));
        continue;
      }
      std::string x;
      if (Status st = expr(a, x); !st) return st;
      args.push_back(x);
      known.push_back(knownValue(a));
    }
    if (e.op == "min" || e.op == "max" || e.op == "sum" || e.op == "mean") {
      if (args.empty()) return Error{"`" + e.op + "` of nothing", true};
      if (e.op == "min" || e.op == "max")
        if (Status st = dedupeMinMax(e.op == "min", args, known); !st) return st;
      std::string acc = args[0];
      const std::string prefix = minMaxPrefix();
      // A bound known not to be NaN (ReLU's 0, Clip's constant bounds,
      // HardSigmoid's 0 and 1) is one comparison that keeps a NaN operand:
      // `x < c ? c : x`, one vmaxps on x86, where the general macro costs
      // two comparisons and a select. A conv with a ReLU6 (Clip) epilogue,
      // MobileNetV2's depthwise conv 144 x 56 x 56 on AVX2 PoCL, in one
      // process alternating: 0.123 ms with the macro, 0.095 so, 0.087 with
      // no Clip at all. Ties between zeros of opposite sign give x where
      // the macro gives the bound: the same value.
      const bool isMin = e.op == "min", minMax = isMin || e.op == "max";
      for (size_t i = 1; i < args.size(); ++i) {
        std::optional<std::string> cheap;
        if (minMax && known[i]) cheap = boundedBy(isMin, acc, *known[i]);
        else if (minMax && i == 1 && known[0]) cheap = boundedBy(isMin, args[i], *known[0]);
        if (cheap) acc = *cheap;
        else if (e.op == "min") acc = prefix + "MIN(" + acc + ", " + args[i] + ")";
        else if (e.op == "max") acc = prefix + "MAX(" + acc + ", " + args[i] + ")";
        else acc = "(" + acc + " + " + args[i] + ")";
        // The macros read their arguments more than once: each step's result
        // is a named value, so the text grows with the operand count, not
        // exponentially.
        if (statements_ && i + 1 < args.size()) {
          const std::string t = "s" + std::to_string(temps_++);
          *statements_ << "  const " << valueType(compute_) << " " << t << " = " << acc << ";\n";
          acc = t;
        }
      }
      if (e.op == "mean") acc = "(" + acc + " / " + floatLiteral(static_cast<double>(args.size())) + ")";
      out = acc;
      return Status::success();
    }
    if (e.op == "select") {
      // On vectors the function: PoCL compiles a vector ternary to scalar code.
      if (lanes_) out = "select(" + args[2] + ", " + args[1] + ", " + args[0] + ")";
      else out = "((" + args[0] + ") ? (" + args[1] + ") : (" + args[2] + "))";
      return Status::success();
    }
    if (integerDialect() && integerCall(e, args, out)) return Status::success();
    const Builtin* fn = findBuiltin(e.op, Builtin::Form::Call, kInSemantics);
    if (e.op == "reciprocal" && args.size() == 1) {
      std::string one;
      if (Status st = literal(1.0, one); !st) return st;
      out = "(" + one + " / " + args[0] + ")";
      return Status::success();
    }
    if (!fn || fn->opencl.empty()) return Error{"function `" + e.op + "` has no OpenCL form", true};
    // Other functions compute in floating point, whatever the operands.
    const std::string real = "(" + valueType(compute_ == DType::Float64 ? DType::Float64 : DType::Float32) + ")(";
    if (e.op == "pow" && args.size() == 2 && known[1] && !integerDialect())
      if (std::optional<std::string> p = knownPower(real + args[0] + ")", *known[1])) {
        out = *p;
        return Status::success();
      }
    if (e.op == "sign" && args.size() == 1) {  // NaN stays NaN, as ONNX's Sign (OpenCL's sign gives 0)
      const std::string x = real + args[0] + ")";
      out = lanes_ ? "select(sign(" + x + "), " + x + ", isnan(" + x + "))" : "(isnan(" + x + ") ? " + x + " : sign(" + x + "))";
      return Status::success();
    }
    std::string name = fn->opencl;
    // The prelude's straight-line exp, erf and tanh are float functions:
    // double precision takes OpenCL's own (e^100 is finite in double).
    if (compute_ == DType::Float64 && name.starts_with("fusec_")) name = name.substr(6);
    // OpenCL's math library beyond single instructions (sqrt, fabs, rint, ...).
    static const std::set<std::string> library = {"log",  "log1p", "pow",  "sin",  "cos",   "tan",   "asin",
                                                  "acos", "atan",  "sinh", "cosh", "asinh", "acosh", "atanh"};
    callsLibrary_ |= lanes_ && library.count(name);
    if (lanes_ && name.starts_with("fusec_")) {  // the prelude's helpers are scalar; vectorHelpers() has their forms
      usesVectorExp_ |= name == "fusec_exp";
      usesVectorErf_ |= name == "fusec_erf";
      usesVectorTanh_ |= name == "fusec_tanh";
      name += std::to_string(lanes_);
    }
    out = name + "(";
    for (size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + real + args[i] + ")";
    out += ")";
    return Status::success();
  }

  /// `pow(x, e)` for an exponent known when the kernel is generated, as
  /// multiplications (integers up to 16 by binary powering, a reciprocal
  /// for negative ones) or a square root (halves); nullopt for the rest,
  /// which keep the library's pow. OpenCL's pow is a library call of up to
  /// 16 ulp that stops vectorization across work-items (RMSNorm's
  /// `Pow(x, 2)` took 0.43 ms for 32K elements on PoCL as pow, microseconds
  /// as x * x). IEEE pow's special cases are kept: x^0 = 1 (NaN too),
  /// (-0)^-1 = -inf, (-0)^0.5 = +0 and (-inf)^0.5 = +inf.
  std::optional<std::string> knownPower(const std::string& x, double e) {
    if (!std::isfinite(e)) return std::nullopt;
    std::string one, zero;
    if (!literal(1.0, one) || !literal(0.0, zero)) return std::nullopt;
    if (e == 0) return one;
    // A step's value named once (in the statements before the result when
    // there are some), so the text grows with the exponent's bits only.
    auto named = [&](const std::string& v) {
      if (!statements_) return "(" + v + ")";
      const std::string t = "s" + std::to_string(temps_++);
      *statements_ << "  const " << valueType(compute_ == DType::Float64 ? DType::Float64 : DType::Float32) << " " << t
                   << " = " << v << ";\n";
      return t;
    };
    if (e == std::trunc(e) && std::fabs(e) <= 16) {
      const std::string base = named(x);
      std::string acc, square = base;
      for (auto n = static_cast<unsigned>(std::fabs(e)); n != 0; n >>= 1) {
        if (n & 1) acc = acc.empty() ? square : named(acc + " * " + square);
        if (n > 1) square = named(square + " * " + square);
      }
      return e < 0 ? "(" + one + " / " + acc + ")" : acc;
    }
    if (std::fabs(e) != 0.5) return std::nullopt;
    // + 0 turns -0 into +0 (sqrt(-0) is -0, pow's +0); -inf is pow's +inf.
    const std::string base = named(x);
    const std::string inf = lanes_ ? "((" + vectorType() + ")(INFINITY))" : "INFINITY";
    const std::string root = "sqrt(" + base + " + " + zero + ")";
    const std::string isMinusInf = base + " == -" + inf;
    const std::string r = lanes_ ? "select(" + root + ", " + inf + ", " + isMinusInf + ")"
                                 : "(" + isMinusInf + " ? " + inf + " : " + root + ")";
    return e < 0 ? "(" + one + " / " + r + ")" : r;
  }

  /// The type of a computed value of `t`: its C type, a float vector in
  /// vector mode (where every value is float32).
  std::string valueType(DType t) const { return lanes_ ? vectorType() : cType(t); }
  std::string vectorType() const { return "float" + std::to_string(lanes_); }
  /// The prelude's min and max macros for the current dialect.
  std::string minMaxPrefix() const { return lanes_ ? "FUSEC_V" : integerDialect() ? "FUSEC_I" : "FUSEC_"; }

  /// Whether a value of shape `s`, broadcast to the space, reads one
  /// element for all the lanes: it has extent 1 along the varying dims.
  bool uniformAcrossLanes(const Shape& s) const {
    const size_t aligned = space_.size() - s.size();
    for (size_t d = space_.size() - std::min(varyingDims_, space_.size()); d < space_.size(); ++d)
      if (d >= aligned && s[d - aligned] != 1) return false;
    return true;
  }

  /// Whether semantics `e` computes the same lane by lane on vectors: truth
  /// values (comparisons, `and`, `isnan`, ...) appear only as conditions
  /// of `select`, never as numbers. `condition`: `e` is such a condition.
  static bool vectorSafe(const ScalarExpr& e, bool condition) {
    using K = ScalarExpr::Kind;
    if (e.kind == K::Constant || e.kind == K::Attr || e.kind == K::Operand) return true;
    if (e.kind == K::Default)
      return std::all_of(e.args.begin(), e.args.end(), [&](const ScalarExpr& a) { return vectorSafe(a, condition); });
    const Builtin* b = findBuiltin(e.op, e.kind == K::Unary ? Builtin::Form::Prefix
                                         : e.kind == K::Binary ? Builtin::Form::Infix
                                                               : Builtin::Form::Call,
                                   kInSemantics);
    if (b && b->truth && !condition) return false;
    // The operands of `and`, `or` and `not` are conditions; a comparison's are numbers.
    const bool logical = e.op == "and" || e.op == "or" || e.op == "not";
    for (size_t i = 0; i < e.args.size(); ++i)
      if (!vectorSafe(e.args[i], logical || (e.op == "select" && i == 0))) return false;
    return true;
  }

  /// Values of types no kernel takes are refused; double only where the
  /// kernel's source enables cl_khr_fp64 (the pointwise family).
  Status checkType(ValueId v) {
    const DType t = g_.value(v).type.dtype;
    const bool unsupported = isHalfStorage(t) ? !halfAllowed_ : cType(t).empty();
    if (unsupported || (t == DType::Float64 && !doubleAllowed_))
      return Error{"value `" + g_.value(v).name + "` has element type `" + std::string(dtypeName(t)) +
                       "`, which the generated kernels do not take" +
                       (t == DType::Float64 || isHalfStorage(t) ? " outside pointwise groups" : ""),
                   true};
    usesDouble_ |= t == DType::Float64;
    usesBfloat16_ |= t == DType::BFloat16;
    return Status::success();
  }

  const Graph& g_;
  const OpCatalog& catalog_;
  Shape space_;
  DType compute_ = DType::Float32;  // the type the current node computes in
  bool doubleAllowed_ = false, usesDouble_ = false;
  bool halfAllowed_ = false, usesBfloat16_ = false, usesFloat16_ = false;  // 16-bit floats: pointwise groups only
  int lanes_ = 0;  // vector mode's width; 0: one element
  size_t varyingDims_ = 0;
  size_t rowDims_ = 0;  // the rows form's: trailing dims of the space a row spans; 0: one element
  bool rowLoops_ = false;  // the rows form allowed
  std::string validLanes_;
  bool usesVectorExp_ = false, usesVectorErf_ = false, usesVectorTanh_ = false, usesVectorSigmoid_ = false;
  bool callsLibrary_ = false;  // vector mode: a call of OpenCL's math library (log, pow, sin, ...)
  std::map<ValueId, std::string> vars_;
  std::set<ValueId> fetched_;  ///< inputs computed by a movement prologue's fetch functions
  std::string fetchArgs_;      ///< the buffers those functions take
  std::ostringstream* statements_ = nullptr;  // where the current node's statements go
  size_t temps_ = 0;
  const NodeData* node_ = nullptr;
  const OpDef* op_ = nullptr;
};

}  // namespace fusec::codegen::detail
