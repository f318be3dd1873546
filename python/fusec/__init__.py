"""fusec: a declarative operator-fusion compiler, from Python.

Compile an ONNX model with rule packs for a target, look at what fused, run
the generated OpenCL kernels and compare with the reference interpreter::

    import numpy, fusec

    compiled = fusec.compile("model.onnx", dims={"batch": 1})
    print(compiled.report_text)                 # what `fusec compile` prints
    for g in compiled.groups:                   # the fused kernels
        print(g.name, g.family, g.rule, [op for _, op in g.nodes])
    x = numpy.random.rand(1, 3, 224, 224).astype(numpy.float32)
    out = compiled.run({"input": x})            # on OpenCL
    ref = compiled.run({"input": x}, interpreter=True)

Packs are files (``fusec.load_packs``) or text (``fusec.pack_from_string``);
without packs, the target's default packs are used, and without a target,
the shipped ``pocl-cpu`` profile. Errors are ``fusec.Error`` subclasses;
pack errors carry located diagnostics (``fusec.RuleError.diagnostics``).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _fusec
from .errors import (CompileError, DeviceError, Diagnostic, Error, ModelError, RuleError, RunError,
                     TargetError)

__all__ = [
    "load_model", "load_packs", "pack_from_string", "load_target", "compile", "explain", "verify",
    "Model", "Packs", "Target", "CompiledModel", "Group", "Verdict",
    "Error", "ModelError", "RuleError", "TargetError", "CompileError", "DeviceError", "RunError", "Diagnostic",
]

Model = _fusec.Model
Packs = _fusec.Packs
Target = _fusec.Target

# Kernel builds spread over the cores, as the CLI's: helper processes run
# _build_kernels.py beside this file with this interpreter, isolated (-I:
# nothing from the working folder or PYTHONPATH is imported).
if sys.executable:
    _fusec.set_build_helper([sys.executable, "-I", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                "_build_kernels.py")])

PathLike = Union[str, "os.PathLike[str]"]
ModelLike = Union[PathLike, bytes, Any, "Model"]  # Any: an onnx.ModelProto
PacksLike = Union["Packs", Sequence[PathLike], None]
TargetLike = Union["Target", PathLike, None]

#: What ``CompiledModel.save`` can write, as ``fusec compile --emit`` names them.
EMIT_KINDS = ("onnx", "plan", "report", "html", "opencl", "spirv")


def load_model(model: ModelLike, name: Optional[str] = None) -> Model:
    """Imports an ONNX model: a file path (binary ``.onnx`` or ONNX text),
    the serialized bytes, or an ``onnx.ModelProto``. ``name`` is what errors
    and reports call it (default: the path, or ``<bytes>``/``<ModelProto>``).

    Raises ``ModelError`` when it is not a model fusec can import."""
    if isinstance(model, _fusec.Model):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _fusec.load_model_bytes(bytes(model), name or "<bytes>")
    if isinstance(model, (str, os.PathLike)):
        return _fusec.load_model_file(os.fspath(model))
    serialize = getattr(model, "SerializeToString", None)
    if callable(serialize):
        return _fusec.load_model_bytes(serialize(), name or getattr(getattr(model, "graph", None), "name", "")
                                       or "<ModelProto>")
    raise TypeError(f"load_model takes a path, bytes or an onnx.ModelProto, not {type(model).__name__}")


def load_target(path: Optional[PathLike] = None) -> Target:
    """Loads a target profile (``.toml``); without a path, the shipped
    ``pocl-cpu`` profile. Raises ``TargetError``."""
    if isinstance(path, _fusec.Target):
        return path
    return _fusec.load_target(os.fspath(path) if path is not None else "")


def load_packs(paths: Iterable[PathLike] = (), target: TargetLike = None, add: Iterable[PathLike] = ()) -> Packs:
    """Loads rule packs (``.fuse`` files, pack folders, or shipped packs by
    name: ``"core/ops"``, ``"cnn"``) and what they import, checked. With no
    paths, ``target``'s default packs (the shipped pocl-cpu profile's without
    a target); ``add`` is loaded after them (``load_packs(add=["mine.fuse"])``:
    your rules together with the defaults). Raises ``RuleError`` with every
    diagnostic located; warnings are kept in ``Packs.warnings``."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if isinstance(add, (str, os.PathLike)):
        add = [add]
    return _fusec.load_packs([os.fspath(p) for p in paths], _target_or_none(target), [os.fspath(p) for p in add])


def pack_from_string(text: str, name: str = "<string>.fuse") -> Packs:
    """Loads one pack given as text. ``name`` is the file name its
    diagnostics give; its ``import``s resolve next to that name, then among
    the shipped packs (``import "core/ops"`` for the op catalog). Raises ``RuleError``."""
    return _fusec.pack_from_string(text, name)


@dataclass(frozen=True)
class Group:
    """One kernel of the plan: a fused group, or a single node."""

    name: str                        #: kernel name (``g3_conv_epilogue``)
    family: str                      #: kernel family that builds it
    rule: str                        #: fusion rule that formed it ('' for a single node)
    nodes: List[Tuple[str, str]]     #: (node name, op) in order
    flops: float                     #: estimated by the cost model
    bytes: float                     #: DRAM traffic, estimated
    seconds: float                   #: roofline time, estimated
    joules: float                    #: energy, estimated

    @property
    def fused(self) -> bool:
        return len(self.nodes) > 1


@dataclass(frozen=True)
class Verdict:
    """What ``fusec.verify`` found for one rule."""

    rule: str
    kind: str           #: proved, verified, counterexample, no instance, not checked
    instances: int      #: instances checked
    detail: str         #: over what it was proved, or why not
    counterexample: str  #: a runnable description ('' when sound)

    @property
    def sound(self) -> bool:
        return self.kind in ("proved", "verified")


#: ``progress(phase, done, total)``: how far a build is.
Progress = Callable[[str, int, int], None]


def terminal_progress(phase: str, done: int, total: int) -> None:
    """The default ``progress`` of builds: one line on stderr, redrawn in
    place, when stderr is a terminal (as the ``fusec`` command draws it)."""
    if not sys.stderr.isatty() or total <= 0:
        return
    filled = 24 * min(done, total) // total
    end = "\r\x1b[K" if done >= total else ""
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (24 - filled)}] {phase} {done}/{total}\x1b[K{end}")
    sys.stderr.flush()


class CompiledModel:
    """A model compiled by ``fusec.compile``: its report, plan, kernels, and
    a ``run`` on OpenCL or the reference interpreter."""

    def __init__(self, native: "_fusec.Compiled"):
        self._native = native
        self._plan: Optional[Dict[str, Any]] = None
        self._sources: Optional[Dict[str, str]] = None
        #: (kernel, seconds) per launch of the last OpenCL run, from profiling events.
        self.timings: List[Tuple[str, float]] = []

    @property
    def report(self) -> Dict[str, Any]:
        """The report as data: ``estimates`` (``imported``, ``rewritten``,
        ``fused``; each kernels, flops, bytes, seconds, joules),
        ``rules_fired``, ``fusions`` (rule: chosen and candidates), the
        inputs as compiled, stage times."""
        return self._native.report()

    @property
    def report_text(self) -> str:
        """The report as ``fusec compile`` prints it."""
        return self._native.report_text()

    def html_report(self) -> str:
        """The report as one self-contained HTML page: the graph drawn by
        Graphviz with each fused group boxed and coloured by kernel family
        (linking to its rule), the groups on the target's roofline (with the
        last ``run``'s measured times, if any), the rules fired, the top
        kernels."""
        measured: Dict[str, float] = {}
        for name, seconds in self.timings:
            measured[name] = measured.get(name, 0.0) + seconds
        return self._native.html_report(measured)

    @property
    def plan(self) -> Dict[str, Any]:
        """The plan as ``plan.json`` holds it: groups, every candidate with
        its fate and reason, the estimates before and after."""
        if self._plan is None:
            self._plan = self._native.plan()
        return self._plan

    @property
    def groups(self) -> List[Group]:
        """The plan's groups, in order (empty when compiled with ``fuse=False``)."""
        return [Group(g["name"], g["kernel"], g["rule"], [(n["name"], n["op"]) for n in g["nodes"]],
                      g["flops"], g["bytes"], g["seconds"], g["joules"]) for g in self.plan["groups"]]

    @property
    def inputs(self) -> List[Dict[str, Any]]:
        """Each graph input's name, dtype and shape as compiled (symbolic
        dims are names)."""
        return self._native.inputs()

    @property
    def kernel_sources(self) -> Dict[str, str]:
        """Group name -> generated OpenCL C, in launch order (reshapes that are
        views and Concats written in place have none). Needs static shapes:
        compile with ``dims=`` when the model has symbolic dims."""
        if self._sources is None:
            self._sources = dict(self._native.kernel_sources())
        return self._sources

    def fused_onnx(self) -> Any:
        """The fused graph as an ``onnx.ModelProto`` (each group one
        ``fusec.Fused`` node), as ``model.fused.onnx``."""
        import onnx
        return onnx.load_from_string(self._native.fused_onnx())

    def build(self, device: str = "", progress: Optional[Progress] = terminal_progress) -> "CompiledModel":
        """Builds the model for OpenCL now, on the target's device (or the
        first whose name contains ``device``): each fused kernel timed
        against its members (fusions that lose are split back), then every
        distinct kernel program, each compiled once and kept in the kernel
        cache, so a later process on the same model starts from it. Runs
        call it first when it has not been called. ``progress(phase, done,
        total)`` is told as work completes (the default draws a line on a
        terminal; None: silent). Returns ``self``. Raises ``DeviceError``
        without a device, ``RunError`` for a model with unsized dims."""
        self._native.build(device, progress)
        self._plan = self._sources = None  # timing fusions may have planned again
        return self

    def run(self, inputs: Mapping[str, Any], interpreter: bool = False, device: str = "") -> Dict[str, Any]:
        """Runs the model on ``inputs`` (input name -> numpy array of the
        model's dtype) and returns output name -> numpy array.

        On OpenCL (the default) the program is built on the first call, on
        the target's device (or the first whose name contains ``device``);
        ``timings`` then holds each kernel's time. ``interpreter=True`` runs
        the model as imported on the reference interpreter instead. The
        first OpenCL run of a fused model times each fused kernel against its
        members unfused and splits back those that lose (``plan`` then says
        ``split-back`` and why). Raises ``RunError`` for missing, extra or
        mis-shaped inputs, ``DeviceError`` without a device."""
        outputs, times = self._native.run(dict(inputs), interpreter, device, terminal_progress)
        if not interpreter:
            self.timings = list(times)
            self._plan = self._sources = None  # the first run may have planned again
        return outputs

    @property
    def device(self) -> str:
        """The OpenCL device of the runs so far ('' before the first)."""
        return self._native.device_name()

    def save(self, directory: PathLike, emit: Sequence[str] = ("onnx", "plan", "report")) -> List[str]:
        """Writes what ``fusec compile -o DIRECTORY --emit ...`` writes:
        ``model.fused.onnx``, ``plan.json``, ``report.txt``, ``report.html``
        (``html``: with the last run's times), and with
        ``opencl``/``spirv`` one ``kernels/<group>.cl`` (``.spv``, validated)
        per kernel. Returns the paths written."""
        unknown = [e for e in emit if e not in EMIT_KINDS]
        if unknown:
            raise ValueError(f"unknown output {unknown[0]!r}; outputs are {', '.join(EMIT_KINDS)}")
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        written: List[str] = []

        def write(relative: str, data: Union[str, bytes]) -> None:
            # As the command line writes: a temporary file renamed into place,
            # so a link already at the path is replaced, not followed.
            path = os.path.join(directory, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".fusec-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data.encode() if isinstance(data, str) else data)
                os.chmod(temporary, 0o644)
                os.replace(temporary, path)
            except BaseException:
                if os.path.exists(temporary):
                    os.unlink(temporary)
                raise
            written.append(path)

        if "onnx" in emit:
            write("model.fused.onnx", self._native.fused_onnx())
        if "plan" in emit:
            write("plan.json", json.dumps(self.plan, indent=2) + "\n")
        if "report" in emit:
            write("report.txt", self.report_text)
        if "html" in emit:
            write("report.html", self.html_report())
        if "opencl" in emit or "spirv" in emit:
            for name, source in self.kernel_sources.items():
                if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
                    raise CompileError(f"kernel name {name!r} is not a plain file name")
                write(f"kernels/{name}.cl", source)
                if "spirv" in emit:
                    write(f"kernels/{name}.spv", _fusec.spirv(source, name))
        return written

    def __repr__(self) -> str:
        e = self.report["estimates"]
        return (f"<fusec.CompiledModel {self.report['model']!r} for {self.report['target']}: "
                f"{e['imported']['kernels']} -> {e['fused']['kernels']} kernels>")


def _target_or_none(target: TargetLike) -> Optional[Target]:
    return None if target is None else load_target(target)


def _packs_or_none(packs: PacksLike, target: Optional[Target]) -> Optional[Packs]:
    if packs is None or isinstance(packs, _fusec.Packs):
        return packs
    return load_packs(packs, target)


def compile(model: ModelLike, packs: PacksLike = None, target: TargetLike = None,
            dims: Optional[Mapping[str, int]] = None, fuse: bool = True, rewrite: bool = True,
            build: bool = True, progress: Optional[Progress] = terminal_progress) -> CompiledModel:
    """Compiles ``model`` (anything ``load_model`` takes) through the
    pipeline's stages: import (symbolic dims sized from ``dims``, shapes and
    constants folded), rewrite (the packs' rewrite rules, CSE), plan (fusion
    for the target, legality from the kernel families) and codegen.

    ``packs``: a ``Packs``, pack paths, or None for the target's default
    packs. ``target``: a ``Target``, a profile path, or None for the shipped
    pocl-cpu profile. ``dims``: sizes of symbolic input dims by name
    (``{"batch": 1}``); kernels and runs need every dim sized.
    ``fuse=False`` plans one kernel per node; ``rewrite=False`` skips the
    rewrite rules. With ``build`` (the default), the kernels are built for
    OpenCL before it returns (``CompiledModel.build``, told to
    ``progress``) where they can be: not on a machine without an OpenCL
    device, nor for a model with unsized dims; the first run builds them
    then. Raises ``ModelError``, ``RuleError``, ``TargetError`` or
    ``CompileError``."""
    t = _target_or_none(target)
    p = _packs_or_none(packs, t)
    m = load_model(model)
    compiled = CompiledModel(_fusec.compile(m, p, t, dict(dims or {}), fuse, rewrite))
    if build:
        try:
            compiled.build(progress=progress)
        except (DeviceError, RunError):
            pass  # no device here, or dims to size: the first run builds, or says why
    return compiled


def explain(model: ModelLike, rule: str, node: Optional[str] = None, packs: PacksLike = None,
            target: TargetLike = None) -> str:
    """Why ``rule`` fires or not on ``model`` (at ``node``, or wherever it
    could start): as ``fusec explain`` prints it. Raises ``RuleError`` for
    an unknown rule or node."""
    t = _target_or_none(target)
    return _fusec.explain(load_model(model), rule, node or "", _packs_or_none(packs, t), t)


def verify(packs: PacksLike, rules: Optional[Sequence[str]] = None, instances: int = 40, seed: int = 1,
           opencl: bool = True, target: TargetLike = None) -> List[Verdict]:
    """Shows each rule sound, as ``fusec verify``: a symbolic proof where the
    rule is elementwise, else checks on ``instances`` small graphs it
    matches (fusion rules on OpenCL, unless ``opencl=False``). Returns one
    ``Verdict`` per rule (of ``rules`` when given)."""
    t = _target_or_none(target)
    p = _packs_or_none(packs, t)
    if p is None:
        p = load_packs((), t)
    return [Verdict(*v) for v in _fusec.verify(p, list(rules or []), instances, seed, opencl, t)]
