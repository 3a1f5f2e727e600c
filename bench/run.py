#!/usr/bin/env python3
"""Side-by-side benchmark of derivative models (see bench/README.md).

    /opt/adv/bin/python bench/run.py [--models mlp,cnn] [--rounds 20] [--zoo]
        [--onnx-ad-python /opt/benchenv/bin/python] [--ort-training-python /opt/orttenv/bin/python]
        [--scaling 1000,10000,100000] [--out bench/results]

For every corpus model (bench/corpus, made by make_corpus.py): our forward
and reverse models (this process), onnx-ad's (a subprocess in its own env)
and onnxruntime-training's gradient graph (ditto) are built, then every
model runs in this one process under ONNX Runtime (1 intra/inter-op
thread, sequential, default graph optimizations), interleaved round by
round; times are medians over the rounds. Writes results.md and results.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
DEFAULT_MODELS = ["mlp", "gelu_mlp", "cnn", "transformer_block", "transformer_6",
                  "transformer_48", "resnet", "gru", "lstm", "if_model", "scan_rnn", "loop_model",
                  "neural_ode"]
ZOO = ["zoo_bvlc_alexnet", "zoo_squeezenet", "zoo_zfnet512", "zoo_inception_v1", "zoo_resnet50",
       "zoo_shufflenet", "zoo_vgg19", "zoo_inception_v2", "zoo_densenet121"]


# ------------------------------------------------------------------ inputs
def _np_type(vi) -> type:
    return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)


def load_case(name: str) -> dict:
    path = os.path.join(CORPUS, f"{name}.onnx")
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in inits]
    rng = np.random.default_rng(0)
    npz = os.path.join(CORPUS, f"{name}.npz")
    if os.path.exists(npz):
        data = np.load(npz)
        meta = json.loads(str(data["meta"]))
        feeds = {meta["inputs"][0]: data["x"]}
        ref = {"jvp": data["jvp"], "vjp": data["vjp"], "kind": meta["reference"]}
        v, u = data["v"], data["u"]
        inputs, outputs = meta["inputs"], meta["outputs"]
    else:  # zoo: the largest input is the image; finite-difference references
        x_vi = max(graph_inputs, key=lambda vi: len(vi.type.tensor_type.shape.dim))
        inputs, outputs = [x_vi.name], [model.graph.output[0].name]
        feeds, ref, v, u = {}, None, None, None
    for vi in graph_inputs:
        if vi.name not in feeds:
            shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(_np_type(vi))
    return {"name": name, "path": path, "model": model, "feeds": feeds, "inputs": inputs,
            "outputs": outputs, "v": v, "u": u, "ref": ref}


def session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def interleaved_medians(runs: dict, rounds: int) -> dict:
    """label -> (session, feeds, output names or None): the median seconds
    per run of each, timed in rounds that visit every label in a rotating
    order, each label's round lasting >= ~5 ms (the scripts beside run.py)."""
    inner = {}
    for label, (s, feeds, outs) in runs.items():
        s.run(outs, feeds)
        t0 = time.perf_counter()
        s.run(outs, feeds)
        inner[label] = max(1, min(200, int(0.005 / max(1e-7, time.perf_counter() - t0)) + 1))
    times = {label: [] for label in runs}
    labels = list(runs)
    for i in range(rounds):
        for label in labels[i % len(labels):] + labels[:i % len(labels)]:
            s, feeds, outs = runs[label]
            t0 = time.perf_counter()
            for _ in range(inner[label]):
                s.run(outs, feeds)
            times[label].append((time.perf_counter() - t0) / inner[label])
    return {label: statistics.median(t) for label, t in times.items()}


def fd_reference(case: dict) -> None:
    """Zoo models: J v by central differences (float64 accumulation of
    float32 runs), J^T u checked through <u, J v> (see README)."""
    s = session(case["model"])
    x_name, y_name = case["inputs"][0], case["outputs"][0]
    x = case["feeds"][x_name]
    rng = np.random.default_rng(1)
    v = rng.standard_normal(x.shape).astype(x.dtype)
    f = lambda xx: s.run([y_name], {**case["feeds"], x_name: xx})[0].astype(np.float64)
    y = f(x)
    u = rng.standard_normal(y.shape).astype(x.dtype)
    eps = 1e-2 * max(1.0, float(np.abs(x).max())) / max(1.0, float(np.abs(v).max()))
    jvp = (f(x + eps * v) - f(x - eps * v)) / (2 * eps)
    case.update(v=v, u=u, ref={"jvp": jvp, "vjp": None, "kind": "central differences (float32)"})


# ------------------------------------------------------------------ ours
def our_transforms(case: dict, repeat: int) -> dict:
    import onnx_ad_mlir
    out = {}
    for kind, fn in (("fwd", onnx_ad_mlir.forward), ("rev", onnx_ad_mlir.reverse)):
        best, m = float("inf"), None
        try:
            for _ in range(repeat):
                t0 = time.perf_counter()
                m = fn(case["model"], inputs=case["inputs"], outputs=case["outputs"],
                       layout="onnx")
                best = min(best, time.perf_counter() - t0)
            out[kind] = {"model": m, "transform_s": best}
        except Exception as e:  # noqa: BLE001
            out[kind] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    return out


def peer_transforms(peer: str, python: str, cases: list[dict], repeat: int, tmp: str) -> dict:
    if not python or not os.path.exists(python):
        return {c["name"]: {"error": f"{peer}: no environment ({python})"} for c in cases}
    jobs = [{"name": c["name"], "path": c["path"], "inputs": c["inputs"],
             "outputs": c["outputs"], "out_dir": tmp, "repeat": repeat} for c in cases]
    jp, rp = os.path.join(tmp, f"{peer}.jobs.json"), os.path.join(tmp, f"{peer}.results.json")
    json.dump(jobs, open(jp, "w"))
    proc = subprocess.run([python, os.path.join(HERE, "peers.py"), peer, jp, rp],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(rp):
        err = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
        return {c["name"]: {"error": f"{peer} failed: {err}"} for c in cases}
    res = json.load(open(rp))
    for name, entry in res.items():
        for kind, e in entry.items():
            if isinstance(e, dict) and "path" in e:
                e["model"] = onnx.load(e["path"])
    return res


# ------------------------------------------------------------------ running
def _derivative_io(case: dict, m: onnx.ModelProto, kind: str, peer: str) -> tuple[dict, list]:
    """Feeds and fetched output names of a derivative model (layout onnx:
    seeds are S + [1])."""
    primal_in = {vi.name for vi in case["model"].graph.input}
    inits = {t.name for t in m.graph.initializer}
    seeds = [vi.name for vi in m.graph.input if vi.name not in primal_in and vi.name not in inits]
    feeds = {k: v for k, v in case["feeds"].items()}
    if peer == "ort-training":
        feeds["bench_u"] = case["u"]
        for out in case["outputs"]:
            if any(vi.name == out + "_grad" for vi in m.graph.input):
                feeds[out + "_grad"] = case["u"]  # the seed; the loss is then unused
        grads = [o.name for o in m.graph.output if o.name.endswith("_grad")]
        return feeds, grads
    seed = case["v"] if kind == "fwd" else case["u"]
    assert len(seeds) == 1, (case["name"], peer, kind, seeds)
    feeds[seeds[0]] = seed[..., None]
    outs = [o.name for o in m.graph.output]
    return feeds, outs


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float | None:
    """max |got - ref| / max |ref|; None (no reference) when ref is all zero:
    the light zoo's placeholder weights make outputs that float32 finite
    differences do not see move at all."""
    scale = np.abs(ref).max()
    if scale == 0:
        return None
    got = np.asarray(got, np.float64).reshape(ref.shape)
    return float(np.abs(got - ref).max() / scale)


def remote_training_run(case: dict, grad: onnx.ModelProto, python: str, rounds: int) -> dict:
    """onnxruntime-training's graphs need its own build (training kernels):
    timed in its environment beside the primal, ratio over that primal."""
    tmp = tempfile.mkdtemp(prefix="bench-ortt-")
    primal_p, grad_p = os.path.join(tmp, "primal.onnx"), os.path.join(tmp, "grad.onnx")
    onnx.save(case["model"], primal_p)
    onnx.save(grad, grad_p)
    feeds, outs = _derivative_io(case, grad, "rev", "ort-training")
    np.savez(os.path.join(tmp, "feeds.npz"), **feeds)
    spec = {"primal": primal_p, "grad": grad_p, "feeds": os.path.join(tmp, "feeds.npz"),
            "primal_feeds": list(case["feeds"]), "primal_outs": [o.name for o in case["model"].graph.output],
            "grad_feeds": list(feeds), "grad_outs": outs, "rounds": rounds, "inner": 5}
    sp, rp = os.path.join(tmp, "spec.json"), os.path.join(tmp, "res.json")
    json.dump(spec, open(sp, "w"))
    proc = subprocess.run([python, os.path.join(HERE, "peers.py"), "ort-training-run", sp, rp],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
        return {"error": f"run (training build): {err}"}
    res = json.load(open(rp))
    return {"remote": res, "result": [np.load(rp + ".npy")], "outs": outs, "kind": "rev",
            "peer": "ort-training", "times": []}


def measure(case: dict, variants: dict, rounds: int, ort_training_python: str = "") -> dict:
    """variants: label -> (model, kind, peer). Runs all side by side."""
    runs = {}
    for label, (m, kind, peer) in variants.items():
        try:
            s = session(m)
            if kind == "primal":
                feeds, outs = dict(case["feeds"]), [o.name for o in case["model"].graph.output]
            else:
                feeds, outs = _derivative_io(case, m, kind, peer)
            result = s.run(outs, feeds)
            runs[label] = {"session": s, "feeds": feeds, "outs": outs, "result": result,
                           "kind": kind, "peer": peer, "times": []}
        except Exception as e:  # noqa: BLE001
            runs[label] = {"error": f"run: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    for k, r in list(runs.items()):
        if "error" in r and variants[k][2] == "ort-training" and ort_training_python:
            # its graphs use the training build's kernels (com.microsoft *Grad ops)
            runs[k] = remote_training_run(case, variants[k][0], ort_training_python, rounds)
    live = [k for k, r in runs.items() if "error" not in r and "session" in r]
    for k in live:  # warm-up
        r = runs[k]
        for _ in range(2):
            r["session"].run(r["outs"], r["feeds"])
    # calls per round so that one round of the primal lasts >= ~5 ms
    t0 = time.perf_counter()
    runs["primal"]["session"].run(runs["primal"]["outs"], runs["primal"]["feeds"])
    inner = max(1, min(200, math.ceil(0.005 / max(1e-7, time.perf_counter() - t0))))
    for i in range(rounds):
        order = live[i % len(live):] + live[:i % len(live)]
        for k in order:
            r = runs[k]
            s, outs, feeds = r["session"], r["outs"], r["feeds"]
            t0 = time.perf_counter()
            for _ in range(inner):
                s.run(outs, feeds)
            r["times"].append((time.perf_counter() - t0) / inner)
    out = {}
    ref = case["ref"]
    for k, r in runs.items():
        if "error" in r:
            out[k] = {"error": r["error"]}
            continue
        if "remote" in r:  # same ratio to its own primal, scaled to this primal's time
            own = statistics.median(runs["primal"]["times"])
            e = {"median_s": r["remote"]["grad_s"] / r["remote"]["primal_s"] * own,
                 "timed_in": "ort-training env (ratio over its own primal)"}
        else:
            e = {"median_s": statistics.median(r["times"])}
        if r["kind"] == "fwd" and ref is not None:
            got = r["result"][r["outs"].index(_deriv_name(r, case))]
            e["max_rel_err"] = _rel_err(got, ref["jvp"])
        elif r["kind"] == "rev" and ref is not None:
            got = r["result"][r["outs"].index(_deriv_name(r, case))]
            if ref["vjp"] is not None:
                e["max_rel_err"] = _rel_err(got, ref["vjp"])
            else:  # <J^T u, v> against <u, J v>
                lhs = float(np.sum(np.asarray(got, np.float64).reshape(case["v"].shape) * case["v"]))
                rhs = float(np.sum(case["u"] * ref["jvp"]))
                e["max_rel_err"] = abs(lhs - rhs) / abs(rhs) if rhs else None
        out[k] = e
    return out


def _deriv_name(r: dict, case: dict) -> str:
    if r["peer"] == "ort-training":
        return r["outs"][0]
    primal_out = {o.name for o in case["model"].graph.output}
    return next(o for o in r["outs"] if o not in primal_out)


# ------------------------------------------------------------------ scaling
def scaling_model(nodes: int) -> onnx.ModelProto:
    """A transformer-like chain (MatMul, Add, Tanh, Mul, Softmax, residual)
    of about `nodes` nodes, width 16, dynamic batch."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper
    rng = np.random.default_rng(0)
    ns, inits, x = [], [], "x"
    for b in range(max(1, nodes // 6)):
        w = f"w{b}"
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((16, 16)) / 4).astype(np.float32), w))
        ns += [h.make_node("MatMul", [x, w], [f"m{b}"]),
               h.make_node("Tanh", [f"m{b}"], [f"t{b}"]),
               h.make_node("Mul", [f"t{b}", f"m{b}"], [f"p{b}"]),
               h.make_node("Softmax", [f"p{b}"], [f"s{b}"], axis=-1),
               h.make_node("Sub", [f"s{b}", f"t{b}"], [f"d{b}"]),
               h.make_node("Add", [x, f"d{b}"], [f"r{b}"])]
        x = f"r{b}"
    g = h.make_graph(ns, "scaling", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 16])],
                     [h.make_tensor_value_info(x, T.FLOAT, ["batch", 16])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def scaling(sizes: list[int], onnx_ad_python: str, tmp: str) -> list[dict]:
    import onnx_ad_mlir
    rows = []
    for n in sizes:
        m = scaling_model(n)
        path = os.path.join(tmp, f"scaling_{n}.onnx")
        onnx.save(m, path)
        t0 = time.perf_counter()
        r = onnx_ad_mlir.reverse(m, layout="onnx")
        ours = time.perf_counter() - t0
        row = {"nodes": len(m.graph.node), "ours_rev_s": ours, "ours_rev_nodes": len(r.graph.node)}
        if n <= 20000 and onnx_ad_python and os.path.exists(onnx_ad_python):
            case = {"name": f"scaling_{n}", "path": path, "inputs": ["x"],
                    "outputs": [m.graph.output[0].name]}
            res = peer_transforms("onnx-ad", onnx_ad_python, [case], 1, tmp)[case["name"]]
            row["onnx_ad_rev_s"] = res.get("rev", {}).get("transform_s")
        rows.append(row)
        print(f"scaling {row}", flush=True)
    base = rows[0]["ours_rev_s"] / rows[0]["nodes"]
    for row in rows:
        row["per_node_vs_smallest"] = (row["ours_rev_s"] / row["nodes"]) / base
    return rows


# ------------------------------------------------------------------ report
def fmt_t(s):
    if s is None:
        return "-"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def report(rows: list[dict], scale: list[dict] | None) -> str:
    lines = ["| model | nodes p/fwd/rev (ours) | nodes fwd/rev (onnx-ad) | nodes ORT-T | "
             "transform rev ours / onnx-ad | primal | fwd/primal ours / onnx-ad | "
             "rev/primal ours / onnx-ad / ORT-T | ours÷onnx-ad fwd / rev | "
             "err fwd ours / onnx-ad | err rev ours / onnx-ad / ORT-T |",
             "|---" * 11 + "|"]
    for r in rows:
        t = r["times"]
        p = t.get("primal", {}).get("median_s")

        def ratio(label):
            m = t.get(label, {}).get("median_s")
            return f"{m / p:.2f}" if m and p else "✗"

        def speed(a, b):
            ma, mb = t.get(a, {}).get("median_s"), t.get(b, {}).get("median_s")
            return f"{ma / mb:.2f}" if ma and mb else "-"

        def err(label):
            e = t.get(label, {}).get("max_rel_err")
            return "✗" if label not in t or "error" in t[label] else ("-" if e is None else f"{e:.1e}")

        n = r["nodes"]
        tr = r["transform_s"]
        lines.append(
            f"| {r['name']} | {n.get('primal')}/{n.get('ours_fwd', '✗')}/{n.get('ours_rev', '✗')} | "
            f"{n.get('onnx_ad_fwd', '✗')}/{n.get('onnx_ad_rev', '✗')} | {n.get('ort_training', '✗')} | "
            f"{fmt_t(tr.get('ours_rev'))} / {fmt_t(tr.get('onnx_ad_rev'))} | {fmt_t(p)} | "
            f"{ratio('ours_fwd')} / {ratio('onnx_ad_fwd')} | "
            f"{ratio('ours_rev')} / {ratio('onnx_ad_rev')} / {ratio('ort_training')} | "
            f"{speed('ours_fwd', 'onnx_ad_fwd')} / {speed('ours_rev', 'onnx_ad_rev')} | "
            f"{err('ours_fwd')} / {err('onnx_ad_fwd')} | "
            f"{err('ours_rev')} / {err('onnx_ad_rev')} / {err('ort_training')} |")
    notes = []
    for r in rows:
        for k, v in {**r.get("errors", {}), **{k: v["error"] for k, v in r["times"].items()
                                               if "error" in v}}.items():
            notes.append(f"- {r['name']} {k}: {v}")
    text = "\n".join(lines)
    if notes:
        text += "\n\nFailures:\n" + "\n".join(notes)
    if scale:
        text += "\n\n| scaling nodes | ours rev transform | per node vs smallest | onnx-ad rev |\n"
        text += "|---|---|---|---|\n"
        for s in scale:
            text += (f"| {s['nodes']} | {fmt_t(s['ours_rev_s'])} | {s['per_node_vs_smallest']:.2f} | "
                     f"{fmt_t(s.get('onnx_ad_rev_s'))} |\n")
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="")
    ap.add_argument("--zoo", action="store_true", help="also the onnx wheel's light zoo")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3, help="transform repetitions (best of)")
    ap.add_argument("--onnx-ad-python", default="/opt/benchenv/bin/python")
    ap.add_argument("--ort-training-python", default="/opt/orttenv/bin/python")
    ap.add_argument("--scaling", default="", help="e.g. 1000,10000,100000")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    a = ap.parse_args()
    names = [n for n in a.models.split(",") if n] or DEFAULT_MODELS + (ZOO if a.zoo else [])
    names = [n for n in names if os.path.exists(os.path.join(CORPUS, f"{n}.onnx"))]
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-")
    cases = [load_case(n) for n in names]
    for c in cases:
        if c["ref"] is None:
            fd_reference(c)
    peer_ad = peer_transforms("onnx-ad", a.onnx_ad_python, cases, a.repeat, tmp)
    peer_tr = peer_transforms("ort-training", a.ort_training_python, cases, 1, tmp)
    rows = []
    for c in cases:
        print(f"== {c['name']}", flush=True)
        ours = our_transforms(c, a.repeat)
        pa, pt = peer_ad.get(c["name"], {}), peer_tr.get(c["name"], {})
        variants = {"primal": (c["model"], "primal", None)}
        nodes = {"primal": len(c["model"].graph.node)}
        transform, errors = {}, {}
        for label, entry, kind, peer in (("ours_fwd", ours.get("fwd"), "fwd", "ours"),
                                         ("ours_rev", ours.get("rev"), "rev", "ours"),
                                         ("onnx_ad_fwd", pa.get("fwd"), "fwd", "onnx-ad"),
                                         ("onnx_ad_rev", pa.get("rev"), "rev", "onnx-ad"),
                                         ("ort_training", pt.get("rev"), "rev", "ort-training")):
            if not entry or "model" not in entry:
                errors[label] = (entry or {}).get("error") or pa.get("error") or "not built"
                continue
            variants[label] = (entry["model"], kind, peer)
            nodes[label] = len(entry["model"].graph.node)
            transform[label] = entry["transform_s"]
        times = measure(c, variants, a.rounds, a.ort_training_python)
        rows.append({"name": c["name"], "inputs": c["inputs"], "outputs": c["outputs"],
                     "reference": c["ref"]["kind"], "nodes": nodes, "transform_s": transform,
                     "times": times, "errors": errors})
        print(report(rows[-1:], None).splitlines()[-1], flush=True)
    scale = None
    if a.scaling:
        scale = scaling([int(s) for s in a.scaling.split(",")], a.onnx_ad_python, tmp)
    text = report(rows, scale)
    meta = {"ort": ort.__version__, "rounds": a.rounds, "date": time.strftime("%Y-%m-%d %H:%M")}
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(f"ONNX Runtime {ort.__version__}, 1 thread, median of {a.rounds} rounds; "
                f"ratios over the primal's time measured in the same rounds.\n\n" + text + "\n")
    json.dump({"meta": meta, "models": rows, "scaling": scale},
              open(os.path.join(a.out, "results.json"), "w"), indent=1, default=str)
    print(text)


if __name__ == "__main__":
    main()
