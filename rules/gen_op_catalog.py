#!/usr/bin/python3
"""Writes rules/core/ops.fuse, the op catalog, from libonnx's op schemas.

Operands, results and attributes (types, defaults, optional or required) come
from ONNX's schemas at opset 17; the kind of each op and the scalar semantics
of elementwise and broadcast ops come from the tables below. Run with
Debian's python3-onnx:  /usr/bin/python3 rules/gen_op_catalog.py > rules/core/ops.fuse
"""
import numpy as np
import onnx.defs
from onnx import AttributeProto

OPSET = 17

ELEMENTWISE = {
    "Sqrt": "sqrt(X)", "Exp": "exp(input)", "Log": "log(input)", "Abs": "abs(X)", "Neg": "-X",
    "Reciprocal": "1.0 / X", "Floor": "floor(X)", "Ceil": "ceil(X)", "Round": "round(X)",
    "Erf": "erf(input)", "Tanh": "tanh(input)", "Sigmoid": "1.0 / (1.0 + exp(-X))",
    "Relu": "max(X, 0.0)", "LeakyRelu": "select(X >= 0.0, X, alpha * X)",
    "Elu": "select(X >= 0.0, X, alpha * (exp(X) - 1.0))",
    "Celu": "max(0.0, X) + min(0.0, alpha * (exp(X / alpha) - 1.0))",
    "Selu": "gamma * select(X > 0.0, X, alpha * (exp(X) - 1.0))",
    "Softplus": "max(X, 0.0) + log1p(exp(-abs(X)))", "Softsign": "input / (1.0 + abs(input))",
    "HardSigmoid": "max(0.0, min(1.0, alpha * X + beta))",
    "HardSwish": "X * max(0.0, min(1.0, X / 6.0 + 0.5))",
    "ThresholdedRelu": "select(X > alpha, X, 0.0)",
    "Sin": "sin(input)", "Cos": "cos(input)", "Tan": "tan(input)", "Asin": "asin(input)",
    "Acos": "acos(input)", "Atan": "atan(input)", "Sinh": "sinh(input)", "Cosh": "cosh(input)",
    "Asinh": "asinh(input)", "Acosh": "acosh(input)", "Atanh": "atanh(input)", "Sign": "sign(input)",
    "Not": "not X", "IsNaN": "isnan(X)",
    "IsInf": "isinf(X) and ((X > 0.0 and detect_positive != 0) or (X < 0.0 and detect_negative != 0))",
    "Clip": "min(max(input, min ?? -inf), max ?? inf)",
    "Cast": "input", "CastLike": "input", "Identity": "input", "Dropout": "data",
}
BROADCAST = {
    "Add": "A + B", "Sub": "A - B", "Mul": "A * B", "Div": "A / B", "Pow": "pow(X, Y)",
    "Mod": "select(fmod != 0 or A % B == 0.0 or (A % B < 0.0) == (B < 0.0), A % B, A % B + B)",
    "Min": "min(data_0)", "Max": "max(data_0)", "Sum": "sum(data_0)", "Mean": "mean(data_0)",
    "Equal": "A == B", "Less": "A < B", "Greater": "A > B", "LessOrEqual": "A <= B",
    "GreaterOrEqual": "A >= B", "And": "A and B", "Or": "A or B", "Xor": "A != B",
    "Where": "select(condition, X, Y)", "PRelu": "select(X < 0.0, X * slope, X)",
}
COMMUTATIVE = {"Add", "Mul", "Min", "Max", "Sum", "Mean", "Equal", "And", "Or", "Xor"}
REDUCTION = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
             "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "Softmax",
             "LogSoftmax", "Hardmax", "LayerNormalization", "InstanceNormalization",
             "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]
ANCHOR = ["Conv", "ConvTranspose", "MatMul", "Gemm", "MaxPool", "AveragePool", "LpPool"]
INJECTIVE = ["Reshape", "Flatten", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
             "Squeeze", "Unsqueeze", "Expand", "Tile", "Pad", "Resize", "DepthToSpace", "SpaceToDepth"]
OPAQUE = ["BatchNormalization", "Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike",
          "Einsum", "CumSum", "ScatterND", "ScatterElements", "Trilu"]

KEYWORDS = {"pack", "version", "import", "op", "class", "rule", "override", "disable", "match", "fuse",
            "where", "rewrite", "kernel", "cost", "priority", "attrs", "and", "or", "not", "true", "false"}
ATTR_TYPES = {AttributeProto.INT: "int", AttributeProto.FLOAT: "float", AttributeProto.STRING: "string",
              AttributeProto.INTS: "ints", AttributeProto.FLOATS: "floats", AttributeProto.STRINGS: "strings",
              AttributeProto.TENSOR: "tensor", AttributeProto.GRAPH: "graph"}
FIXED_TYPES = {"tensor(bool)": "bool", "tensor(int64)": "int64", "tensor(float)": "float"}


# Operands whose values kernels need when they are generated: they decide a
# result's shape or an index map (written `name: static`).
STATIC_OPERANDS = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4}, "Pad": {1, 3}, "Squeeze": {1},
    "Unsqueeze": {1}, "Split": {1}, "ConstantOfShape": {0}, "Range": {0, 1, 2}, "OneHot": {1}, "TopK": {1},
    "Resize": {1, 2, 3}, "Upsample": {1}, "CenterCropPad": {1, 2}, "Col2Im": {1, 2, 3}, "ReduceSum": {1},
    "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1}, "ReduceProd": {1}, "ReduceL1": {1}, "ReduceL2": {1},
    "ReduceLogSum": {1}, "ReduceLogSumExp": {1}, "ReduceSumSquare": {1}, "HannWindow": {0}, "HammingWindow": {0},
    "BlackmanWindow": {0}, "DFT": {1, 2}, "STFT": {1, 3}, "MelWeightMatrix": {0, 1, 2, 3, 4}, "AffineGrid": {1},
}
# Ops whose result is their first operand's bytes in the same order (a
# kernel can return a view of its buffer).
VIEW = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
# Ops whose result is not a function of their operands: never folded or merged.
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
                    "Multinomial"}


def flops(name, kind, schema):
    """The op's `cost { flops = ... }` for the kinds without scalar semantics:
    FLOPs of one node, over its operand, result and attribute names."""
    x = ident(schema.inputs[0].name) if schema.inputs else None
    y = ident(schema.outputs[0].name)
    operands = [ident(p.name) for p in schema.inputs]
    if name in ("Conv", "ConvTranspose"):
        # Multiply-adds per output (Conv) or per input (ConvTranspose)
        # element: W's size over its first dim; the bias adds one per output.
        per = f"numel({operands[1]}) / shape({operands[1]})[0]"
        each = y if name == "Conv" else x
        return f"2 * numel({each}) * {per} + present({operands[2]}) * numel({y})"
    if name == "MatMul":
        return f"2 * numel({y}) * shape({x})[rank({x}) - 1]"
    if name == "Gemm":
        return f"2 * numel({y}) * shape({x})[1 - transA] + present({operands[2]}) * numel({y})"
    if kind == "anchor":  # pools: one operation per window element per output
        return f"numel({y}) * prod(kernel_shape)"
    if name in ("Softmax", "LogSoftmax"):
        return f"5 * numel({x})"
    if name in ("LayerNormalization", "InstanceNormalization"):
        return f"8 * numel({x})"
    if kind == "reduction":
        return f"numel({x})"
    if name == "BatchNormalization":
        return f"2 * numel({y})"
    return None


def ident(name):
    return name + "_" if name in KEYWORDS else name


def param(p, result=False, static=False):
    name = ident(p.name)
    if p.option == onnx.defs.OpSchema.FormalParameterOption.Optional:
        name += "?"
    elif p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
        name += "..."
    return name + (": static" if static else "")


def float32_literal(v):
    """The shortest text that reads back as the same float32."""
    text = np.format_float_positional(np.float32(v), unique=True, trim="0")
    return text if len(text) < 12 else np.format_float_scientific(np.float32(v), unique=True, trim="0")


def literal(attr):
    v = onnx.helper.get_attribute_value(attr)
    if attr.type == AttributeProto.FLOAT:
        return float32_literal(v)
    if attr.type == AttributeProto.INT:
        return str(v)
    if attr.type == AttributeProto.STRING:
        return '"%s"' % v.decode()
    if attr.type == AttributeProto.INTS:
        return "[" + ", ".join(str(x) for x in v) + "]"
    if attr.type == AttributeProto.FLOATS:
        return "[" + ", ".join(float32_literal(x) for x in v) + "]"
    return None


def result_type(schema):
    """`: bool` when the result's element type is fixed and differs from the operands'."""
    out = schema.outputs[0]
    constraints = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    first_in = schema.inputs[0].typeStr if schema.inputs else None
    if out.typeStr == first_in:
        return ""
    allowed = constraints.get(out.typeStr, [out.typeStr])
    if len(allowed) == 1 and allowed[0] in FIXED_TYPES:
        return ": " + FIXED_TYPES[allowed[0]]
    return ": any"


def op_line(name, kind):
    s = onnx.defs.get_schema(name, OPSET)
    params = ", ".join(param(p, static=i in STATIC_OPERANDS.get(name, ())) for i, p in enumerate(s.inputs))
    line = f"op {name}({params}){result_type(s)}"
    if len(s.outputs) > 1 or s.outputs[0].option != onnx.defs.OpSchema.FormalParameterOption.Single:
        line += " -> (" + ", ".join(param(p, True) for p in s.outputs) + ")"
    line += " " + kind
    if name in COMMUTATIVE:
        line += " commutative"
    if name in VIEW:
        line += " view"
    if name in NONDETERMINISTIC:
        line += " nondeterministic"
    attrs = []
    for a in sorted(s.attributes.values(), key=lambda a: a.name):
        t = ATTR_TYPES.get(a.type)
        if t is None:
            continue
        default = literal(a.default_value) if a.default_value.name else None
        if default is not None:
            attrs.append(f"{a.name}: {t} = {default}")
        elif a.required:
            attrs.append(f"{a.name}: {t}")
        else:
            attrs.append(f"{a.name}?: {t}")
    if attrs:
        if len(attrs) <= 2:
            line += " { " + ", ".join(attrs) + " }"
        else:
            line += " {\n" + "".join(f"  {a},\n" for a in attrs) + "}"
    semantics = ELEMENTWISE.get(name) or BROADCAST.get(name)
    if semantics:
        line += " = " + semantics
    cost = flops(name, kind, s)
    if cost:
        line += " cost { flops = " + cost + " }"
    return line


def main():
    print("// The op catalog: every op the reference interpreter runs, at ONNX opset 17.")
    print("// Written by rules/gen_op_catalog.py from libonnx's schemas and its own kind")
    print("// and semantics tables; regenerate rather than edit.")
    print('pack ops version "17"')
    for title, kind, names in (("elementwise: one operand shape, scalar semantics", "elementwise", ELEMENTWISE),
                               ("broadcast: multidirectional broadcasting, scalar semantics", "broadcast", BROADCAST),
                               ("reductions and normalizations", "reduction", REDUCTION),
                               ("anchors: accept fused prologues and epilogues", "anchor", ANCHOR),
                               ("injective: data movement, an index map per output element", "injective", INJECTIVE),
                               ("opaque: shape computations and ops that are not fused", "opaque", OPAQUE)):
        print()
        print(f"// ---- {title}")
        for name in sorted(names):
            print(op_line(name, kind))
    print()
    print("// ---- classes")
    print("class Activation = Relu | LeakyRelu | Elu | Celu | Selu | Sigmoid | Tanh | HardSigmoid | HardSwish"
          " | Softplus | Softsign | ThresholdedRelu | Clip")
    print("class Unary = " + " | ".join(sorted(ELEMENTWISE)))
    print("class Binary = " + " | ".join(sorted(BROADCAST)))
    print("class Elementwise = Unary | Binary")
    print("class Reduce = " + " | ".join(n for n in REDUCTION if n.startswith("Reduce")))
    print("class Normalization = LayerNormalization | InstanceNormalization | BatchNormalization")
    print("class Pool = MaxPool | AveragePool | LpPool | GlobalAveragePool | GlobalMaxPool | GlobalLpPool")
    print("class Movement = " + " | ".join(INJECTIVE))
    # Movement that moves nothing: each is an affine map of indices, so a
    # chain of them is a strided view of the buffer it starts from.
    print("class View = Slice | Reshape | Transpose | Squeeze | Unsqueeze | Flatten | Identity")


if __name__ == "__main__":
    main()
