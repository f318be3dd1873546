"""Writes models whose names hold control characters (ESC sequences that
retitle a terminal or clear it, BEL, CR) and bytes that are not UTF-8, into
the folder given (tests/CMakeLists.txt runs fusec on each and checks that
nothing it prints holds them raw). Run with Debian's python3 (python3-onnx):
  /usr/bin/python3 tests/hostile/make_names.py OUT"""
import os
import sys

from onnx import TensorProto, helper

ESC_TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J\x1b[31mforged\r"
# Protobuf's Python API takes only UTF-8 strings: a marker of the same length
# in a name is swapped for bytes that are not UTF-8 after serializing.
MARKER, NOT_UTF8 = b"QQQQ", b"\xff\xfe\xc0Q"


def save(path, graph):
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with open(path, "wb") as f:
        f.write(data.replace(MARKER, NOT_UTF8))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    x, y = "in" + ESC_TITLE, "out" + CLEAR + "QQQQ"
    relu = helper.make_node("Relu", [x], ["mid" + CLEAR], name="node" + ESC_TITLE)
    neg = helper.make_node("Neg", ["mid" + CLEAR], [y], name="QQQQ")
    save(os.path.join(out, "names.onnx"), helper.make_graph(
        [relu, neg], "graph" + ESC_TITLE, [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 3])]))
    # An error that names the node and its operand: an Or of floats.
    bad = helper.make_node("Or", [x, x], ["o"], name="bad" + ESC_TITLE)
    save(os.path.join(out, "names-error.onnx"), helper.make_graph(
        [bad], "g", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("o", TensorProto.BOOL, [2])]))


if __name__ == "__main__":
    main()
