#!/usr/bin/env python3
"""Reverse mode through a long Scan: memory / time trade-off of checkpointing.

    python bench/checkpointing.py [--T 2000] [--H 16384] [--ks 1,10,45,200] [--repeat 3]

The model is a diagonal RNN over T steps, h' = tanh(a * h + x_t U), with H
hidden units and output h_T only (the primal itself stores nothing): large
states, cheap steps, so stored states dominate the memory (a dense H x H
weight would add its adjoint accumulators, O(|W|) whatever k). For each period k the
adjoint model `reverse(m, outputs=["hT"], checkpoint=k)` (k = 1: the default,
every state stored) runs in ONNX Runtime (CPU, one thread) in a fresh
process (big tensors mmapped by malloc: MALLOC_MMAP_THRESHOLD_ fixed at
64 KiB, so freed memory leaves RSS); reported: the process's peak RSS growth during the runs (ru_maxrss
minus the RSS before the first run), the median run time, the stored states
(T/k + k in theory) and the max difference of the adjoints from k = 1.
Not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h


def rnn(T: int, H: int, X: int = 4) -> onnx.ModelProto:
    vi = h.make_tensor_value_info
    body = h.make_graph(
        [h.make_node("Mul", ["h", "W"], ["hw"], name="mul_h"),
         h.make_node("MatMul", ["xt", "U"], ["xu"], name="mm_x"),
         h.make_node("Add", ["hw", "xu"], ["pre"], name="add"),
         h.make_node("Tanh", ["pre"], ["hn"], name="tanh")],
        "body", [vi("h", TP.DOUBLE, [1, H]), vi("xt", TP.DOUBLE, [1, X])],
        [vi("hn", TP.DOUBLE, [1, H])])
    g = h.make_graph([h.make_node("Scan", ["h0", "Xs"], ["hT"], body=body, num_scan_inputs=1,
                                  name="scan")], "rnn",
                     [vi("h0", TP.DOUBLE, [1, H]), vi("Xs", TP.DOUBLE, [T, 1, X]),
                      vi("W", TP.DOUBLE, [1, H]), vi("U", TP.DOUBLE, [X, H])],
                     [vi("hT", TP.DOUBLE, [1, H])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def feeds(T: int, H: int, X: int = 4) -> dict:
    rng = np.random.default_rng(0)
    return {"h0": rng.standard_normal((1, H)) * 0.1, "Xs": rng.standard_normal((T, 1, X)),
            "W": rng.uniform(0.5, 1.0, (1, H)), "U": rng.standard_normal((X, H)),
            "adj_hT": rng.standard_normal((1, H, 1))}


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def worker(path: str, T: int, H: int, repeat: int, out: str) -> None:
    """Runs one adjoint model in this (fresh) process and reports."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.enable_cpu_mem_arena = False  # freed tensors go back: RSS follows live memory
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}
    fd = {n: v for n, v in feeds(T, H).items() if n in inputs}
    names = [o.name for o in sess.get_outputs()]
    before = _rss_kb()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = sess.run(None, fd)
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    np.savez(out, **dict(zip(names, res)))
    print(json.dumps({"peak_growth_mb": (peak - before) / 1024, "time_s": float(np.median(times))}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--T", type=int, default=2000)
    p.add_argument("--H", type=int, default=16384)
    p.add_argument("--ks", default="1,10,45,200")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker[0], a.T, a.H, a.repeat, a.worker[1])
        return
    from onnx_ad_mlir.api import reverse
    model = rnn(a.T, a.H)
    state_mb = a.T * a.H * 8 / 2**20
    print(f"Scan RNN: T={a.T}, H={a.H}, float64; one state {a.H * 8 / 1024:.1f} KiB, "
          f"all T states {state_mb:.1f} MiB")
    print(f"{'k':>5} {'stored states':>14} {'peak RSS growth MiB':>20} {'time s':>8} "
          f"{'max |diff| vs k=1':>18}")
    ref = None
    with tempfile.TemporaryDirectory() as tmp:
        for k in [0] + [int(x) for x in a.ks.split(",")]:
            # k = 0: the primal model alone (the harness's own overhead)
            adj = model if k == 0 else reverse(model, outputs=["hT"], layout="onnx",
                                               checkpoint=k)
            path = os.path.join(tmp, f"adj_{k}.onnx")
            onnx.save(adj, path)
            out = os.path.join(tmp, f"out_{k}.npz")
            r = subprocess.run([sys.executable, __file__, "--T", str(a.T), "--H", str(a.H),
                                "--repeat", str(a.repeat), "--worker", path, out],
                               capture_output=True, text=True, check=True,
                               env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
            stats = json.loads(r.stdout.strip().splitlines()[-1])
            got = dict(np.load(out))
            if k == 0:
                print(f"{'primal':>5} {0:>14} {stats['peak_growth_mb']:>20.1f} "
                      f"{stats['time_s']:>8.3f}")
                continue
            if ref is None:
                ref = got
            diff = max(float(np.abs(got[n] - ref[n]).max()) for n in ref)
            stored = a.T if k == 1 else a.T // k + k
            print(f"{k:>5} {stored:>14} {stats['peak_growth_mb']:>20.1f} {stats['time_s']:>8.3f} "
                  f"{diff:>18.1e}")


if __name__ == "__main__":
    main()
