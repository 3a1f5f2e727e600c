"""Checks derivative models against references that know nothing of the rules.

  check_derivatives(model, feeds)   forward and reverse models, run in ONNX
      Runtime, against central finite differences of the primal model in
      float64, plus the identity <J v, w> == <v, J^T w> between the two modes.
  check_hessian(model, feeds)       forward(reverse(model)) against finite
      differences of the reverse model's gradient.

Both use layout="onnx" (seed count as a trailing axis) and several random
directions at once. Models should be float64 for tight tolerances; float32
models are checked with looser defaults.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
import onnxruntime as ort

from onnx_ad_mlir.api import forward, reverse
from onnx_ad_mlir.transforms.signature import diff_prefix

FLOAT_TYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
               onnx.TensorProto.FLOAT16: np.float16}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = session(model)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feeds)))


def _float_names(values, only: Sequence[str] | None) -> list[str]:
    names = [v.name for v in values if v.type.tensor_type.elem_type in FLOAT_TYPES]
    return [n for n in names if only is None or n in only]


def _seeds(rng: np.random.Generator, like: np.ndarray, k: int) -> np.ndarray:
    """k random directions in the onnx layout: shape + [k]."""
    return rng.standard_normal(like.shape + (k,)).astype(like.dtype)


def _tol(dtype) -> tuple[float, float, float]:
    """(finite-difference step, rtol, atol) for a dtype."""
    if dtype == np.float64:
        return 1e-6, 1e-5, 1e-6
    return 1e-2, 2e-2, 2e-3


class NoReference(Exception):
    """Finite differences cannot judge this model at this point: its outputs
    are not finite, change shape under perturbation, or are not smooth at
    any entry."""


def stand_ins(m: onnx.ModelProto, x: str = "x") -> list[onnx.NodeProto]:
    """Unsqueezes of input x in a reverse model: the linear program's
    stand-in for x, alive when a shape read keeps part of the forward
    tangent computation (which reverse mode should have erased)."""
    return [n for n in m.graph.node if n.op_type == "Unsqueeze" and n.input[0] == x]


def assert_unique_node_names(m: onnx.ModelProto) -> None:
    """Non-empty node names are unique across the graph and its subgraphs."""
    names: list[str] = []

    def collect(g: onnx.GraphProto) -> None:
        for n in g.node:
            if n.name:
                names.append(n.name)
            for a in n.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else []) + list(a.graphs):
                    collect(sub)
    collect(m.graph)
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, f"duplicate node names: {dup[:5]}"


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-direction inner products of two shape + [k] arrays."""
    k = a.shape[-1]
    return (a.astype(np.float64) * b.astype(np.float64)).reshape(-1, k).sum(axis=0)


def _prefixes(model: onnx.ModelProto) -> tuple[str, str]:
    """The names the passes give seeds of this model: fwd_/adj_, or fwd2_...
    when the model is itself a derivative (CasADi's rule)."""
    names = [v.name for v in list(model.graph.input) + list(model.graph.output)]
    return diff_prefix(names, "fwd"), diff_prefix(names, "adj")


def check_derivatives(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                      inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
                      k: int = 3, seed: int = 0, rtol: float | None = None,
                      atol: float | None = None,
                      produced: list[onnx.ModelProto] | None = None,
                      reference: onnx.ModelProto | None = None) -> dict[str, float]:
    """Asserts forward mode == central differences and reverse == transpose
    of forward; returns the max errors measured. The derivative models are
    appended to `produced` when given. `reference` is the same model in a
    wider float type (same input and output names) for the finite
    differences, when `model` is too narrow for them (float16 differences
    cannot resolve small changes); tolerances stay those of `model`'s type."""
    rng = np.random.default_rng(seed)
    xs = _float_names(model.graph.input, inputs)
    ys = _float_names(model.graph.output, outputs)
    fp, ap = _prefixes(model)
    fwd = forward(model, inputs=xs, outputs=ys, layout="onnx")
    adj = reverse(model, inputs=xs, outputs=ys, layout="onnx")
    for m in (fwd, adj):
        onnx.checker.check_model(m, full_check=True)
    if produced is not None:
        produced += [fwd, adj]
    primal = session(model if reference is None else reference)
    dtype = feeds[xs[0]].dtype
    eps, rt, at = _tol(dtype)
    rt, at = rtol or rt, atol or at
    if reference is not None:  # differences in the wider type, exact copies of the inputs
        wide = {i.name: FLOAT_TYPES[i.type.tensor_type.elem_type] for i in reference.graph.input
                if i.type.tensor_type.elem_type in FLOAT_TYPES}
        feeds_fd = {x: a.astype(wide.get(x, a.dtype)) for x, a in feeds.items()}
        dtype_fd = feeds_fd[xs[0]].dtype
        eps = _tol(dtype_fd)[0]
    else:
        feeds_fd, dtype_fd = feeds, dtype

    names = [o.name for o in primal.get_outputs()]
    y0 = dict(zip(names, primal.run(None, feeds_fd)))
    if not all(np.isfinite(y0[y].astype(np.float64)).all() for y in ys):
        raise NoReference("the primal outputs are not all finite")
    v = {x: _seeds(rng, feeds[x], k) for x in xs}
    got = run(fwd, {**feeds, **{f"{fp}{x}": v[x] for x in xs}})
    errors = {"fd": 0.0, "dot": 0.0, "kinks": 0}
    compared = 0
    # Central differences, one direction at a time. Entries where the one-
    # sided differences disagree sit on a kink (Relu at 0, ties of Max), and
    # entries whose central difference changes with the step sit on a jump
    # (Sign or Floor at an integer: both sides move by the same amount, but
    # the difference grows like 1/eps): there the derivative is a convention,
    # not a limit, so they are not compared.
    for j in range(k):
        step = lambda sign: {**feeds_fd, **{x: np.asarray(
            feeds_fd[x] + sign * eps * v[x][..., j].astype(dtype_fd), dtype=dtype_fd) for x in xs}}
        yp = dict(zip(names, primal.run(None, step(1))))
        ym = dict(zip(names, primal.run(None, step(-1))))
        yp2 = dict(zip(names, primal.run(None, step(2))))
        ym2 = dict(zip(names, primal.run(None, step(-2))))
        for y in ys:
            if any(a[y].shape != y0[y].shape for a in (yp, ym, yp2, ym2)):
                raise NoReference(f"the shape of {y} changes under perturbation")
            hi, mid, lo = (a[y].astype(np.float64) for a in (yp, y0, ym))
            fd = (hi - lo) / (2 * eps)
            fd2 = (yp2[y].astype(np.float64) - ym2[y].astype(np.float64)) / (4 * eps)
            # At a kink the central difference is the mean of the one-sided
            # slopes, off by half their gap from either. The gap of a smooth
            # function is its curvature times the step (it doubles with the
            # step); a kink's does not shrink with the step: such an entry is
            # not compared when the gap exceeds the comparison's tolerance.
            gap = np.abs((hi - mid) - (mid - lo)) / eps
            gap2 = np.abs((yp2[y].astype(np.float64) - mid) - (mid - ym2[y].astype(np.float64))) \
                / (2 * eps)
            kink = (gap > 0.05 * np.abs(fd) + 10 * at) | \
                ((gap > 2 * (rt * np.abs(fd) + at)) & (gap2 < 1.5 * gap))
            smooth = np.isfinite(fd) & ~kink & (np.abs(fd2 - fd) <= 0.05 * np.abs(fd) + 10 * at)
            jv = got[f"{fp}{y}"][..., j].astype(np.float64)
            errors["kinks"] += int(smooth.size - smooth.sum())
            compared += int(smooth.sum())
            err = np.abs(jv - fd)[smooth].max(initial=0.0)
            errors["fd"] = max(errors["fd"], float(err))
            np.testing.assert_allclose(jv[smooth], fd[smooth], rtol=rt, atol=at,
                                       err_msg=f"forward mode of {y} vs finite differences")
    if compared == 0 and any(y0[y].size for y in ys):
        raise NoReference("no output entry is smooth under perturbation")
    w = {y: _seeds(rng, got[f"{fp}{y}"][..., 0], k) for y in ys}
    back = run(adj, {**feeds, **{f"{ap}{y}": w[y] for y in ys}})
    lhs = sum(_dot(got[f"{fp}{y}"], w[y]) for y in ys)
    rhs = sum(_dot(v[x], back[f"{ap}{x}"]) for x in xs)
    scale = max(1.0, float(np.abs(lhs).max()))
    errors["dot"] = float(np.abs(lhs - rhs).max() / scale)
    np.testing.assert_allclose(lhs, rhs, rtol=rt, atol=at * scale,
                               err_msg="<J v, w> != <v, J^T w>")
    return errors


def check_forward(model: onnx.ModelProto, feeds: dict[str, np.ndarray], x: str, y: str,
                  eps: float, rtol: float, atol: float, k: int = 2, seed: int = 0) -> None:
    """Forward mode alone (d y / d x along k random directions) against
    central differences, for models whose reverse mode is refused."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(feeds[x].shape + (k,)).astype(feeds[x].dtype)
    jv = run(forward(model, inputs=[x], outputs=[y], layout="onnx"),
             {**feeds, f"fwd_{x}": v})[f"fwd_{y}"]
    for d in range(k):
        step = lambda s: run(model, {**feeds, x: feeds[x] + s * eps * v[..., d]})[y]
        np.testing.assert_allclose(jv[..., d], (step(1) - step(-1)) / (2 * eps),
                                   rtol=rtol, atol=atol, err_msg=f"forward mode, direction {d}")


def check_hessian(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                  inputs: Sequence[str] | None = None, output: str | None = None,
                  k: int = 2, seed: int = 1) -> float:
    """forward(reverse(model)) against central differences of the gradient."""
    rng = np.random.default_rng(seed)
    xs = _float_names(model.graph.input, inputs)
    ys = _float_names(model.graph.output, None if output is None else [output])[:1]
    adj = reverse(model, inputs=xs, outputs=ys, layout="onnx")
    grads = [f"adj_{x}" for x in xs]
    hess = forward(adj, inputs=xs, outputs=grads, layout="onnx")
    onnx.checker.check_model(hess, full_check=True)
    dtype = feeds[xs[0]].dtype
    eps, rt, at = _tol(dtype)
    y0 = run(model, feeds)[ys[0]]
    w = rng.standard_normal(y0.shape + (1,)).astype(dtype)
    v = {x: _seeds(rng, feeds[x], k) for x in xs}
    got = run(hess, {**feeds, f"adj_{ys[0]}": w, **{f"fwd_{x}": v[x] for x in xs}})
    worst = 0.0
    for j in range(k):
        plus = run(adj, {**feeds, f"adj_{ys[0]}": w,
                         **{x: np.asarray(feeds[x] + eps * v[x][..., j], dtype=dtype) for x in xs}})
        minus = run(adj, {**feeds, f"adj_{ys[0]}": w,
                          **{x: np.asarray(feeds[x] - eps * v[x][..., j], dtype=dtype) for x in xs}})
        for g in grads:
            fd = (plus[g].astype(np.float64) - minus[g].astype(np.float64))[..., 0] / (2 * eps)
            hv = got[f"fwd_{g}"][..., 0, j].astype(np.float64)
            worst = max(worst, float(np.abs(hv - fd).max(initial=0.0)))
            np.testing.assert_allclose(hv, fd, rtol=rt * 10, atol=at * 10,
                                       err_msg=f"Hessian-vector product for {g}")
    return worst
