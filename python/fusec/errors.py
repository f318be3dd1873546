"""The exceptions fusec raises, and the located diagnostics they carry.

Every failure of the library is a ``fusec.Error``; a mistake in a rule pack
is a ``RuleError`` whose ``diagnostics`` say where, as ``fusec check``
prints them::

    try:
        fusec.pack_from_string(text, name="mine.fuse")
    except fusec.RuleError as e:
        for d in e.diagnostics:
            print(d)          # mine.fuse:3:7: error: unknown op `Conve` ...
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

__all__ = ["Diagnostic", "Error", "ModelError", "RuleError", "TargetError", "CompileError",
           "DeviceError", "RunError"]


@dataclass(frozen=True)
class Diagnostic:
    """One thing said about a pack file, located.

    ``line`` and ``column`` are 1-based (0 without a location);
    ``source_line`` is the line quoted and ``caret`` the marker under it.
    """

    severity: str  #: ``error``, ``warning`` or ``note``
    file: str
    line: int
    column: int
    message: str
    source_line: str = ""
    caret: str = ""

    def __str__(self) -> str:
        if not self.file:
            return f"{self.severity}: {self.message}"
        return (f"{self.file}:{self.line}:{self.column}: {self.severity}: {self.message}\n"
                f"  {self.source_line}\n  {self.caret}")


class Error(Exception):
    """Base of every error fusec raises. ``message`` is the text a person
    reads; ``diagnostics`` the located diagnostics behind it (may be empty)."""

    def __init__(self, message: str, diagnostics: List[Diagnostic] | None = None):
        super().__init__(message)
        self.message = message
        self.diagnostics: List[Diagnostic] = list(diagnostics or [])

    def __str__(self) -> str:
        if not self.diagnostics:
            return self.message
        return self.message + "\n" + "\n".join(str(d) for d in self.diagnostics)


class ModelError(Error):
    """The model cannot be read or imported (not ONNX, an unsupported op or type)."""


class RuleError(Error):
    """A rule pack has errors (syntax, unknown ops, bad guards), or a rule
    asked for does not exist; ``diagnostics`` locate each."""


class TargetError(Error):
    """The target profile cannot be read or is not valid."""


class CompileError(Error):
    """A compiler stage failed on this model (shapes, kernel generation)."""


class DeviceError(Error):
    """No OpenCL device (matching the target's or the caller's choice)."""


class RunError(Error):
    """Running the compiled model failed, or its inputs do not fit it."""
