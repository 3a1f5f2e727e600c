"""The AD passes, registered for onnx-ad-opt and pass pipelines.

  onnx-ad-forward{inputs=x,y outputs=z layout=casadi|onnx prefix=fwd_ func=main_graph}
  onnx-ad-reverse{... same options ... checkpoint=k}  (k > 1: Loop/Scan store every
                       k-th state and recompute in between; checkpoint.py)
  onnx-ad-unroll       flattens Scan/Loop with constant trip counts, inlines
                       If on constant conditions (every function)
  onnx-ad-simplify{seeds=fwd_x func=main_graph}
                       folds the ops that depend on the seed arguments (default:
                       those named fwd_* / adj_*); both modes already run it
                       (simplify.py)

Both rewrite one function of the module in place (by default the only one,
or @main_graph): the primal signature stays a prefix, seeds and derivative
results are appended (see signature.py for names and layouts).
"""
from __future__ import annotations

from mlir import ir
from mlir.dialects import func

from onnx_ad_mlir import _op_table
from onnx_ad_mlir._gc import gc_paused
from onnx_ad_mlir.errors import OnnxAdError
from onnx_ad_mlir.passes import register_pass

from . import modes, rules  # noqa: F401  (rules register themselves)
from .signature import LAYOUTS


class PassOptionError(OnnxAdError):
    """A pass option with a bad value."""


def module_opset(module: ir.Operation) -> int:
    """The default-domain opset recorded by the importer (newest if absent)."""
    attrs = module.attributes
    if "onnx.opset_import" in attrs:
        for entry in attrs["onnx.opset_import"]:
            if ir.StringAttr(entry[0]).value in ("", "ai.onnx"):
                return ir.IntegerAttr(entry[1]).value
    return _op_table.MAX_OPSET


def target_function(module: ir.Operation, name: str | None) -> func.FuncOp:
    funcs = [op.opview for op in module.regions[0].blocks[0].operations
             if op.operation.name == "func.func"]
    if name is not None:
        for f in funcs:
            if ir.StringAttr(f.attributes["sym_name"]).value == name:
                return f
        raise PassOptionError(f"no function @{name} in the module")
    if len(funcs) == 1:
        return funcs[0]
    for f in funcs:
        if ir.StringAttr(f.attributes["sym_name"]).value == "main_graph":
            return f
    raise PassOptionError("the module has several functions; choose one with func=<name>")


def check_options(options: dict[str, str], allowed: set[str]) -> None:
    unknown = set(options) - allowed
    if unknown:
        raise PassOptionError(f"unknown option(s) {sorted(unknown)}")


def _names(options: dict[str, str], key: str) -> list[str] | None:
    text = options.get(key)
    if text is None:
        return None
    return [n for n in text.replace(",", " ").split() if n]


def _run(mode, module: ir.Operation, options: dict[str, str]) -> None:
    extra = {}
    options = dict(options)
    for key in ("checkpoint", "directions") if mode is modes.reverse else ("directions",):
        if key in options:
            text = options.pop(key)
            if not text.isdigit() or int(text) < 1:
                raise PassOptionError(f"{key}={text}: expected a positive integer")
            extra[key] = int(text)
    check_options(options, {"inputs", "outputs", "layout", "prefix", "func"})
    layout = options.get("layout", "casadi")
    if layout not in LAYOUTS:
        raise PassOptionError(f"layout={layout}: expected one of {LAYOUTS}")
    f = target_function(module, options.get("func"))
    # The rules' caches and builders keep a few containers per op alive to
    # the end, so the cyclic collector would rescan a growing heap: reverse
    # mode cost 498 us/node at 5*10**4 nodes with it, 424 without (410 at 10**4).
    with module.context, module.location, gc_paused():
        mode(f, module_opset(module), _names(options, "inputs"), _names(options, "outputs"),
             layout, options.get("prefix"), **extra)


@register_pass("onnx-ad-forward", "Forward mode (JVP): seeds fwd_<x>, results fwd_<y>")
def forward_pass(module: ir.Operation, options: dict[str, str]) -> None:
    _run(modes.forward, module, options)


@register_pass("onnx-ad-reverse", "Reverse mode (VJP): seeds adj_<y>, results adj_<x>")
def reverse_pass(module: ir.Operation, options: dict[str, str]) -> None:
    _run(modes.reverse, module, options)


@register_pass("onnx-ad-unroll",
               "Flatten Scan/Loop with constant trip counts; inline If on constant conditions")
def unroll_pass(module: ir.Operation, options: dict[str, str]) -> None:
    from .rules.control_flow import unroll
    check_options(options, set())
    with module.context, module.location:
        for op in module.regions[0].blocks[0].operations:
            if op.operation.name == "func.func":
                unroll(op.operation, module_opset(module))


@register_pass("onnx-ad-simplify",
               "Fold the derivative ops (those depending on the seed arguments): "
               "ReduceMean, coefficient reassociation and factoring")
def simplify_pass(module: ir.Operation, options: dict[str, str]) -> None:
    from .signature import arg_names
    from .simplify import simplify
    check_options(options, {"seeds", "func"})
    f = target_function(module, options.get("func"))
    names = arg_names(f)
    wanted = _names(options, "seeds")
    if wanted is None:
        wanted = [n for n in names if n.startswith(("fwd_", "adj_"))]
    missing = set(wanted) - set(names)
    if missing:
        raise PassOptionError(f"seeds: no argument(s) {sorted(missing)}")
    args = f.regions[0].blocks[0].arguments
    with module.context, module.location:
        simplify(f, module_opset(module), [args[names.index(n)] for n in wanted])
