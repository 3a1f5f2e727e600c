"""Faster transposes for common convolutions (wraps linalg.py's Conv rule).

Conv's cotangent w.r.t. X is a ConvTranspose, which ONNX Runtime runs far
slower than Conv (no blocked-layout kernel). With unit strides and
dilations, one group and no output padding it is the Conv of the cotangent
with the kernel's channels swapped and its window flipped, padded by
(k - 1 - p): the weight rearrangement is constant-folded by the runtime
when the weight is a constant. Everything else goes to the general rule.
"""
from __future__ import annotations

from mlir import ir

from ..builder import Builder, dims, element_type, tensor_type
from ..registry import TRANSPOSE
from .linalg import _static_geometry


def _flipped_kernel(b: Builder, w: ir.Value) -> ir.Value:
    wd = dims(w)
    n = len(wd) - 2
    swapped = b.transpose(w, [1, 0] + list(range(2, 2 + n)))
    sd = dims(swapped)
    big = -(2 ** 62)
    return b.slice(swapped, list(range(2, 2 + n)), [-1] * n, [big] * n,
                   tensor_type(sd, element_type(w)), [-1] * n)


def _wrap(general):
    def rule(b: Builder, op, cts, linear):
        x, w = op.operands[0], op.operands[1]
        ct = cts[0]
        if not linear[0] or linear[1]:
            return general(b, op, cts, linear)
        try:
            geom = _static_geometry(op, False)
        except Exception:  # noqa: BLE001 - the general rule reports it
            return general(b, op, cts, linear)
        xd, cd, wd = dims(x), dims(ct), dims(w)
        s, d, p, k = geom["strides"], geom["dilations"], geom["pads"], geom["kernel_shape"]
        n = len(k)
        if xd is None or cd is None or wd is None or None in xd[1:] or None in cd[2:] or \
                None in wd or geom.get("group", 1) != 1 or any(v != 1 for v in s) or \
                any(v != 1 for v in d):
            return general(b, op, cts, linear)
        pads = [k[i % n] - 1 - p[i] for i in range(2 * n)]
        if any(v < 0 for v in pads) or \
                any(cd[2 + i] + pads[i] + pads[n + i] - k[i] + 1 != xd[2 + i] for i in range(n)):
            return general(b, op, cts, linear)
        out = general(b, op, cts, [False] + list(linear[1:]))
        out[0] = b.op("Conv", [ct, _flipped_kernel(b, w), None],
                      tensor_type([cd[0]] + xd[1:], element_type(ct)),
                      kernel_shape=list(k), pads=pads, strides=[1] * n, dilations=[1] * n,
                      group=1)
        return out
    return rule


for _name in list(TRANSPOSE):
    if _name == "onnx.Conv" or (_name.startswith("onnx.ConvV") and _name[10:].isdigit()):
        TRANSPOSE[_name] = _wrap(TRANSPOSE[_name])
