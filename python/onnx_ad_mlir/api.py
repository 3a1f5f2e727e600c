"""The model-level API: `forward`, `reverse`, `family` on `onnx.ModelProto`.

Each call imports the model into a fresh MLIR context, runs one AD pass and
the cleanup pipeline (canonicalize, CSE), and exports a new model; the input
model is never modified. Names and layouts follow CasADi by default (see
transforms/signature.py): `fwd_<x>`, `adj_<y>`, seed dims `nfwd` / `nadj`.
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

import onnx
from mlir import ir
from mlir.passmanager import PassManager

from . import output_files
from ._dialect import new_context
from .exporter import export_onnx
from .importer import import_onnx

CLEANUP = "builtin.module(func.func(canonicalize,cse))"


def _transform(model: onnx.ModelProto | str | os.PathLike,
               run: Callable[[ir.Module], None]) -> onnx.ModelProto:
    from onnx_ad_mlir import transforms  # noqa: F401  (registers rules)
    with new_context() as ctx:
        module = import_onnx(model, context=ctx)
        run(module)
        PassManager.parse(CLEANUP).run(module.operation)
        return export_onnx(module)


def _mode(kind: str, model, inputs, outputs, layout: str, prefix: str | None,
          checkpoint: int = 1, directions: int | None = None) -> onnx.ModelProto:
    from onnx_ad_mlir.transforms import passes
    options = {"layout": layout}
    if checkpoint != 1:
        options["checkpoint"] = str(checkpoint)
    if directions is not None:
        options["directions"] = str(directions)
    if inputs is not None:
        options["inputs"] = ",".join(inputs)
    if outputs is not None:
        options["outputs"] = ",".join(outputs)
    if prefix is not None:
        options["prefix"] = prefix
    fn = passes.forward_pass if kind == "fwd" else passes.reverse_pass
    return _transform(model, lambda m: fn(m.operation, options))


def forward(model: onnx.ModelProto | str | os.PathLike, inputs: Sequence[str] | None = None,
            outputs: Sequence[str] | None = None, prefix: str | None = None,
            layout: str = "casadi", directions: int | None = None) -> onnx.ModelProto:
    """The forward-derivative model: primal signature, then seeds `fwd_<x>`
    for `inputs` (default: every float input) and results `fwd_<y>` =
    J . fwd_x for `outputs` (default: every float output). Any number of
    seed directions per evaluation, or exactly `directions` (a static
    extent, for compilers that want static shapes)."""
    return _mode("fwd", model, inputs, outputs, layout, prefix, directions=directions)


def reverse(model: onnx.ModelProto | str | os.PathLike, inputs: Sequence[str] | None = None,
            outputs: Sequence[str] | None = None, prefix: str | None = None,
            layout: str = "casadi", checkpoint: int = 1,
            directions: int | None = None) -> onnx.ModelProto:
    """The adjoint model: primal signature, then seeds `adj_<y>` for `outputs`
    and results `adj_<x>` = J^T . adj_y for `inputs`. A reverse sweep through
    a Loop/Scan stores its states and, of each step's values computed from
    costly ops (MatMul, Conv, ...), those the reversal reads; it recomputes
    the rest of the step. `checkpoint=k` (> 1): it stores every k-th state
    and recomputes the steps in between (less memory, about one more forward
    sweep of time). `directions`: as forward's."""
    return _mode("adj", model, inputs, outputs, layout, prefix, checkpoint, directions)


def unroll(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    """The model with every Scan/Loop whose trip count is a constant flattened
    (and every If on a constant condition inlined); other loops are kept."""
    from onnx_ad_mlir.transforms import passes
    return _transform(model, lambda m: passes.unroll_pass(m.operation, {}))


def sibling(path: str | os.PathLike, kind: str) -> str:
    """CasADi's sibling file name: `<dir>/<kind>_<file>`."""
    folder, name = os.path.split(os.fspath(path))
    return os.path.join(folder, f"{kind}_{name}")


def save_atomic(model: onnx.ModelProto, path: str | os.PathLike) -> None:
    """Writes `model` so that `path` is either absent/old or complete."""
    output_files.save_model(model, path)


def _outputs_typed_as(model: onnx.ModelProto, derived: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy whose output shapes are the static ones `derived`
    (which recomputes them) declares where `model` leaves extents unknown:
    CasADi reads an output's shape from the primal file and a derivative's
    seed shape from its sibling, and refuses the pair when they differ
    (skl2onnx declares a 2-target MLPRegressor's output [?, 1])."""
    static = {o.name: o.type.tensor_type.shape for o in derived.graph.output
              if o.type.tensor_type.HasField("shape") and
              all(d.HasField("dim_value") for d in o.type.tensor_type.shape.dim)}
    refined = []
    for i, o in enumerate(model.graph.output):
        shape, mine = static.get(o.name), o.type.tensor_type
        if shape is None or not mine.HasField("shape") or len(mine.shape.dim) != len(shape.dim):
            continue
        dims = list(zip(mine.shape.dim, shape.dim))
        if all(a.HasField("dim_value") for a, _ in dims) or \
                any(a.HasField("dim_value") and a.dim_value != b.dim_value for a, b in dims):
            continue
        refined.append((i, shape))
    if not refined:
        return model
    typed = onnx.ModelProto()
    typed.CopyFrom(model)
    for i, shape in refined:
        typed.graph.output[i].type.tensor_type.shape.CopyFrom(shape)
    return typed


def family(model: onnx.ModelProto | str | os.PathLike, path: str | os.PathLike,
           inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
           second_order: bool = True, forward_sibling: bool = False) -> list[str]:
    """Writes the files CasADi's ONNX backend discovers beside a model:
    `f.onnx`, `adj_f.onnx` and (second_order) `fwd_adj_f.onnx`, the forward
    derivative of the adjoint with every adjoint input seeded (CasADi needs
    the complete signature). Returns the paths written (`path` itself
    included, left as it is when it is the model's own file)."""
    source = None if isinstance(model, onnx.ModelProto) else os.fspath(model)
    written = [os.fspath(path), sibling(path, "adj")] + \
        ([sibling(path, "fwd")] if forward_sibling else []) + \
        ([sibling(sibling(path, "adj"), "fwd")] if second_order else [])
    if source is not None:
        if any(output_files.same_file(source, p) for p in written[1:]):
            raise ValueError(f"refusing to overwrite the input file {source}")
        model = onnx.load(source)
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    adjoint = reverse(model, inputs=inputs, outputs=outputs)
    if source is None or not output_files.same_file(source, path):
        save_atomic(_outputs_typed_as(model, adjoint), path)
    save_atomic(adjoint, written[1])
    if forward_sibling:
        save_atomic(forward(model, inputs=inputs, outputs=outputs), written[2])
    if second_order:
        primal_outputs = {o.name for o in model.graph.output}
        produced = [o.name for o in adjoint.graph.output if o.name not in primal_outputs]
        save_atomic(forward(adjoint, outputs=produced), written[-1])
    return written
