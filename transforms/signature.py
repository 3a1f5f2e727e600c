"""Function signatures of derivative models: names, seed layouts, arguments.

A derivative function keeps the primal signature as a prefix and appends
seeds and derivative results, named by CasADi's conventions: `fwd_<x>` /
`adj_<y>`, with seed dimension `nfwd` / `nadj`; a function that already
carries `fwd_` names gets `fwd2_` / `nfwd2` (CasADi's `diff_prefix`).

Layouts of a seed or derivative at the boundary (internally the direction
axis k leads: [k] + shape):
  "onnx":   shape + [k]
  "casadi": CasADi reads a tensor as a matrix (rank 0 as 1x1, rank 1 as a
            column, rank 2 as is, higher ranks flattened to a column) and
            wants k seeds of an r-by-c value as one r-by-(k*c) matrix,
            seed-major.
"""
from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import func

from onnx_ad_mlir.errors import UnsupportedOp

from . import symdims
from .builder import Builder, dims, element_type, is_float, tensor_type

NAME = "onnx.name"
DIM_PARAMS = "onnx.dim_params"
LAYOUTS = ("casadi", "onnx")


def _names(attrs: ir.ArrayAttr | None, count: int, stem: str) -> list[str]:
    names = []
    for i in range(count):
        d = attrs[i] if attrs is not None and i < len(attrs) else None
        names.append(ir.StringAttr(d[NAME]).value if d is not None and NAME in d
                     else f"{stem}{i}")
    return names


def arg_names(f: func.FuncOp) -> list[str]:
    attrs = f.attributes["arg_attrs"] if "arg_attrs" in f.attributes else None
    return _names(attrs, len(f.regions[0].blocks[0].arguments), "input")


def result_names(f: func.FuncOp) -> list[str]:
    attrs = f.attributes["res_attrs"] if "res_attrs" in f.attributes else None
    return _names(attrs, len(f.type.results), "output")


def diff_prefix(names: list[str], kind: str) -> str:
    """CasADi's rule: the next `<kind><n>_` after the highest one in use."""
    highest = 0
    for name in names:
        end = name.find("_")
        if not name.startswith(kind) or end < len(kind):
            continue
        digits = name[len(kind):end]
        if digits == "":
            highest = max(highest, 1)
        elif digits.isdigit():
            highest = max(highest, int(digits))
    return f"{kind}_" if highest == 0 else f"{kind}{highest + 1}_"


def select(names: list[str], values: list[ir.Value], wanted: list[str] | None,
           what: str) -> list[int]:
    """Indices of the values to differentiate: the named ones, else every
    floating-point one. Each must have a known rank: seeds and derivatives
    are laid out along its axes."""
    if wanted is None:
        chosen = [i for i, v in enumerate(values) if is_float(v)]
        if not chosen:
            raise UnsupportedOp(f"the function has no floating-point {what} to differentiate "
                                f"(float16, bfloat16, float32 or float64)")
    else:
        chosen = []
        for name in wanted:
            if name not in names:
                raise UnsupportedOp(f"'{name}' is not a function {what}; {what}s are {names}")
            i = names.index(name)
            if not is_float(values[i]):
                raise UnsupportedOp(f"{what} '{name}' is not floating-point: {values[i].type}")
            chosen.append(i)
    for i in chosen:
        if dims(values[i]) is None:
            raise UnsupportedOp(f"the derivative of {what} '{names[i]}' needs the rank of its "
                                "value, which is unknown: declare its shape, or run "
                                "onnx.shape_inference on the model")
    return chosen


def _attr_dicts(f: func.FuncOp, key: str) -> ir.ArrayAttr | None:
    return f.attributes[key] if key in f.attributes else None


def dim_params(f: func.FuncOp, key: str, index: int) -> list[str]:
    """Symbolic dim names of argument/result `index` ('' where none)."""
    attrs = _attr_dicts(f, key)
    if attrs is None or index >= len(attrs) or DIM_PARAMS not in attrs[index]:
        return []
    return [ir.StringAttr(p).value for p in attrs[index][DIM_PARAMS]]


def boundary_dim_params(primal: ir.Value, params: list[str], seed_dim: str,
                        name: str) -> dict[str, list[str]]:
    """Names for the `?` dims of a seed or derivative `name`, per layout: the
    primal's own names, and `seed_dim` (nfwd, nadj...) for the seed count. In
    CasADi's packed matrix the columns are seed_dim * c: named `<seed_dim>_<c>`
    as CasADi's derivative wrapper expects; the rows of [numel, k] the
    product of the primal's extents ("b*3*4"). An extent without a name
    gets one of this value's own: ONNX Runtime takes equal names for equal
    extents (and reuses buffers on it), so two values' different extents
    must not share one."""
    d = dims(primal)
    params = params + [""] * (len(d) - len(params))
    # an unnamed extent that is provably an input's named one gets its name:
    # the seed then provably has its output's extents (no run-time
    # unbroadcasting of it), and the signature says so
    sym = symdims.dims(primal) if None in d else d
    named = [p or (e[1] if isinstance(e, tuple) and e[0] == "param" else "")
             for p, e in zip(params, sym)]
    onnx_layout = named + [seed_dim]
    if len(d) <= 1:
        casadi = [named[0] if d else "", seed_dim]
    elif len(d) == 2:
        cols = d[1]
        casadi = [named[0], seed_dim if cols == 1 else
                  f"{seed_dim}_{named[1] or name + '_cols'}" if cols is None else
                  f"{seed_dim}_x{cols}"]
    elif None not in d or 0 in d:  # a static count of rows
        casadi = ["", seed_dim]
    else:
        factors = [str(e) if e is not None else p for e, p in zip(d, named)]
        casadi = ["*".join(factors) if all(factors) else f"{name}_numel", seed_dim]
    return {"onnx": onnx_layout, "casadi": casadi}


def boundary_type(primal: ir.Value, layout: str, k: int | None = None) -> ir.Type:
    """The type of a seed or derivative of `primal` at the function boundary;
    `k`: a static seed count (None: any, read at run time)."""
    d = dims(primal)
    elem = element_type(primal)
    if layout == "onnx":
        return tensor_type(d + [k], elem)
    if len(d) <= 1:
        return tensor_type([d[0] if d else 1, k], elem)
    if len(d) == 2:
        return tensor_type([d[0], None if k is None or d[1] is None else k * d[1]], elem)
    numel = 0 if 0 in d else None if None in d else math.prod(d)
    return tensor_type([numel, k], elem)


def carries_k(primal: ir.Value, layout: str) -> bool:
    """Whether the boundary layout of `primal`'s seeds keeps the direction
    count: casadi's [r, k*c] loses it when c is 0 (no elements whatever k;
    such a seed or derivative is empty)."""
    d = dims(primal)
    return layout == "onnx" or len(d) != 2 or d[1] != 0


def unpack(b: Builder, seed: ir.Value, primal: ir.Value, layout: str,
           k: ir.Value) -> ir.Value | None:
    """Boundary layout -> internal [k] + shape; None (a zero tangent: it has
    no elements) for a seed that does not carry k. `k`: the direction count
    (direction_count), which a CasADi [r, k*c] seed whose c may be 0 cannot
    give itself."""
    d = dims(primal)
    r = len(d)
    if not carries_k(primal, layout):
        return None
    if layout == "onnx":
        return b.transpose(seed, [r] + list(range(r)))
    if _static_empty(b, d):
        return b.zeros_over(primal, k)
    if r == 2:  # [r, k*c] -> [r, k, c] -> [k, r, c]
        if d[0] in (None, 0) or d[1] is None:  # (a -1 is refused beside a 0)
            target = b.concat([b.shape(primal, 0, 1), k, b.shape(primal, 1, 2)], 0)
            split = b.reshape_to(seed, target, [d[0], None, d[1]])
        else:
            target = b.concat([b.shape(primal, 0, 1), b.ints([-1]), b.shape(primal, 1, 2)], 0)
            split = b.reshape(seed, target, [d[0], None, d[1]])
        return b.transpose(split, [1, 0, 2])
    flat = b.transpose(seed, [1, 0])  # [numel, k] -> [k, numel]
    if r == 1:
        return flat
    if None in d or 0 in d:  # an extent may be 0: k from the seed, not -1
        return b.reshape_k(flat, flat, primal, [None] + d)
    return b.reshape(flat, b.ints([-1] + d), [None] + d)


def _static_empty(b: Builder, d: list) -> bool:
    """A value with no elements, known statically, before opset 14: its
    CasADi layout is built as zeros, not reshaped. Reshape-13 has no
    allowzero (a 0 in a target copies), and ONNX Runtime's Reshape fusion
    turns the targets' Shape reads into -1, which it refuses beside a 0 when
    it loads the model."""
    return b.opset < 14 and None not in d and 0 in d


def _at_least_one(b: Builder, n: ir.Value) -> ir.Value:
    """max(n, 1) of a 1-D i64 extent (Max takes integers from opset 12)."""
    one = b.ints([1])
    if b.opset >= 12:
        return b.ew("Max", n, one)
    return b.add(n, b.cast_like(b.compare("Equal", n, b.ints([0])), one))


def pack(b: Builder, t: ir.Value, primal: ir.Value, layout: str) -> ir.Value:
    """Internal [k] + shape -> boundary layout."""
    d = dims(primal)
    r = len(d)
    if not carries_k(primal, layout):  # [r, k*0]: empty whatever k
        return b.expand(b.scalar(0.0, primal), b.concat([b.shape(primal, 0, 1), b.ints([0])], 0),
                        [d[0], 0])
    if layout == "onnx":
        return b.transpose(t, list(range(1, r + 1)) + [0])
    if _static_empty(b, d):  # [r, k*c] or [0, k] zeros
        k = b.shape(t, 0, 1)
        shape = [d[0], None] if r == 2 else [0, None]
        target = b.concat([b.ints([d[0]]), b.mul(k, b.ints([d[1]]))], 0) if r == 2 else \
            b.concat([b.ints([0]), k], 0)
        return b.expand(b.scalar(0.0, primal), target, shape)
    if r == 2:  # [k, r, c] -> [r, k, c] -> [r, k*c]
        moved = b.transpose(t, [1, 0, 2])
        if d[0] in (None, 0):  # r may be 0 (-1 is then refused)
            kc = b.mul(b.shape(t, 0, 1), b.shape(primal, 1, 2))
            return b.reshape_to(moved, b.concat([b.shape(primal, 0, 1), kc], 0), [d[0], None])
        target = b.concat([b.shape(primal, 0, 1), b.ints([-1])], 0)
        return b.reshape(moved, target, [d[0], None])
    if r == 1:
        flat = t
    elif None not in d and 0 in d:  # no elements: -1 is refused beside a 0
        flat = b.reshape_to(t, b.concat([b.shape(t, 0, 1), b.ints([0])], 0), [None, 0])
    else:
        flat = b.reshape(t, [0, -1], [None, math.prod(d) if None not in d else None])
    return b.transpose(flat, [1, 0])  # [k, numel] -> [numel, k]


def direction_count(b: Builder, seeds: list[ir.Value], primals: list[ir.Value],
                    layout: str) -> ir.Value:
    """k as a 1-element i64 tensor, from the seeds that carry it: one that
    holds it exactly (the onnx layout's last extent, CasADi's [numel, k] or
    an [r, k*c] of a static c > 0) if there is one; else the largest
    (k*c) / max(c, 1) of the [r, k*c] seeds whose c is read at run time
    (k, unless every c is 0: then it is lost)."""
    carrying = [(s, p) for s, p in zip(seeds, primals) if carries_k(p, layout)]
    exact = next(((s, p) for s, p in carrying if layout == "onnx" or len(dims(p)) != 2 or
                  dims(p)[1] is not None), None)
    if exact is not None:
        return seed_count(b, *exact, layout)
    if len(carrying) == 1 or b.opset < 12:  # (Max of integers from opset 12)
        return seed_count(b, *carrying[0], layout)
    one = tensor_type([1], ir.IntegerType.get_signless(64))
    cs = [b.shape(p, 1, 2) for _, p in carrying]
    counts = [b.ew("Div", b.shape(s, 1, 2), _at_least_one(b, c)) for (s, _), c in zip(carrying, cs)]
    # divided by min(1, max c): by 0 when every c is 0, which ONNX Runtime
    # reports, as for a single such seed, rather than a silent k of 0
    some = b.op("Min", [b.ints([1]), b.op("Max", cs, one)], one)
    return b.ew("Div", b.op("Max", counts, one), some)


def seed_count(b: Builder, seed: ir.Value, primal: ir.Value, layout: str) -> ir.Value:
    """k as a 1-element i64 tensor, read from a boundary seed."""
    if layout == "onnx":
        return b.shape(seed, -1)
    d = dims(primal)
    if len(d) != 2:
        return b.shape(seed, 1, 2)
    cols = b.shape(seed, 1, 2)
    return b.ew("Div", cols, b.shape(primal, 1, 2))


Boundary = list  # [(name, dim params)] of appended arguments or results


def append_arguments(f: func.FuncOp, types: list[ir.Type], named: Boundary) -> list[ir.Value]:
    block = f.regions[0].blocks[0]
    count = len(block.arguments)
    new = [block.add_argument(t, f.location) for t in types]
    _update_signature(f, "arg_attrs", count, named)
    return new


def append_results(f: func.FuncOp, values: list[ir.Value], named: Boundary) -> None:
    block = f.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    old = list(ret.operands)
    with ir.InsertionPoint(ret), ret.location:
        func.ReturnOp(old + values)
    ret.erase()
    _update_signature(f, "res_attrs", len(old), named)


def _update_signature(f: func.FuncOp, key: str, count: int, named: Boundary) -> None:
    """New function type; attribute dicts of the first `count` values kept,
    `onnx.name` and `onnx.dim_params` for the appended ones."""
    block = f.regions[0].blocks[0]
    ret = block.operations[len(block.operations) - 1]
    f.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
        [a.type for a in block.arguments], [v.type for v in ret.operands]))
    old = _attr_dicts(f, key)
    kept = [old[i] if old is not None and i < len(old) else ir.DictAttr.get({})
            for i in range(count)]
    if old is None:  # unnamed primal values get their default names
        defaults = arg_names(f) if key == "arg_attrs" else result_names(f)
        kept = [ir.DictAttr.get({NAME: ir.StringAttr.get(defaults[i])}) for i in range(count)]
    added = [ir.DictAttr.get({NAME: ir.StringAttr.get(name),
                              DIM_PARAMS: ir.ArrayAttr.get([ir.StringAttr.get(p) for p in params])})
             for name, params in named]
    f.attributes[key] = ir.ArrayAttr.get(kept + added)
