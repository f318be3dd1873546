"""Writes models whose weights live in external data files, a good one and
hostile ones, into the folder given (tests/CMakeLists.txt runs fusec on each).
Run with Debian's python3 (python3-onnx, python3-numpy):
  /usr/bin/python3 tests/hostile/make_external.py OUT"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto


def model(location=None, offset=None, length=None):
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4) / 8, "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if location is not None:  # point the tensor at a file by hand
        t = m.graph.initializer[0]
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", location), ("offset", offset), ("length", length)):
            if v is not None:
                e = t.external_data.add()
                e.key, e.value = k, str(v)
    return m


def main(out):
    shutil.rmtree(out, ignore_errors=True)  # onnx appends to an existing weights file
    os.makedirs(out)
    # The real thing: onnx's own writer, weights in good.weights beside the
    # model, and a test case whose expected output NumPy computes.
    good = model()
    os.makedirs(os.path.join(out, "good", "test_data_set_0"), exist_ok=True)
    onnx.save_model(good, os.path.join(out, "good", "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="good.weights", size_threshold=0)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = x @ (np.arange(16, dtype=np.float32).reshape(4, 4) / 8)
    for name, value in (("input_0.pb", x), ("output_0.pb", y)):
        with open(os.path.join(out, "good", "test_data_set_0", name), "wb") as f:
            f.write(numpy_helper.from_array(value).SerializeToString())
    with open(os.path.join(out, "good", "good.weights"), "rb") as f:
        weights = f.read()
    with open(os.path.join(out, "good.weights"), "wb") as f:  # for the hand-made cases below
        f.write(weights)
    secret = os.path.join(os.path.dirname(os.path.abspath(out)), "secret.bin")
    with open(secret, "wb") as f:
        f.write(b"\0" * 64)
    link = os.path.join(out, "link.weights")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(secret, link)
    cases = {
        "absolute.onnx": model(secret),
        "parent.onnx": model("../secret.bin"),
        "symlink.onnx": model("link.weights"),
        "past-end.onnx": model("good.weights", offset=48, length=64),
        "wrong-length.onnx": model("good.weights", offset=0, length=8),
        "missing.onnx": model("nothing.weights"),
    }
    for name, m in cases.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(m.SerializeToString())
    # The weights at the end of a 3 GiB sparse file: only their 64 bytes are
    # read (fusec once read the whole file, for each tensor).
    big = 3 << 30
    with open(os.path.join(out, "sparse.weights"), "wb") as f:
        f.seek(big - 64)  # a hole before: the file takes 64 bytes of disk
        f.write(weights[:64])
    with open(os.path.join(out, "sparse.onnx"), "wb") as f:
        f.write(model("sparse.weights", offset=big - 64, length=64).SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1])
