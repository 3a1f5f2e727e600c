"""Diagnostics for the mlir-opt-style tools: collection, printing, and the
`--verify-diagnostics` checker (`// expected-error @below {{message}}`).

Notes are matched only against `expected-note` lines; unexpected notes are
ignored (the bindings attach a "see current operation" note to verifier
errors that mlir-opt would not print).
"""
from __future__ import annotations

import dataclasses
import re

from mlir import ir

_LOC = re.compile(r'"(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)')
_EXPECTED = re.compile(
    r"expected-(?P<kind>error|warning|remark|note)\s*"
    r"(?:@(?P<where>above|below|[+-]\d+|\d+))?\s*\{\{(?P<text>.*?)\}\}")
_SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.REMARK: "remark",
    ir.DiagnosticSeverity.NOTE: "note",
}


@dataclasses.dataclass
class Diag:
    kind: str               # error | warning | remark | note
    message: str
    line: int | None = None  # 1-based line in the input file, if known
    col: int | None = None
    notes: list["Diag"] = dataclasses.field(default_factory=list)

    def format(self, filename: str) -> str:
        where = f"{filename}:{self.line}:{self.col}: " if self.line else ""
        return f"{where}{self.kind}: {self.message}"


def from_mlir(d: ir.DiagnosticInfo | ir.Diagnostic) -> Diag:
    """Copies a diagnostic out of MLIR (the objects die with the handler)."""
    m = _LOC.search(str(d.location))
    line, col = (int(m["line"]), int(m["col"])) if m else (None, None)
    return Diag(_SEVERITY.get(d.severity, "error"), d.message, line, col,
                [from_mlir(n) for n in d.notes])


@dataclasses.dataclass
class _Expected:
    kind: str
    text: str
    line: int
    at: int  # line of the directive itself, for reporting
    matched: bool = False


def _expectations(text: str, first_line: int) -> list[_Expected]:
    out = []
    lines = text.splitlines()
    for i, src in enumerate(lines):
        at = first_line + i
        for m in _EXPECTED.finditer(src):
            where = m["where"]
            if where is None:
                line = at
            elif where == "above":
                line = at - 1
            elif where == "below":
                line = at + 1
            elif where[0] in "+-":
                line = at + int(where)
            else:
                line = int(where)
            out.append(_Expected(m["kind"], m["text"], line, at))
    return out


def verify(diags: list[Diag], text: str, first_line: int, filename: str) -> list[str]:
    """Checks `diags` against the chunk's expected-* directives; returns the
    mismatches as error lines (empty: verified)."""
    expected = _expectations(text, first_line)
    problems = []

    def match(d: Diag) -> bool:
        for e in expected:
            if (not e.matched and e.kind == d.kind and e.line == d.line
                    and e.text in d.message):
                e.matched = True
                return True
        return False

    for d in diags:
        if not match(d):
            problems.append(f"{filename}:{d.line or 0}:{d.col or 0}: error: "
                            f"unexpected {d.kind}: {d.message}")
        for n in d.notes:
            match(n)
    for e in expected:
        if not e.matched:
            problems.append(f"{filename}:{e.at}: error: expected {e.kind} "
                            f"\"{e.text}\" was not produced")
    return problems
