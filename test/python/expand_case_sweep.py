"""Primal check of onnx-ad-expand on ONNX's own node test cases.

Every single-node case of an op that would be expanded (a function body at
the case's opset, or a lowering; ops with a JVP rule are skipped since the
AD modes keep them) is expanded with `all` ops expanded and run in ONNX
Runtime against the case's expected outputs (ONNX's reference numbers).

    python test/python/expand_case_sweep.py      # prints counts and failures
"""
from __future__ import annotations

import collections
import sys
import warnings

import numpy as np
import onnx
from onnx.backend.test.case.node import collect_testcases

from adcheck import run
from test_ad_expand import expanded

from onnx_ad_mlir.transforms.builder import resolve
from onnx_ad_mlir.transforms.expand import LOWERINGS, _has_body
from onnx_ad_mlir.transforms.registry import JVP

FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
          onnx.TensorProto.BFLOAT16}


def _feeds(m, inputs):
    feeds = {}
    for vi, x in zip(m.graph.input, inputs):
        feeds[vi.name] = onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) \
            else np.asarray(x)
    return feeds


def main() -> int:
    warnings.simplefilter("ignore")
    counts, by_op, failures = collections.Counter(), collections.Counter(), []
    for case in collect_testcases():
        m = case.model
        if case.kind != "node" or not case.data_sets or len(m.graph.node) != 1:
            continue
        opset = max([o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] or [0])
        op = m.graph.node[0].op_type
        if not opset or not (op in LOWERINGS or _has_body(op, opset)) or \
                "onnx." + resolve(op, opset) in JVP:
            continue
        values = list(m.graph.input) + list(m.graph.output)
        if not any(vi.type.tensor_type.elem_type in FLOATS for vi in values):
            continue
        inputs, outputs = case.data_sets[0]
        try:
            feeds = _feeds(m, inputs)
        except ValueError:
            continue  # sequence inputs
        try:
            e, n = expanded(m)
        except Exception as ex:  # noqa: BLE001  (a refusal is an outcome)
            counts["refused"] += 1
            failures.append((case.name, "refused", str(ex)[:160]))
            continue
        if n == 0:
            counts["not expanded"] += 1
            failures.append((case.name, "not expanded", ""))
            continue
        try:
            got = run(e, feeds)
        except Exception as ex:  # noqa: BLE001
            counts["runtime lacks a kernel"] += 1
            failures.append((case.name, "run", str(ex)[:160]))
            continue
        ok = all(np.allclose(got[vi.name], np.asarray(y), rtol=1e-3, atol=1e-4, equal_nan=True)
                 for vi, y in zip(m.graph.output, outputs))
        counts["match" if ok else "mismatch"] += 1
        if ok:
            by_op[op] += 1
        else:
            failures.append((case.name, "mismatch", ""))
    print(dict(counts))
    print(dict(sorted(by_op.items())))
    for f in failures:
        print(*f, sep="  ")
    return 1 if counts["mismatch"] else 0


if __name__ == "__main__":
    sys.exit(main())
