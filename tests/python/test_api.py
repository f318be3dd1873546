"""The Python module against the command line and the reference interpreter.

Run by ctest (`python-api`) with the build's module on PYTHONPATH."""
import json
import os
import re
import subprocess
import sys

import numpy
import pytest

import fusec

FUSEC = os.environ.get("FUSEC_BINARY", "")


def feeds_for(compiled, seed=0):
    rng = numpy.random.default_rng(seed)
    return {i["name"]: rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in compiled.inputs}


# ---- compile

def test_compile_reports_the_stages(compiled):
    r = compiled.report
    est = r["estimates"]
    # resblock: 11 nodes, the Flatten a view (no kernel); both BatchNorms
    # fold into their Convs, the Relus, the residual Add and the 1x1
    # projection fuse into the Convs' kernels.
    assert est["imported"]["kernels"] == 10
    assert est["rewritten"]["kernels"] == 8
    assert est["fused"]["kernels"] == 5
    assert len(compiled.groups) == 6  # the Flatten's group launches nothing
    assert r["rules_fired"]["fold_bn_into_conv"] == 2
    assert r["fusions"]["conv_bias_activation"] == {"chosen": 1, "candidates": 1}
    assert est["fused"]["bytes"] < est["rewritten"]["bytes"]
    assert r["inputs"] == [{"name": "image", "type": "float[2,3,32,32]"}]
    assert set(r["stage_seconds"]) == {"import", "rewrite", "plan"}


def test_groups_partition_the_graph(compiled):
    groups = compiled.groups
    members = [n for g in groups for n, _ in g.nodes]
    assert len(members) == len(set(members)) == 9  # every node after rewriting, once
    fused = {g.rule: [op for _, op in g.nodes] for g in groups if g.fused}
    assert fused["conv_bias_activation"] == ["Conv", "Relu"]
    assert fused["conv_residual_activation"] == ["Conv", "Add", "Relu"]
    for g in groups:
        views = [op for _, op in g.nodes] == ["Flatten"]  # shares its operand's buffer
        assert g.family and (g.seconds > 0 and g.bytes > 0) != views


def test_report_text_is_what_the_command_prints(compiled, resblock_path, tmp_path):
    if not FUSEC:
        pytest.skip("FUSEC_BINARY not set")
    # The command with a bundle binds N like dims= does; without one, N stays
    # symbolic: compare the report of a compile with the same options.
    c = fusec.compile(resblock_path)
    out = subprocess.run([FUSEC, "compile", "--no-build", resblock_path], capture_output=True, text=True, check=True).stdout
    assert c.report_text == out
    # `compile --json -` is the same report as data, with the plan's groups.
    data = json.loads(subprocess.run([FUSEC, "compile", "--no-build", resblock_path, "--json", "-"], capture_output=True, text=True,
                                     check=True).stdout)
    mine = c.report
    for key in ("estimates", "rules_fired", "fusions", "inputs", "packs", "target"):
        assert data[key] == mine[key], key
    assert data["groups"] == c.plan["groups"]


def test_fused_onnx_has_one_node_per_group(compiled):
    model = compiled.fused_onnx()
    assert len(model.graph.node) == len(compiled.groups)
    fused = [n.name for n in model.graph.node if (n.domain, n.op_type) == ("fusec", "Fused")]
    assert fused == [g.name for g in compiled.groups if g.fused]


def test_models_load_from_bytes_and_protos(resblock_path):
    import onnx
    model = fusec.load_model(resblock_path)
    proto = fusec.compile(model, fuse=False, rewrite=False).fused_onnx()
    assert isinstance(proto, onnx.ModelProto)
    again = fusec.load_model(proto)
    assert again.num_nodes == model.num_nodes == 11
    assert fusec.load_model(proto.SerializeToString(), name="mine").name == "mine"
    assert model.inputs[0]["shape"] == ["N", 3, 32, 32]


# ---- run

def test_opencl_matches_the_interpreter(compiled):
    feeds = feeds_for(compiled)
    got = compiled.run(feeds)
    want = compiled.run(feeds, interpreter=True)
    assert got.keys() == want.keys() == {"logits"}
    assert got["logits"].shape == (2, 10) and got["logits"].dtype == numpy.float32
    numpy.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-5)
    # One timing per launched kernel, named after the plan's groups.
    names = {g.name for g in compiled.groups}
    assert compiled.timings and all(k in names and s >= 0 for k, s in compiled.timings)
    assert compiled.device


def test_the_first_run_may_split_fusions_back_and_the_plan_says_so(resblock_path):
    # The plan read before the first OpenCL run is read again after it: that
    # run times each fused kernel against its members and may plan again.
    compiled = fusec.compile(resblock_path, dims={"N": 2})
    before = compiled.plan
    feeds = feeds_for(compiled)
    got = compiled.run(feeds)
    after = compiled.plan
    assert after is not before
    names = {g.name for g in compiled.groups}
    assert compiled.timings and all(k in names for k, _ in compiled.timings)
    for c in after["candidates"]:
        assert c["status"] in {"chosen", "illegal", "unprofitable", "overlaps", "would-cycle", "split-back"}
        if c["status"] == "split-back":
            assert c["why"].startswith("split back: measured")
    want = compiled.run(feeds, interpreter=True)
    numpy.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-5)


def test_fused_and_unfused_compute_the_same(compiled, resblock_path):
    feeds = feeds_for(compiled, seed=1)
    unfused = fusec.compile(resblock_path, dims={"N": 2}, fuse=False)
    assert unfused.report["estimates"]["fused"]["kernels"] == 0 or not unfused.groups
    numpy.testing.assert_allclose(compiled.run(feeds)["logits"], unfused.run(feeds)["logits"], rtol=1e-4, atol=1e-5)


def test_the_interpreter_takes_any_batch(compiled):
    x = numpy.ones((3, 3, 32, 32), numpy.float32)
    assert compiled.run({"image": x}, interpreter=True)["logits"].shape == (3, 10)


@pytest.mark.parametrize("feeds, message", [
    ({}, "no array for input `image`"),
    ({"image": numpy.zeros((2, 3, 32, 32))}, "is float64; the model takes float32"),
    ({"image": numpy.zeros((1, 3, 32, 32), numpy.float32)}, "compiled for [2, 3, 32, 32]"),
    ({"image": numpy.zeros((2, 3, 32, 32), numpy.float32), "other": numpy.zeros(1)}, "no input `other`"),
    ({"image": "not an array"}, "fusec does not take"),
])
def test_bad_inputs_raise_run_errors(compiled, feeds, message):
    with pytest.raises(fusec.RunError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compiled.run(feeds)


def test_symbolic_dims_must_be_sized_to_run(resblock_path):
    c = fusec.compile(resblock_path)
    with pytest.raises(fusec.RunError, match="dims="):
        c.run({"image": numpy.zeros((1, 3, 32, 32), numpy.float32)})
    with pytest.raises(fusec.CompileError, match="no input dim is named `batch`; the symbolic input dims are N"):
        fusec.compile(resblock_path, dims={"batch": 1})


# ---- packs and their errors

BAD_PACK = """pack mine version "1"
import "core/ops"

rule typo {
  fuse {
    c = Conve(x, w)
    y = Relu(c)
  }
  kernel conv_epilogue
}
"""


def test_a_rule_error_is_located():
    with pytest.raises(fusec.RuleError) as raised:
        fusec.pack_from_string(BAD_PACK, name="mine.fuse")
    e = raised.value
    assert isinstance(e, fusec.Error)
    first = e.diagnostics[0]
    assert (first.severity, first.file, first.line) == ("error", "mine.fuse", 6)
    assert "Conve" in first.message
    assert first.source_line == "    c = Conve(x, w)"
    # The caret sits under `Conve`.
    assert first.caret.index("^") == first.source_line.index("Conve")
    assert str(first).startswith("mine.fuse:6:")
    assert e.message in str(e)


RELU_PACK = """pack mine version "1"
import "core/ops"

// Two Relus in a row are one.
rule relu_relu {
  match {
    a = Relu(x)
    y = Relu(a)
  }
  rewrite {
    y = Relu(x)
  }
}
"""

RELU_MODEL = """<ir_version: 8, opset_import: ["" : 17]>
twice (float[4,8] x) => (float[4,8] y) {
  a = Relu (x)
  y = Relu (a)
}
"""


def test_pack_from_string_fires_its_rule(tmp_path):
    packs = fusec.pack_from_string(RELU_PACK, name="mine.fuse")
    assert ("relu_relu", "rewrite") in packs.rules
    model_file = tmp_path / "twice.onnxtxt"
    model_file.write_text(RELU_MODEL)
    c = fusec.compile(model_file, packs=packs)
    assert c.report["rules_fired"] == {"relu_relu": 1}
    assert c.report["estimates"]["rewritten"]["kernels"] == 1
    x = numpy.linspace(-2, 2, 32, dtype=numpy.float32).reshape(4, 8)
    numpy.testing.assert_array_equal(c.run({"x": x})["y"], numpy.maximum(x, 0))


def test_packs_load_from_files_and_targets(tmp_path):
    target = fusec.load_target()
    assert target.name.startswith("pocl-cpu")
    shipped = fusec.load_packs(target=target)
    assert any(f.endswith("rewrites.fuse") or "core" in f for f in shipped.files)
    assert ("fold_bn_into_conv", "rewrite") in shipped.rules
    with pytest.raises(fusec.TargetError):
        fusec.load_target(tmp_path / "missing.toml")
    with pytest.raises(fusec.RuleError):
        fusec.load_packs([tmp_path / "missing.fuse"])


def test_packs_by_name_and_added_to_the_defaults(tmp_path):
    # Shipped packs by the names imports use; an author's pack with the defaults.
    assert ("reshape_reshape", "rewrite") in fusec.load_packs(["core/ops", "core/rewrites"]).rules
    mine = tmp_path / "mine.fuse"
    mine.write_text('pack mine version "0.1"\nimport "core/ops"\n'
                    'rule my_relu { fuse { y = Relu(x) } kernel pointwise }\n')
    both = fusec.load_packs(add=[mine])
    assert ("my_relu", "fusion") in both.rules and ("fold_bn_into_conv", "rewrite") in both.rules
    assert both.files[-1] == str(mine)


@pytest.mark.parametrize("text", [
    "garbage ###", "\x00\x01\x02", "pack", "rule {", "rule r { fuse { y = Relu(Relu(Relu(" * 200, "import \"../../etc/passwd\"",
    "pack p version \"1\"\nop Foo(x) elementwise = x +\n",
])
def test_hostile_pack_text_is_a_rule_error(text):
    # Hostile or truncated text: an error the script can catch, never a crash.
    with pytest.raises(fusec.RuleError):
        fusec.pack_from_string(text, name="hostile.fuse")


def test_bad_models_raise_model_errors(tmp_path):
    with pytest.raises(fusec.ModelError):
        fusec.load_model(b"\x08\x07 not a model")
    with pytest.raises(fusec.ModelError):
        fusec.load_model(tmp_path / "missing.onnx")
    with pytest.raises(TypeError):
        fusec.load_model(42)


# ---- explain, verify, save

def test_explain_says_why(resblock_path):
    text = fusec.explain(resblock_path, "conv_bias_activation")
    assert "planner: chosen" in text and "no match" in text
    with pytest.raises(fusec.RuleError, match="no rule `nope`"):
        fusec.explain(resblock_path, "nope")


def test_verify_shows_a_rule_sound():
    packs = fusec.pack_from_string(RELU_PACK, name="mine.fuse")
    [verdict] = fusec.verify(packs, rules=["relu_relu"], instances=5, opencl=False)
    assert verdict.rule == "relu_relu" and verdict.sound, verdict


def test_verify_finds_an_unsound_rule():
    wrong = RELU_PACK.replace("y = Relu(x)\n  }", "y = Neg(x)\n  }")
    [verdict] = fusec.verify(fusec.pack_from_string(wrong, name="wrong.fuse"), instances=5, opencl=False)
    assert verdict.kind == "counterexample" and not verdict.sound
    assert "wrong.fuse:5:6: rule `relu_relu`: counterexample" in verdict.counterexample


def test_save_writes_what_compile_writes(compiled, tmp_path):
    written = compiled.save(tmp_path / "out", emit=["onnx", "plan", "report", "opencl", "spirv"])
    out = tmp_path / "out"
    assert (out / "model.fused.onnx").stat().st_size > 0
    assert json.loads((out / "plan.json").read_text())["groups"][1]["rule"] == compiled.groups[1].rule
    assert (out / "report.txt").read_text() == compiled.report_text
    for name, source in compiled.kernel_sources.items():
        assert (out / "kernels" / f"{name}.cl").read_text() == source
        spv = (out / "kernels" / f"{name}.spv").read_bytes()
        assert spv[:4] == bytes.fromhex("03022307")  # the SPIR-V magic number, little-endian
    assert len(written) == 3 + 2 * len(compiled.kernel_sources)
    html = compiled.save(tmp_path / "html", emit=["html"])
    page = open(html[0]).read()
    assert page.startswith("<!doctype html>") and 'class="measured"' in page  # the run's times, on the roofline
    for g in compiled.groups:
        if g.fused:
            assert f'id="group_{g.name}"' in page
    with pytest.raises(ValueError, match="unknown output"):
        compiled.save(tmp_path / "x", emit=["pdf"])


def test_save_replaces_links_and_runs_one_at_a_time(compiled, tmp_path):
    import threading
    out = tmp_path / "links"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / "report.txt").symlink_to(victim)
    compiled.save(out, emit=["report"])
    assert victim.read_text() == "keep" and not (out / "report.txt").is_symlink()
    # Runs from several threads (the GIL is released while running) all agree.
    feeds = feeds_for(compiled, seed=3)
    want = compiled.run(feeds)["logits"]
    results = []

    def runs():
        for _ in range(3):
            results.append(compiled.run(feeds)["logits"])

    threads = [threading.Thread(target=runs) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 24 and all(numpy.array_equal(r, want) for r in results)


def test_the_api_is_documented():
    for f in (fusec.compile, fusec.load_model, fusec.load_packs, fusec.pack_from_string, fusec.explain,
              fusec.verify, fusec.CompiledModel.run, fusec.CompiledModel.save):
        assert f.__doc__ and len(f.__doc__) > 80, f
    package = os.path.dirname(fusec.__file__)
    assert os.path.exists(os.path.join(package, "_fusec.pyi"))
    assert os.path.exists(os.path.join(package, "py.typed"))


# ---- hostile input

def test_names_that_are_not_printable_come_back_escaped():
    from onnx import TensorProto, helper
    # Control characters, and bytes that are not UTF-8 (protobuf's Python API
    # takes only UTF-8: a same-length marker, QQQQ, is swapped after serializing).
    x, y = "in\x1b]0;owned\x07", "out\rQQQQ"
    g = helper.make_graph([helper.make_node("Relu", [x], [y], name="n\x1b[2J")], "g",
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [2, 3])])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    model = fusec.load_model(data.replace(b"QQQQ", b"\xff\xfe\xc0Q"))
    assert model.inputs[0]["name"] == "in\\x1b]0;owned\\x07"
    assert model.outputs[0]["name"] == "out\\x0d\\xff\\xfe\\xc0Q"
    compiled = fusec.compile(model)
    out = compiled.run({model.inputs[0]["name"]: numpy.ones((2, 3), numpy.float32)})
    assert list(out) == ["out\\x0d\\xff\\xfe\\xc0Q"]
    assert all(c.isprintable() for s in compiled.kernel_sources.values() for c in s if c not in "\n\t")


def test_a_pack_string_over_the_file_cap_is_refused():
    with pytest.raises(fusec.RuleError, match="more than the 16777216 a pack may have"):
        fusec.pack_from_string("// " + "x" * (16 << 20) + "\n", name="huge.fuse")


def test_a_wrong_shape_is_refused_before_the_array_is_copied(compiled):
    # A large array of the wrong shape: refused on its shape (nothing copied).
    big = numpy.broadcast_to(numpy.float32(0), (4096, 3, 32, 32))  # a view of one element
    with pytest.raises(fusec.RunError, match="compiled for"):
        compiled.run({"image": big})


def test_compile_builds_with_progress_and_a_second_process_starts_warm(resblock_path, tmp_path):
    # A fresh cache: compile builds (telling progress), a second process on
    # the same model finds every program in the cache.
    env = dict(os.environ, FUSEC_CACHE_DIR=str(tmp_path / "cache"))
    script = (
        "import sys, fusec\n"
        "seen = []\n"
        "c = fusec.compile(sys.argv[1], dims={'N': 1}, progress=lambda phase, done, total: seen.append((phase, done, total)))\n"
        "assert any(p == 'building kernels' and d == t for p, d, t in seen), seen\n"
        "print(len(seen))\n")
    first = subprocess.run([sys.executable, "-c", script, resblock_path], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert int(first.stdout) > 0
    if not FUSEC:
        return
    out = subprocess.run([FUSEC, "run", resblock_path, "--dim", "1"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.search(r"\((\d+) distinct programs, \1 of them from the cache\)", out.stdout), out.stdout


def test_build_helper_compiles_programs_into_the_cache(tmp_path):
    # What Device::prepare starts per further core in a Python process: the
    # helper beside the package, run isolated by this interpreter, compiles
    # canonical programs into the kernel cache; a program that does not
    # build is an error naming its file.
    helper = os.path.join(os.path.dirname(os.path.abspath(fusec.__file__)), "_build_kernels.py")
    env = dict(os.environ, FUSEC_CACHE_DIR=str(tmp_path / "cache"))
    good = tmp_path / "good.cl"
    good.write_text("__kernel void fusec_kernel(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n")
    out = subprocess.run([sys.executable, "-I", helper, "--device", "", str(good)], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert list((tmp_path / "cache").rglob("*.bin"))
    bad = tmp_path / "bad.cl"
    bad.write_text("__kernel void fusec_kernel(__global float* x) { x[get_global_id(0)] *= ; }\n")
    out = subprocess.run([sys.executable, "-I", helper, "--device", "", str(bad)], env=env, capture_output=True, text=True)
    assert out.returncode == 1 and "bad.cl" in out.stderr, out.stderr
