"""Faster transposes for common convolutions (wraps linalg.py's Conv rule).

Conv's cotangent w.r.t. X is a ConvTranspose. With unit strides it is also
the Conv of the cotangent with the kernel's channels swapped (per group)
and its window flipped, padded by (k - 1) * d - p, dilations and groups
kept: ONNX Runtime runs that on its blocked-layout (NCHWc) Conv, which beats
its ConvTranspose (GEMM + col2im) except when the result has few channels
(the blocked layout pads them to 8: RGB inputs) -- measured on ORT 1.32, 1
thread: 3->16 channels 3x3: ConvTranspose 0.09 ms vs flipped Conv 0.25 ms;
16->16: 0.40 vs 0.29; depthwise 240: 0.57 vs 0.16. Strided Convs keep the
ConvTranspose (polyphase Convs measured 1.5-4x slower). The weight
rearrangement is constant-folded by the runtime when the weight is a
constant. Everything else goes to the general rule.
"""
from __future__ import annotations

from mlir import ir

from onnx_ad_mlir.errors import UnsupportedOp

from ..builder import Builder, dims, element_type, tensor_type
from ..registry import TRANSPOSE
from .linalg import _static_geometry

# Fewest result channels (ungrouped) for which the flipped Conv beats ConvTranspose.
MIN_FLIP_CHANNELS = 16


def flipped_kernel(b: Builder, w: ir.Value, group: int) -> ir.Value:
    """W [M, C/g, *K] -> [C, M/g, *K] (per group: channels swapped) with every
    spatial axis reversed."""
    wd = dims(w)
    n = len(wd) - 2
    m, cg = wd[0], wd[1]
    elem = element_type(w)
    sp = list(range(2, 2 + n))
    if group == 1:
        swapped = b.transpose(w, [1, 0] + sp)
    else:
        split = b.reshape(w, [group, m // group, cg] + wd[2:], [group, m // group, cg] + wd[2:])
        moved = b.transpose(split, [0, 2, 1] + [a + 1 for a in sp])
        swapped = b.reshape(moved, [group * cg, m // group] + wd[2:],
                            [group * cg, m // group] + wd[2:])
    sd = dims(swapped)
    if b.opset >= 10:
        big = -(2 ** 62)
        return b.slice(swapped, sp, [-1] * n, [big] * n, tensor_type(sd, elem), [-1] * n)
    out = swapped  # Slice-1 has no steps: one Gather of reversed indices per axis
    for a in sp:
        if sd[a] > 1:
            out = b.op("Gather", [out, b.ints(list(range(sd[a] - 1, -1, -1)))],
                       tensor_type(sd, elem), axis=a)
    return out


def _wrap(general):
    def rule(b: Builder, op, cts, linear):
        x, w = op.operands[0], op.operands[1]
        ct = cts[0]
        if not linear[0] or linear[1]:
            return general(b, op, cts, linear)
        try:
            geom = _static_geometry(op, False)
        except UnsupportedOp:  # the general rule reports it or takes run-time pads
            return general(b, op, cts, linear)
        xd, cd, wd = dims(x), dims(ct), dims(w)
        s, d, p, k = geom["strides"], geom["dilations"], geom["pads"], geom["kernel_shape"]
        g = geom.get("group", 1) or 1
        n = len(k)
        if xd is None or cd is None or wd is None or None in xd[1:] or None in cd[2:] or \
                None in wd or any(v != 1 for v in s) or (g == 1 and xd[1] < MIN_FLIP_CHANNELS):
            return general(b, op, cts, linear)
        pads = [(k[i % n] - 1) * d[i % n] - p[i] for i in range(2 * n)]
        if any(v < 0 for v in pads) or \
                any(cd[2 + i] + pads[i] + pads[n + i] - (k[i] - 1) * d[i] != xd[2 + i]
                    for i in range(n)):
            return general(b, op, cts, linear)
        out = [None] * len(op.operands)
        out[0] = b.op("Conv", [ct, flipped_kernel(b, w, g), None],
                      tensor_type([cd[0]] + xd[1:], element_type(ct)),
                      kernel_shape=list(k), pads=pads, strides=[1] * n, dilations=list(d),
                      group=g)
        return out
    return rule


for _name in list(TRANSPOSE):
    if _name == "onnx.Conv" or (_name.startswith("onnx.ConvV") and _name[10:].isdigit()):
        TRANSPOSE[_name] = _wrap(TRANSPOSE[_name])
