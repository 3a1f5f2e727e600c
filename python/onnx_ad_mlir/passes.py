"""A registry of Python passes and a `--pass-pipeline` parser that mixes them
with upstream MLIR passes in one PassManager.

    @register_pass("onnx-ad-forward", "Forward-mode derivative of a function")
    def forward(module: ir.Operation, options: dict[str, str]) -> None: ...

    with ctx:  # our passes are created in the current context
        pm = PassManager("builtin.module")
        build_pipeline(pm, "builtin.module(func.func(cse),onnx-ad-forward{inputs=x,y})")
        pm.run(module.operation)

Our passes run on the `builtin.module` op only: the bindings' external passes
cannot be scheduled on nested ops (see docs/DESIGN.md), and AD needs the
whole module anyway.  A pass reports failure by raising an
`onnx_ad_mlir.errors.OnnxAdError`; the exception propagates out of `pm.run`.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

from mlir import ir
from mlir.passmanager import PassManager

from onnx_ad_mlir.errors import OnnxAdError

PassFn = Callable[[ir.Operation, "dict[str, str]"], None]


@dataclasses.dataclass(frozen=True)
class RegisteredPass:
    argument: str
    description: str
    fn: PassFn


_PASSES: dict[str, RegisteredPass] = {}


class PipelineError(OnnxAdError, ValueError):
    """A `--pass-pipeline` string that cannot be built."""


def register_pass(argument: str, description: str) -> Callable[[PassFn], PassFn]:
    """Decorator registering `fn(module_op, options)` under `argument`."""
    def decorate(fn: PassFn) -> PassFn:
        if argument in _PASSES and _PASSES[argument].fn is not fn:
            raise ValueError(f"pass '{argument}' is already registered")
        _PASSES[argument] = RegisteredPass(argument, description, fn)
        return fn
    return decorate


def registered_passes() -> dict[str, RegisteredPass]:
    """All registered passes; importing the transforms package registers them."""
    importlib.import_module("onnx_ad_mlir.transforms")
    return dict(_PASSES)


def build_pipeline(pm: PassManager, text: str) -> None:
    """Adds the passes of a textual pipeline to `pm` (anchored on
    builtin.module).  `text` is `builtin.module(...)` or a bare list.  The
    context of `pm` must be the current one (`with ctx:`)."""
    passes = registered_passes()
    body = _strip_anchor(text.strip())
    for element in _split_top(body, text):
        name, inner = _element_name(element)
        if name in passes:
            if inner.startswith("("):
                raise PipelineError(f"'{name}' is a pass, not an op anchor")
            _add_python_pass(pm, passes[name], parse_options(inner, name))
            continue
        if inner.startswith("("):
            for nested in _pass_names(inner):
                if nested in passes:
                    raise PipelineError(
                        f"pass '{nested}' runs on builtin.module only; "
                        f"move it out of '{name}(...)'")
        try:
            pm.add(element)
        except ValueError as e:
            raise PipelineError(f"invalid pass pipeline element '{element}': "
                                f"{_first_line(e)}") from None


def parse_options(text: str, pass_name: str = "") -> dict[str, str]:
    """`{key=value key2=a,b}` -> {"key": "value", "key2": "a,b"}, MLIR's pass
    option syntax: space-separated, values may be quoted or braced; a bare
    key means "true"."""
    text = text.strip()
    if not text:
        return {}
    if not (text.startswith("{") and text.endswith("}")):
        raise PipelineError(f"bad options for '{pass_name}': {text}")
    options: dict[str, str] = {}
    for item in _split(text[1:-1], " "):
        key, eq, value = item.partition("=")
        if not key:
            raise PipelineError(f"bad option '{item}' for '{pass_name}'")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        options[key.strip()] = value if eq else "true"
    return options


def _add_python_pass(pm: PassManager, p: RegisteredPass, options: dict[str, str]) -> None:
    def run(op: ir.Operation, _pass: object) -> None:
        p.fn(op, options)
    # No op_name: the bindings mis-schedule anchored external passes.
    pm.add(run, name=p.fn.__name__, argument=p.argument, description=p.description)


def _strip_anchor(text: str) -> str:
    if text.startswith("builtin.module(") and text.endswith(")"):
        if _matching_paren(text, len("builtin.module")) == len(text) - 1:
            return text[len("builtin.module("):-1]
    return text


def _split_top(body: str, full: str) -> list[str]:
    try:
        return _split(body, ",")
    except ValueError as e:
        raise PipelineError(f"invalid pass pipeline '{full}': {e}") from None


def _element_name(element: str) -> tuple[str, str]:
    """'cse' -> ('cse', ''); 'a{x=1}' -> ('a', '{x=1}'); 'func.func(cse)' ->
    ('func.func', '(cse)')."""
    for i, c in enumerate(element):
        if c in "({":
            return element[:i].strip(), element[i:].strip()
    return element.strip(), ""


def _pass_names(nested: str) -> list[str]:
    """Every pass and anchor name inside a nested '(...)' pipeline."""
    names = []
    for element in _split(nested[1:-1], ","):
        name, inner = _element_name(element)
        names.append(name)
        if inner.startswith("("):
            names.extend(_pass_names(inner))
    return names


def _split(text: str, sep: str) -> list[str]:
    """Splits on `sep` outside (), {} and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "({":
            depth += 1
        elif c in ")}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '{c}'")
        elif c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth or quote:
        raise ValueError("unbalanced brackets or quotes")
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _matching_paren(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return -1


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
