"""Fuzz run (issue 7): generated and mutated models through import ->
forward/reverse -> export -> ONNX Runtime, each case in a child process.

    python test/fuzz/run.py -n 2000 --seed 0 [--jobs 2] [--log fuzz.jsonl]
    python test/fuzz/run.py --case 1234 --seed 0      # one case, in-process, verbose

A benchmark-style script, not part of the test suite (a small seeded sample
runs in CI: test/python/test_fuzz_sample.py). Case i with base seed S uses
seed S*1_000_003 + i; i % 10 in 0..4 is a generated valid model (every
fourth with all input and output extents made run-time ones,
"gen:dynamic", each also differentiated through onnx-ad-translate and
onnx-ad-opt text files against the API; every eighth float32 one also in
float16 or bfloat16 (in turn), run by ONNX's reference evaluator, against
the float32 derivatives of the same model; every fourth also in second
order, every eighth also in third order, every fourth for a random part
of its inputs and outputs
against the whole, and every fourth with a Loop or Scan also reversed with
checkpoint=2 against the default and (with an If too) unrolled against the
original; each one's model in the default CasADi
layout against the onnx layout's, two directions, every fourth one's built
for exactly two directions too), 5..8 a
mutated model (mutate.py), 9 garbage MLIR text for onnx-ad-opt. From base
seed 144 on, generated models also hold sequence idioms (SEQUENCE_SEEDS),
from 147 on lists read back inside their Loops too (WINDOW_SEEDS), from 188
on the generator's wider op set (WIDE_SEEDS: indexing, recurrent, pools,
the remaining activations), from 190 on inside bodies too (WIDE_BODY_SEEDS),
from 253 on values read piece by piece and concatenated back (PIECES_SEEDS),
from 259 on by strided Slices too (STRIDED_SEEDS), from 266 on at opsets 7-28
instead of 13-28 (OLD_OPSET_SEEDS), from 272 on with Det, CenterCropPad, DFT,
AffineGrid, Col2Im, RoiAlign, MaxUnpool and GridSample too (RARE_SEEDS).

Cases run in long-lived worker processes (one import of MLIR/ORT per worker,
not per case); a worker that dies (signal, abort, non-zero exit) or takes
longer than --timeout on a case is reported for that case and replaced.

Outcomes:
  ok-ort-bug  "wrong" with ORT's default optimizations, but agrees with
              them at BASIC: ORT miscomputes the primal (not our bug); or a
              "bad-export" ORT refuses at session creation whose checks all
              pass with its optimizations off (its Reshape fusion on 0
              elements before opset 14)
  ok-casadi-k-lost  the CasADi-layout model fails where every seed is an
              [r, k*c] matrix whose c is 0 at run time (k cannot be read:
              ONNX Runtime reports a division by zero); a static c = 0 is
              refused when the model is built
  ok-casadi-empty-before-14  the CasADi-layout model fails on an extent 0
              at run time before opset 14 (Reshape without allowzero)
  ok-low-precision  a float16 or bfloat16 derivative model (every eighth
              float32 case) whose results, run by ONNX's reference
              evaluator, are more than 5% (bfloat16 25%) of the scale off
              the float32 ones, though it is right widened to float32: the
              type's rounding, or the evaluator's own quirks (its MaxPool
              Indices); for review
  ok-fd64     a float32 model "wrong" against float32 finite differences
              (step 1e-2: truncation error), but agrees (float32 tolerances)
              with finite differences of the same model in float64
  ok-fd-roundoff  "wrong", but agrees within the differences' rounding
              error, 4 eps max|y| / step added to the absolute tolerance
              (outputs far larger than their derivatives)
  ok-fd-step  "wrong", but agrees (same tolerances) with finite differences
              at a smaller step: float32 ones at 1e-3 instead of 1e-2 (when
              no float64 runtime has all its ops), float64 ones at 1e-8
              instead of 1e-6 (a kink, or a curvature such as cos(s^4) at
              s^4 ~ 8e4, within the larger step)
  ort-primal-crash  the worker died while only ONNX Runtime (or the onnx
              checker) ran the INPUT model, after our import and
              differentiation of it had finished (e.g. ORT 1.32's SIGFPE on
              a Scan with a non-zero axis over 0 extents): not our crash, and
              nothing to compare the derivative with
  ort-primal-hang  the same for a case that took longer than --timeout
              there (a Scan over 2^40 steps of empty tensors, seed 40 case
              1567: ORT runs every step)
  ok          derivative agrees with finite differences (adcheck), or a
              mutated input was accepted and is itself valid and checks out;
              ok-noref: accepted, but finite differences cannot judge
              (non-finite outputs, no smooth entry, or a "wrong" where the
              primal's intermediate values overflow: 0 x inf in the chain
              rule of an inf the outputs do not read)
  refused     a clean OnnxAdError whose message names something
  accepted-invalid  a mutated model ONNX itself rejects was differentiated
              anyway (not a crash; listed for review)
  accepted-ort-fails  a mutated model the onnx checker accepts (full_check,
              graph sorted) was differentiated, but ONNX Runtime cannot run
              it with feeds fitting its declared inputs (an element type ORT
              lacks, an index out of range at run time...); not compared
  wrong       derivative disagrees with finite differences          (bug)
              (every fourth generated case also checks its reverse model
              as a model: second derivatives, "second order" in the detail;
              every eighth the Hessian-vector model too, "third order")
  bad-export  a derivative model fails onnx.checker or ORT           (bug)
  crash       the child died, or a non-OnnxAdError escaped           (bug)
  hang        no answer within --timeout                            (bug)
  rule-error  RuleError: a derivative rule crashed                   (bug)
  io          input file changed, partial output after a failure,
              CLI printed a traceback / several lines                (bug)
  text-path   onnx-ad-translate + onnx-ad-opt through text files fail,
              or give other names or results than the API       (bug)
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUGS = ("wrong", "bad-export", "crash", "hang", "rule-error", "io", "text-path")
CASE_STRIDE = 1_000_003


# Base seeds from which generated models also hold sequence idioms, and
# lists read back inside their Loops (earlier ones reproduce the cases their
# logs name).
SEQUENCE_SEEDS = 144
WINDOW_SEEDS = 147
WIDE_SEEDS = 188
WIDE_BODY_SEEDS = 190
PIECES_SEEDS = 253
STRIDED_SEEDS = 259
OLD_OPSET_SEEDS = 266
RARE_SEEDS = 272


def sequence_level(base: int) -> int:
    return 2 if base >= WINDOW_SEEDS else 1 if base >= SEQUENCE_SEEDS else 0


def wide_level(base: int) -> int:
    return 6 if base >= RARE_SEEDS else 5 if base >= OLD_OPSET_SEEDS else \
        4 if base >= STRIDED_SEEDS else \
        3 if base >= PIECES_SEEDS else 2 if base >= WIDE_BODY_SEEDS else \
        1 if base >= WIDE_SEEDS else 0


def case_kind(i: int) -> str:
    r = i % 10
    return "gen" if r < 5 else "mut" if r < 9 else "mlir"


def case_seed(base: int, i: int) -> int:
    return base * CASE_STRIDE + i


_CONN = None  # the worker's pipe to the parent (None when run in-process)


def _stage(name: str | None) -> None:
    """Tells the parent what the worker runs now: if the worker dies in the
    stage "ort-primal" (only ONNX Runtime / the onnx checker on the input
    model, none of our code), the parent reports ort-primal-crash."""
    if _CONN is not None:
        _CONN.send({"stage": name})


# ---- in the child ------------------------------------------------------------------------

def _setup_child() -> None:
    for p in (HERE, os.path.join(ROOT, "test", "python")):
        if p not in sys.path:
            sys.path.insert(0, p)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import onnxruntime as ort
    ort.set_default_logger_severity(3)


def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _classify_exception(e: BaseException) -> tuple[str, str]:
    from adcheck import NoReference
    from onnx_ad_mlir.errors import OnnxAdError, RuleError
    msg = f"{type(e).__name__}: {str(e).strip()[:500]}"
    if isinstance(e, NoReference):
        return "ok-noref", msg
    if isinstance(e, RuleError):
        return "rule-error", msg
    if isinstance(e, OnnxAdError):
        first = str(e).strip()
        return ("refused" if first else "crash"), msg if first else "empty OnnxAdError message"
    if isinstance(e, AssertionError):
        return "wrong", msg
    mod = type(e).__module__ or ""
    tb = traceback.extract_tb(e.__traceback__)
    in_ort = any("onnxruntime" in fr.filename for fr in tb[-2:])
    if mod.startswith(("onnxruntime", "onnx.")) or mod == "onnx" or in_ort \
            or type(e).__name__ in ("ValidationError", "InferenceError"):
        return "bad-export", msg + "\n" + traceback.format_exc(limit=-3)
    return "crash", msg + "\n" + traceback.format_exc(limit=-4)


def _cli_check(inp: str, folder: str, mode: str) -> tuple[str | None, str]:
    """onnx-ad-mlir <mode> inp out: exit 0 with a loadable file, or exit 1 with
    one `error:` line and no file (no temporary left behind). Returns (problem, status)."""
    import subprocess
    import onnx
    out = os.path.join(folder, "out.onnx")
    exe = os.path.join(os.path.dirname(sys.executable), "onnx-ad-mlir")
    try:
        p = subprocess.run([exe, mode, inp, out], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "hang", "CLI timed out"
    leftovers = [f for f in os.listdir(folder) if f.startswith(".tmp-")]
    if p.returncode < 0:
        return "crash", f"CLI killed by signal {-p.returncode}: {p.stderr[-300:]}"
    if leftovers:
        return "io", f"CLI left temporaries {leftovers}"
    if p.returncode == 0:
        try:
            onnx.load(out)
        except Exception as e:  # noqa: BLE001
            return "io", f"CLI exit 0 but {out} unloadable: {e}"
        return None, "cli-ok"
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    if os.path.exists(out):
        return "io", f"CLI exit {p.returncode} but wrote {out}"
    if len(lines) != 1 or not lines[0].startswith("error:") or "Traceback" in p.stderr:
        return "io", f"CLI stderr is not one error line: {p.stderr[-400:]!r}"
    return None, "cli-refused: " + lines[0][:200]


def run_case(i: int, base: int, cli: bool | None = None) -> dict:
    """One case, in the current process (the worker)."""
    _setup_child()
    from generate import generate, GeneratorRejected
    from mutate import mutate

    seed = case_seed(base, i)
    kind = case_kind(i)
    rec = {"i": i, "seed": seed, "kind": kind}
    if cli is None:
        cli = (kind == "gen" and i % 20 == 0) or (kind == "mut" and i % 3 == 0)
    try:
        _stage("ort-primal")  # the generator checks and runs its model in ORT
        model, feeds = generate(seed, sequences=sequence_level(base), wide=wide_level(base))
        _stage(None)
    except GeneratorRejected as e:
        rec.update(outcome="gen-rejected", detail=str(e)[:300])
        return rec
    rec["ops"] = sorted({n.op_type for n in model.graph.node} - {"Constant"})
    rec["opset"] = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if kind == "gen" and i % 4 == 3:
        model = _dynamized(model)
        rec["kind"] = "gen:dynamic"
    with tempfile.TemporaryDirectory(prefix="fuzz-") as folder:
        if kind == "gen":
            rec.update(_run_generated(model, feeds, folder, i))
        elif kind == "mut":
            mkind, data = mutate(model, seed)
            rec["kind"] = f"mut:{mkind}"
            rec.update(_run_mutated(data, feeds, folder, i))
        else:
            rec.update(_run_mlir(model, seed, folder, rec))
            cli = False
        if cli and rec["outcome"] not in BUGS:
            inp = os.path.join(folder, "in.onnx")
            before = _sha(inp)
            problem, status = _cli_check(inp, folder, "reverse" if i % 2 else "forward")
            rec["cli"] = status
            if _sha(inp) != before:
                problem, status = "io", "CLI changed its input file"
            if problem:
                rec.update(outcome=problem, detail=status)
    return rec


def _dynamized(model):
    """The same model with every extent of its inputs and outputs a named
    run-time extent and no intermediate shapes recorded: the rules' paths
    for extents known only at run time, on the same feeds."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.HasField("shape"):
            for a, d in enumerate(v.type.tensor_type.shape.dim):
                d.Clear()
                d.dim_param = f"{v.name}_{a}"
    del m.graph.value_info[:]
    return m


def _run_generated(model, feeds, folder, i) -> dict:
    import onnx
    from adcheck import check_derivatives, run
    from onnx_ad_mlir import api
    path = os.path.join(folder, "in.onnx")
    onnx.save(model, path)
    before = _sha(path)
    try:
        # one mode from the file (path import) in the default (CasADi) layout,
        # checked as ONNX; then both against finite differences (onnx layout)
        casadi = (api.reverse if i % 2 else api.forward)(path)
        onnx.checker.check_model(casadi, full_check=True)
        _ort_primal(model, feeds)
        errs = check_derivatives(model, feeds, seed=i)
        out = {"outcome": "ok", "detail": json.dumps(errs)}
    except Exception as e:  # noqa: BLE001
        out = _judged(e, model, feeds, i)
    if out["outcome"] == "ok":
        out = _casadi_judged(lambda: _casadi_agrees(casadi, model, feeds, i), model, feeds,
                             _float_values(feeds.values()) if i % 2 == 0 else
                             _float_values(run(model, feeds).values())) or out
    if out["outcome"] == "ok" and i % 4 == 1:
        out = _higher_order(model, feeds, i, 2) or _casadi_second_order(model, feeds, i) or out
    if out["outcome"] == "ok" and i % 8 == 5:
        out = _higher_order(model, feeds, i, 3) or out
    if out["outcome"] == "ok" and i % 4 == 2:
        out = _checkpointed(model, feeds, i) or _unrolled(model, feeds, i) or out
    if out["outcome"] == "ok" and i % 4 == 0:
        out = _subset_judged(model, feeds, i) or out
    if out["outcome"] == "ok" and i % 4 == 3:
        out = _text_path_judged(model, feeds, folder, i) or out
    if out["outcome"] == "ok" and i % 8 == 6:
        out = _narrow_judged(model, feeds, i) or out
    if _sha(path) != before:
        out = {"outcome": "io", "detail": "input file changed"}
    return out


def _casadi_judged(check: Callable[[], None], model, feeds, seeded: list) -> dict | None:
    """The outcome of `check` (a CasADi layout's model against the onnx
    layout's): None when they agree; else a known limitation, ONNX Runtime's
    optimizers (it agrees with them off), or a bug ("wrong" for other
    numbers, "bad-export" for a failure). `seeded`: the values whose seeds
    carry the direction count (a mode's inputs or outputs)."""
    import numpy as np
    from adcheck import run
    try:
        check()
        return None
    except Exception as e:  # noqa: BLE001
        error = e
    values = list(feeds.values()) + list(run(model, feeds).values())
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if seeded and all(np.ndim(v) == 2 and np.shape(v)[1] == 0 for v in seeded):
        return {"outcome": "ok-casadi-k-lost", "detail": "every seed is a CasADi [r, k*c] "
                "matrix whose c is 0 at run time: k is lost\n" + _short(error)}
    if opset < 14 and any(0 in np.shape(v) for v in values):
        return {"outcome": "ok-casadi-empty-before-14", "detail": "an extent 0 at run time "
                "before opset 14 (no allowzero): the CasADi layout's Reshapes fail\n"
                + _short(error)}
    try:
        import adcheck
        saved, adcheck.session = adcheck.session, _sessions_at("ORT_DISABLE_ALL")
        try:
            check()
        finally:
            adcheck.session = saved
        return {"outcome": "ok-ort-bug", "detail": "ONNX Runtime's graph optimizations break "
                "a CasADi-layout (or directions=2) model it runs right without them\n"
                + _short(error)}
    except Exception:  # noqa: BLE001
        pass
    outcome = "wrong" if isinstance(error, AssertionError) else "bad-export"
    return {"outcome": outcome, "detail": "CasADi layout (or directions=2): " + _short(error)}


def _float_values(values) -> list:
    import numpy as np
    return [v for v in values if np.issubdtype(np.asarray(v).dtype, np.floating)]


def _casadi_second_order(model, feeds, i) -> dict | None:
    """Every fourth generated case (with its second-order check): CasADi's
    Hessian model, forward(reverse(m)) in the default layout as `family`
    writes it, against the onnx layout's on two directions of each kind:
    the seeds of seeds are CasADi's matrix view of the adjoint's matrix
    view."""
    import numpy as np
    from adcheck import run
    from onnx_ad_mlir import api
    ys = run(model, feeds)
    shapes = {**{k: v.shape for k, v in feeds.items()}, **{k: np.shape(v) for k, v in ys.items()}}

    def check() -> None:
        _layouts_agree(api.forward(api.reverse(model, layout="onnx"), layout="onnx"),
                       api.forward(api.reverse(model)), feeds, shapes, i)
    out = _casadi_judged(check, model, feeds, _float_values(ys.values()))
    if out is not None:
        out["detail"] = "second order: " + out["detail"]
    return out


def _levels(name: str, known: dict) -> tuple[int, str]:
    """How many derivative prefixes a boundary name has, and its primal's
    name (the first of `known`'s names met)."""
    levels = 0
    while name not in known and name.startswith(("fwd_", "adj_")):
        name, levels = name[4:], levels + 1
    return levels, name


def _seed_feeds(derived, feeds: dict, shapes: dict, rng, k: int) -> dict:
    """Random seeds for the inputs of `derived` (a derivative model) that
    `feeds` lacks: each its primal's shape (`shapes`) plus k directions per
    derivative prefix, in its declared element type."""
    seeds = {}
    for vi in derived.graph.input:
        if vi.name not in feeds:
            levels, base = _levels(vi.name, shapes)
            seeds[vi.name] = rng.standard_normal(shapes[base] + (k,) * levels).astype(
                _dtype(vi))
    return seeds


def _nested_casadi(v, shape: tuple, levels: int):
    """An onnx-layout derivative of `levels` orders (shape + [k1, k2, ...])
    in CasADi's matrix view of the matrix view."""
    import numpy as np
    if levels == 1:
        return _to_casadi(v, shape)
    inner = np.stack([_nested_casadi(v[..., j], shape, levels - 1) for j in range(v.shape[-1])],
                     -1)
    return _to_casadi(inner, inner.shape[:-1])


def _subset_judged(model, feeds, i) -> dict | None:
    """Every fourth generated case: the derivative model for a random part
    of the float inputs and outputs (`inputs=`, `outputs=`) gives the whole
    model's results there, the other seeds zero. None when it does or the
    model has one float input and one output."""
    import numpy as np
    from adcheck import run
    from onnx_ad_mlir import api
    floats = [n for n, v in feeds.items() if np.issubdtype(v.dtype, np.floating)]
    outs = [o.name for o in model.graph.output]
    if len(floats) < 2 and len(outs) < 2:
        return None
    rng = np.random.default_rng(i)
    xs = sorted(rng.choice(floats, size=max(1, len(floats) // 2), replace=False).tolist())
    ys = sorted(rng.choice(outs, size=max(1, len(outs) // 2), replace=False).tolist())
    mode, prefix = (api.reverse, "adj_") if i % 8 == 4 else (api.forward, "fwd_")
    try:
        part = mode(model, inputs=xs, outputs=ys, layout="onnx")
        whole = mode(model, layout="onnx")
        values = {**feeds, **run(model, feeds)}
        seeded = ys if mode is api.reverse else xs
        every = [o.name for o in model.graph.output] if mode is api.reverse else floats
        seeds = {f"{prefix}{n}": rng.standard_normal(np.shape(values[n]) + (1,)).astype(
            np.asarray(values[n]).dtype) for n in seeded}
        zeros = {f"{prefix}{n}": np.zeros(np.shape(values[n]) + (1,), np.asarray(values[n]).dtype)
                 for n in every if n not in seeded}
        whole_feeds = {**feeds, **seeds, **zeros}
        want = run(whole, {k: v for k, v in whole_feeds.items()
                           if k in {x.name for x in whole.graph.input}})
        got = run(part, {**feeds, **seeds})
        for name in (f"{prefix}{n}" for n in (xs if mode is api.reverse else ys)):
            scale = max(1.0, float(np.abs(want[name]).max(initial=0.0)))
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6 * scale,
                                       err_msg=f"{name} for inputs {xs}, outputs {ys}")
    except Exception as e:  # noqa: BLE001
        from onnx_ad_mlir.errors import OnnxAdError
        if isinstance(e, OnnxAdError):  # a part the whole model's derivative did not refuse
            return {"outcome": "rule-error", "detail": f"inputs {xs}, outputs {ys}: "
                    + _short(e)}
        outcome = "wrong" if isinstance(e, AssertionError) else "bad-export"
        return {"outcome": outcome, "detail": f"inputs {xs}, outputs {ys}: " + _short(e)}
    return None


def _text_path_judged(model, feeds, folder, i) -> dict | None:
    """Every fourth generated case (the gen:dynamic ones): the compiler
    user's path, onnx-ad-translate --import-onnx, onnx-ad-opt with the AD
    pass and the API's cleanup, onnx-ad-translate --export-onnx, through
    text files (every other one printed in generic form), gives the API's
    model: the same names in order and the same results on the same seeds.
    None when it does."""
    import contextlib
    import io
    import numpy as np
    import onnx
    from adcheck import run
    from onnx_ad_mlir import api
    from onnx_ad_mlir.tools import opt, translate
    mode = "reverse" if i % 8 == 7 else "forward"
    src, imported, derived, out = (os.path.join(folder, n) for n in
                                   ("in.onnx", "in.mlir", "ad.mlir", "text.onnx"))
    # the reverse ones also through upstream passes that read the region
    # ops' interfaces (RegionBranchOpInterface, LoopLikeOpInterface); not
    # remove-dead-values, whose liveness analysis in MLIR 22 can miss the
    # scan outputs of a Scan nested in a region (DESIGN.md)
    upstream = ",func.func(sccp,loop-invariant-code-motion,control-flow-sink,canonicalize," \
        "cse)" if mode == "reverse" else ""
    pipeline = f"builtin.module(onnx-ad-{mode}{{layout=onnx}},func.func(canonicalize,cse)" \
        f"{upstream})"
    generic = ["--mlir-print-op-generic"] if i % 8 == 3 else []
    steps = ((translate, ["--import-onnx", src, "-o", imported, *generic]),
             (opt, [imported, f"--pass-pipeline={pipeline}", "-o", derived]),
             (translate, ["--export-onnx", derived, "-o", out]))
    for tool, argv in steps:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = tool.main(argv)
        if rc != 0:
            return {"outcome": "text-path", "detail": f"{tool.__name__} {' '.join(argv[:2])}: "
                    + err.getvalue().strip()[:1000]}
    via_text, via_api = onnx.load(out), getattr(api, mode)(model, layout="onnx")
    try:
        onnx.checker.check_model(via_text, full_check=True)
        for what in ("input", "output"):
            names = [[v.name for v in getattr(m.graph, what)] for m in (via_text, via_api)]
            assert names[0] == names[1], f"{what}s {names[0]} against the API's {names[1]}"
        shapes = {**{k: v.shape for k, v in feeds.items()},
                  **{k: np.shape(v) for k, v in run(model, feeds).items()}}
        seeded = {**feeds, **_seed_feeds(via_api, feeds, shapes, np.random.default_rng(i), 2)}
        want, got = run(via_api, seeded), run(via_text, seeded)
        for name, v in want.items():
            if _levels(name, shapes)[0]:  # (a derivative; the primal is the API's too)
                scale = max(1.0, float(np.abs(v).max(initial=0.0)))
                np.testing.assert_allclose(got[name], v, rtol=1e-5, atol=1e-6 * scale,
                                           err_msg=f"{name} through text against the API")
    except Exception as e:  # noqa: BLE001
        return {"outcome": "text-path", "detail": f"{mode}: " + _short(e)}
    return None


def _narrow_judged(model, feeds, i) -> dict | None:
    """Every eighth generated float32 case, in turn float16 (i % 16 == 6)
    and bfloat16: the model in that type (values, constants, Casts),
    differentiated in both modes. The derivative models pass ONNX's full
    check; widened back to float32 they give, in ONNX Runtime, the float32
    derivatives of the same (exactly widened) model within the rounding of
    the rules' own constants (2%, bfloat16 10%; the rules take other paths
    for narrow types: no Conv patches, Casts around OneHot...); and
    ONNX's reference evaluator runs them in the narrow type (ONNX Runtime's
    CPU provider has few float16 and no bfloat16 kernels) wherever it runs
    the float32 ones. Their results off by more than the type's share of
    the scale (float16 5%, bfloat16 25%) are ok-low-precision, for review.
    None when all holds, or when the evaluator cannot run the narrow model
    or its results are not finite."""
    import numpy as np
    import onnx
    from onnx import TensorProto as TP
    from onnx.reference import ReferenceEvaluator
    from adcheck import run
    from onnx_ad_mlir import api
    from onnx_ad_mlir.errors import OnnxAdError, RuleError
    if any(v.dtype == np.float64 for v in feeds.values()) or \
            not any(v.dtype == np.float32 for v in feeds.values()):
        return None
    elem = TP.FLOAT16 if i % 16 == 6 else TP.BFLOAT16
    np_narrow = onnx.helper.tensor_dtype_to_np_dtype(elem)
    # (widened, the rules' own constants keep the type's rounding: Attention's
    # sqrt(scale) in float16 moved one adjoint entry by 1.2%)
    type_name, near, share = {TP.FLOAT16: ("float16", 2e-2, 5e-2),
                              TP.BFLOAT16: ("bfloat16", 1e-1, 2.5e-1)}[elem]
    narrow = _retyped(model, elem)
    try:  # (ops whose types lack the narrow one at the model's opset: nothing to judge)
        onnx.checker.check_model(narrow, full_check=True)
    except Exception:  # noqa: BLE001
        return None
    single = _retyped(narrow, TP.FLOAT, elem)  # the same function, in float32
    feeds_n = {k: v.astype(np_narrow) if v.dtype == np.float32 else v for k, v in feeds.items()}
    feeds32 = {k: v.astype(np.float32) if v.dtype == np_narrow else v for k, v in feeds_n.items()}

    def evaluate(m, f):
        ev = ReferenceEvaluator(m)
        return dict(zip(ev.output_names, ev.run(None, f)))
    try:
        ys = evaluate(narrow, feeds_n)
    except Exception:  # noqa: BLE001 - the evaluator, on the input: nothing to judge
        return None
    if not all(np.all(np.isfinite(np.asarray(v, np.float32))) for v in ys.values()
               if isinstance(v, np.ndarray) and v.dtype.kind in "fV"):
        return None
    shapes = {**{k: v.shape for k, v in feeds.items()},  # (ONNX Runtime's, as the seeds')
              **{k: np.shape(v) for k, v in run(single, feeds32).items()}}
    rng = np.random.default_rng(i)
    imprecise = None
    for mode in (api.forward, api.reverse):
        what = f"{type_name}, {mode.__name__}"
        try:
            dn = mode(narrow, layout="onnx")
        except RuleError as e:
            return {"outcome": "rule-error", "detail": f"{what}: " + _short(e)}
        except OnnxAdError:
            continue  # refused in the narrow type (the float32 model's derivative was not)
        seeds = _seed_feeds(dn, feeds_n, shapes, rng, 2)
        feeds_d32 = {**feeds32, **{k: v.astype(np.float32) for k, v in seeds.items()}}
        d32 = mode(single, layout="onnx")
        try:
            onnx.checker.check_model(dn, full_check=True)
            want, widened = run(d32, feeds_d32), run(_retyped(dn, TP.FLOAT, elem), feeds_d32)
            for name, v in want.items():
                if _levels(name, shapes)[0]:
                    scale = max(1.0, float(np.abs(v).max(initial=0.0)))
                    np.testing.assert_allclose(widened[name], v, rtol=near, atol=near * scale,
                                               err_msg=f"{what}: {name}, widened, against "
                                               "float32")
        except AssertionError as e:
            return {"outcome": "wrong", "detail": _short(e)}
        except Exception as e:  # noqa: BLE001
            return {"outcome": "bad-export", "detail": f"{what}: " + _short(e)}
        if _holds(dn.graph, _EVALUATOR_WIDENS):
            continue
        try:  # (the evaluator in both types: its own gaps and quirks are in both)
            want = evaluate(d32, feeds_d32)
        except Exception:  # noqa: BLE001
            continue
        try:
            got = evaluate(dn, {**feeds_n, **seeds})
        except Exception as e:  # noqa: BLE001
            return {"outcome": "bad-export", "detail": f"{what}, evaluated: " + _short(e)}
        for name, v in want.items():
            if _levels(name, shapes)[0] and imprecise is None:
                scale = max(1.0, float(np.abs(v).max(initial=0.0)))
                try:
                    np.testing.assert_allclose(np.asarray(got[name], np.float32), v, rtol=share,
                                               atol=share * scale,
                                               err_msg=f"{what}: {name} against float32")
                except AssertionError as e:
                    imprecise = {"outcome": "ok-low-precision", "detail": _short(e)}
    return imprecise


# Ops whose result ONNX 1.23's reference evaluator gives in float32 for
# float16 and bfloat16 operands (AffineGrid): a narrow derivative model that
# feeds one into another op fails in the evaluator, not in the model.
_EVALUATOR_WIDENS = {"AffineGrid"}


def _holds(graph, op_types: set[str]) -> bool:
    """Whether the graph or a subgraph holds a node of one of `op_types`."""
    from onnx_ad_mlir.validate import node_subgraphs
    return any(n.op_type in op_types or any(_holds(g, op_types) for g in node_subgraphs(n))
               for n in graph.node)


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:1500]}"


def _to_casadi(v, shape: tuple):
    """An onnx-layout seed or derivative (shape + [k]) in CasADi's matrix
    view: [n, k] for rank <= 1, [r, k*c] (seed j in columns j*c...) for
    rank 2, [numel, k] (row-major) above."""
    k = v.shape[-1]
    if len(shape) <= 1:
        return v.reshape(shape[0] if shape else 1, k)
    if len(shape) == 2:
        return v.transpose(0, 2, 1).reshape(shape[0], k * shape[1])
    return v.reshape(-1, k)


def _casadi_agrees(casadi, model, feeds, i) -> None:
    """The default (CasADi) layout's model gives the onnx layout's results,
    which the finite differences just checked, on two directions at once
    (so the interleaving of k and the columns counts); every fourth case
    also the model built for exactly two directions (`directions=2`, static
    seed extents). Raises AssertionError (a "wrong" outcome) when not."""
    import numpy as np
    from adcheck import run
    from onnx_ad_mlir import api
    mode = api.reverse if i % 2 else api.forward
    shapes = {**{k: v.shape for k, v in feeds.items()},
              **{k: np.shape(v) for k, v in run(model, feeds).items()}}
    onnx_feeds, want = _layouts_agree(mode(model, layout="onnx"), casadi, feeds, shapes, i)
    if i % 8 not in (0, 3):
        return
    static = run(mode(model, layout="onnx", directions=2), onnx_feeds)
    for name, v in want.items():
        if name not in shapes:  # (a derivative, not a primal output)
            scale = max(1.0, float(np.abs(v).max(initial=0.0)))
            np.testing.assert_allclose(static[name], v, rtol=1e-4, atol=1e-5 * scale,
                                       err_msg=f"{name} with directions=2 against any k")


def _layouts_agree(plain, casadi, feeds, shapes: dict, i) -> tuple[dict, dict]:
    """Runs the onnx-layout model `plain` and its CasADi-layout twin on the
    same two directions per seed (of seeds, for derivatives of derivatives)
    and asserts every derivative agrees in CasADi's matrix view; returns the
    onnx layout's feeds and results. `shapes`: the primal inputs' and
    outputs'."""
    import numpy as np
    from adcheck import run
    seeds = _seed_feeds(plain, feeds, shapes, np.random.default_rng(i), 2)
    onnx_feeds = {**feeds, **seeds}
    casadi_feeds = dict(feeds)
    for name, seed in seeds.items():
        levels, base = _levels(name, shapes)
        casadi_feeds[name] = _nested_casadi(seed, shapes[base], levels)
    want, got = run(plain, onnx_feeds), run(casadi, casadi_feeds)
    for name, v in want.items():
        levels, base = _levels(name, shapes)
        if not levels:
            continue
        expected = _nested_casadi(v, shapes[base], levels)
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        np.testing.assert_allclose(got[name], expected, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"CasADi layout of {name} against the onnx layout")
    return onnx_feeds, want


def _dtype(vi):
    from onnx import helper
    return helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)


def _judged(e: BaseException, model, feeds, i) -> dict:
    """The outcome of a failed check; a "wrong" one re-judged by finite
    differences that can resolve it (see the module docstring)."""
    outcome, detail = _classify_exception(e)
    if outcome == "wrong":
        for agrees, verdict, why in _REJUDGES:
            if agrees(model, feeds, i):
                return {"outcome": verdict, "detail": why + "\n" + detail}
    if outcome == "bad-export" and "ONNXRuntimeError" in detail and \
            _agrees_unoptimized(model, feeds, i):
        return {"outcome": "ok-ort-bug", "detail": "ONNX Runtime's graph optimizations reject "
                "a derivative model it runs without them\n" + detail}
    return {"outcome": outcome, "detail": detail}


def _higher_order(model, feeds, i, order: int) -> dict | None:
    """Order 2, every fourth generated case: the reverse model, a function
    of the inputs and the output seeds, checked like a model of its own, so
    forward(reverse(m)) meets finite differences of the gradient and
    reverse(reverse(m)) the dot test (closure of the rules under their own
    output). Order 3, every eighth (after order 2): forward(reverse(m)),
    the Hessian-vector product, checked the same way. None when it checks
    out or finite differences cannot judge."""
    import numpy as np
    from adcheck import check_derivatives, run
    from onnx_ad_mlir import api
    derived = api.reverse(model, layout="onnx")  # (the first-order check built it already)
    if order == 3:
        derived = api.forward(derived, layout="onnx")
    ys = run(model, feeds)
    shapes = {**{k: v.shape for k, v in feeds.items()}, **{k: v.shape for k, v in ys.items()}}
    # the seeds: one direction per order
    feeds2 = {**feeds, **_seed_feeds(derived, feeds, shapes, np.random.default_rng(i), 1)}
    try:
        check_derivatives(derived, feeds2, seed=i)
    except Exception as e:  # noqa: BLE001
        out = _judged(e, derived, feeds2, i)
        if not out["outcome"].startswith("ok"):
            what = "second order (the reverse model" if order == 2 else \
                "third order (the forward model of the reverse model"
            out["detail"] = f"{what} differentiated): " + out["detail"]
            return out
    return None


def _checkpointed(model, feeds, i) -> dict | None:
    """Every fourth generated case with a Loop or Scan: reverse mode with
    checkpoint=2 (segments of two steps, recomputed) gives the default's
    adjoints. None when it does, or when there is no loop."""
    import numpy as np
    import onnx
    from adcheck import run
    from onnx_ad_mlir import api
    from onnx_ad_mlir.errors import OnnxAdError
    if not any(n.op_type in ("Loop", "Scan") for n in model.graph.node):
        return None
    ys = run(model, feeds)
    rng = np.random.default_rng(i)
    seeds = {f"adj_{o.name}": rng.standard_normal(ys[o.name].shape + (1,)).astype(ys[o.name].dtype)
             for o in model.graph.output}
    try:
        plain = run(api.reverse(model, layout="onnx"), {**feeds, **seeds})
        segmented = api.reverse(model, layout="onnx", checkpoint=2)
        onnx.checker.check_model(segmented, full_check=True)
        got = run(segmented, {**feeds, **seeds})
        for name, want in plain.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"checkpoint=2 vs default: {name}")
    except OnnxAdError as e:
        return {"outcome": "refused", "detail": f"checkpoint=2: {e}"[:300]}
    except Exception as e:  # noqa: BLE001 - (no re-judging: the reference is our default)
        outcome, detail = _classify_exception(e)
        return {"outcome": outcome, "detail": "checkpoint=2: " + detail}
    return None


def _unrolled(model, feeds, i) -> dict | None:
    """Every fourth generated case with a Loop, Scan or If: `unroll` (loops
    of constant trip count flattened, constant Ifs inlined) gives the same
    outputs in ONNX Runtime, and its forward derivative the original's (a
    second, loop-free derivation of the same function). None when it does,
    or when there is nothing to unroll."""
    import numpy as np
    import onnx
    from adcheck import run
    from onnx_ad_mlir import api
    if not any(n.op_type in ("Loop", "Scan", "If") for n in model.graph.node):
        return None
    rng = np.random.default_rng(i)
    seeds = {f"fwd_{k}": rng.standard_normal(v.shape + (1,)).astype(v.dtype)
             for k, v in feeds.items() if np.issubdtype(v.dtype, np.floating)}
    try:
        flat = api.unroll(model)
        onnx.checker.check_model(flat, full_check=True)
        outputs = run(flat, feeds)
        for name, want in run(model, feeds).items():
            np.testing.assert_allclose(outputs[name], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"unroll: {name}")
        plain = run(api.forward(model, layout="onnx"), {**feeds, **seeds})
        got = run(api.forward(flat, layout="onnx"), {**feeds, **seeds})
        for name, want in plain.items():
            scale = max(1.0, float(np.abs(want).max(initial=0.0)))
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6 * scale,
                                       err_msg=f"forward of unroll vs forward: {name}")
    except Exception as e:  # noqa: BLE001 - (no re-judging: the reference is the original)
        outcome, detail = _classify_exception(e)
        return {"outcome": outcome, "detail": "unroll: " + detail}
    return None


def _ort_primal(model, feeds) -> None:
    """Runs the input model once in ORT as stage "ort-primal" (the finite
    differences run it at the same shapes: if this passes, a later death is
    in running our derivative models). A model ORT refuses (its own shape
    inference, e.g. ONNX's extent 0 for a 3-D Attention over a run-time V
    width, read by a SplitToSequence) leaves nothing to compare with."""
    import adcheck
    _stage("ort-primal")
    try:
        adcheck.run(model, feeds)
    except Exception as e:  # noqa: BLE001 - the input, not a model we wrote
        raise adcheck.NoReference(
            f"ONNX Runtime cannot run the input model: {type(e).__name__}: {str(e)[:300]}") from e
    finally:
        _stage(None)


def _mvn_in_primitives(node, opset: int, elem: int) -> list:
    """MeanVarianceNormalization as (x - mean) / (sqrt(mean((x - mean)^2))
    + 1e-9) in any float type: ONNX's function body adds a float32 epsilon,
    so neither ONNX Runtime (no float64 kernel) nor the reference evaluator
    (a float32 constant beside float64 values) runs it in float64."""
    from onnx import helper, TensorProto as TP
    x, y = node.input[0], node.output[0]
    axes = next((list(a.ints) for a in node.attribute if a.name == "axes"), [0, 2, 3])
    p = f"{y}__mvn64_"

    def mean(src: str, dst: str) -> list:
        if opset < 18:
            return [helper.make_node("ReduceMean", [src], [dst], axes=axes)]
        return [helper.make_node("ReduceMean", [src, p + "axes"], [dst])]
    return [helper.make_node("Constant", [], [p + "axes"],
                             value=helper.make_tensor(p + "axes", TP.INT64, [len(axes)], axes)),
            *mean(x, p + "mean"),
            helper.make_node("Sub", [x, p + "mean"], [p + "centred"]),
            helper.make_node("Mul", [p + "centred", p + "centred"], [p + "square"]),
            *mean(p + "square", p + "variance"),
            helper.make_node("Sqrt", [p + "variance"], [p + "sd"]),
            helper.make_node("Constant", [], [p + "eps"],
                             value=helper.make_tensor(p + "eps", elem, [], [1e-9])),
            helper.make_node("Add", [p + "sd", p + "eps"], [p + "denominator"]),
            helper.make_node("Div", [p + "centred", p + "denominator"], [y])]


def _to_float64(model):
    """The same model in float64: float32 values, constants and Casts to
    float32 widened exactly (a reference for finite differences), and
    MeanVarianceNormalization written out (_mvn_in_primitives)."""
    from onnx import TensorProto as TP
    return _retyped(model, TP.DOUBLE)


def _retyped(model, elem: int, source: int = 1):
    """The model with its values, constants and Casts of element type
    `source` (float32) in type `elem` (MeanVarianceNormalization written out)."""
    import onnx
    import onnx.numpy_helper as nh
    from onnx import AttributeProto as AP
    np_elem = onnx.helper.tensor_dtype_to_np_dtype(elem)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))

    def tensor(t):
        if t.data_type == source:
            t.CopyFrom(nh.from_array(nh.to_array(t).astype(np_elem), t.name))

    def graph(g):
        for v in list(g.input) + list(g.output) + list(g.value_info):
            if v.type.tensor_type.elem_type == source:
                v.type.tensor_type.elem_type = elem
        for t in g.initializer:
            tensor(t)
        nodes = [part for n in g.node for part in (
            _mvn_in_primitives(n, opset, elem) if n.op_type == "MeanVarianceNormalization"
            and n.domain in ("", "ai.onnx") else [n])]
        del g.node[:]
        g.node.extend(nodes)
        for n in g.node:
            for a in n.attribute:
                if a.type == AP.TENSOR:
                    tensor(a.t)
                elif a.type == AP.GRAPH:
                    graph(a.g)
                elif a.name in ("to", "dtype") and a.type == AP.INT and a.i == source:
                    a.i = elem
    graph(m.graph)
    return m


def _checks_with(model, feeds, i, reference=None, **patched) -> bool:
    """adcheck.check_derivatives passes, with the adcheck attributes named in
    `patched` (session, _tol) replaced for the call."""
    import adcheck
    saved = {name: getattr(adcheck, name) for name in patched}
    for name, value in patched.items():
        setattr(adcheck, name, value)
    try:
        adcheck.check_derivatives(model, feeds, seed=i, reference=reference)
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        for name, value in saved.items():
            setattr(adcheck, name, value)


def _agrees_in_float64(model, feeds, i) -> bool:
    """A float32 model's derivatives against float64 finite differences of
    the same model (float32 tolerances): float32 differences with step 1e-2
    carry truncation errors of order step**2 * f''' (Pow(x*x + 1, Tanh(x))
    near 0 was "wrong" by 5e-3). False when ORT cannot run it in float64."""
    from onnx import TensorProto as TP
    import adcheck
    if not any(v.type.tensor_type.elem_type == TP.FLOAT for v in model.graph.input):
        return False
    ref = _to_float64(model)
    if _checks_with(model, feeds, i, ref):
        return True
    # ORT lacks float64 kernels for some ops (Conv, Softplus...): the float64
    # primal runs in onnx's reference evaluator instead (derivatives in ORT)
    plain = adcheck.session

    class Evaluator:
        def __init__(self, m):
            from onnx.reference import ReferenceEvaluator
            self.ev = ReferenceEvaluator(m)

        def get_outputs(self):
            return [type("Out", (), {"name": n})() for n in self.ev.output_names]

        def run(self, names, feeds):
            return self.ev.run(names, feeds)

    return _checks_with(model, feeds, i, ref,
                        session=lambda m: Evaluator(m) if m is ref else plain(m))


def _agrees_at_smaller_step(model, feeds, i) -> bool:
    """The model against central differences at a step 10x (float32: no
    float64 reference, ORT and the reference evaluator both lack an op) or
    100x (float64) smaller, same tolerances: a kink or strong curvature
    within the larger step (Max, an If on a sum's sign, a Cos of a large
    power) made it disagree."""
    import numpy as np
    import adcheck
    plain = adcheck._tol

    def smaller(dtype):
        step, rtol, atol = plain(dtype)
        return (step / 10 if dtype == np.float32 else step / 100), rtol, atol
    return _checks_with(model, feeds, i, _tol=smaller)


def _agrees_within_roundoff(model, feeds, i) -> bool:
    """Central differences carry a rounding error of about eps * |y| / step:
    outputs near 7e4 with derivatives near 0.1 (nested Scans and Loops of
    squares, seed 28 case 1340) put it above float64's tolerance while
    forward and reverse agree to 1e-16. Checked again with 4 eps max|y| /
    step added to the absolute tolerance."""
    import numpy as np
    import adcheck
    ys = [y for y in adcheck.run(model, feeds).values()
          if np.issubdtype(np.asarray(y).dtype, np.floating) and np.size(y)]
    if not ys:
        return False
    top = max(float(np.abs(np.asarray(y, np.float64)).max()) for y in ys)
    plain = adcheck._tol

    def widened(dtype):
        step, rtol, atol = plain(dtype)
        return step, rtol, atol + 4 * float(np.finfo(dtype).eps) * top / step
    return _checks_with(model, feeds, i, _tol=widened)


def _sessions_at(level: str):
    """A session factory for adcheck at one ORT graph optimization level."""
    import onnxruntime as ort

    def make(m):
        o = ort.SessionOptions()
        o.intra_op_num_threads = o.inter_op_num_threads = 1
        o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        return ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
    return make


def _agrees_without_ort_fusions(model, feeds, i) -> bool:
    """ONNX Runtime 1.32's ORT_ENABLE_ALL fusions miscompute some primal models
    (e.g. MatMul(Transpose(Sigmoid(x)), vector) beside a Slice of the Sigmoid):
    the finite differences are then wrong, not the derivative."""
    return _checks_with(model, feeds, i, session=_sessions_at("ORT_ENABLE_BASIC"))


def _agrees_unoptimized(model, feeds, i) -> bool:
    """ONNX Runtime 1.32's optimizers reject some valid models at session
    creation (before opset 14, its Reshape fusion turns a Shape read beside a
    0 extent into -1 and refuses the product of 0): all checks pass with
    them off."""
    return _checks_with(model, feeds, i, session=_sessions_at("ORT_DISABLE_ALL"))


def _primal_overflows(model, feeds, i) -> bool:
    """The primal's own intermediate values (the graph's, a Scan's or Loop's
    stacks included) overflow to inf or NaN at these feeds although its
    outputs are finite: an inf the outputs do not read (a MaxPool window
    skipping it) still meets its zero cotangent in the chain rule, 0 x inf =
    NaN in reverse mode, while forward mode and the differences skip it
    (seed 101 case 243: an iterated Pow in a Loop in a Scan). Neither can
    judge the other there."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    try:
        typed = onnx.shape_inference.infer_shapes(m)
    except Exception:  # noqa: BLE001 - nothing to expose
        return False
    floats = {v.name: v.type.tensor_type.elem_type for v in typed.graph.value_info
              if v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)}
    outputs = {o.name for o in m.graph.output}
    for n in m.graph.node:
        for o in n.output:
            if o in floats and o not in outputs:
                m.graph.output.append(helper.make_tensor_value_info(o, floats[o], None))
    try:
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        values = s.run(None, feeds)
    except Exception:  # noqa: BLE001
        return False
    return any(np.issubdtype(np.asarray(v).dtype, np.floating) and not np.all(np.isfinite(v))
               for v in values)


_REJUDGES = [
    (_primal_overflows, "ok-noref",
     "the primal overflows to inf/NaN inside (its outputs finite): 0 x inf in the chain rule"),
    (_agrees_in_float64, "ok-fd64",
     "agrees with float64 finite differences; float32 ones (step 1e-2) did not"),
    (_agrees_at_smaller_step, "ok-fd-step",
     "agrees with finite differences at a smaller step (float32 1e-3, float64 1e-8)"),
    (_agrees_within_roundoff, "ok-fd-roundoff",
     "agrees with finite differences within their rounding error (4 eps max|y| / step)"),
    (_agrees_without_ort_fusions, "ok-ort-bug",
     "agrees with ORT graph optimizations at BASIC; ORT_ENABLE_ALL computes the primal "
     "model wrongly"),
]


def _declared_feeds(m, feeds):
    """Feeds that fit the declared graph inputs (element type and shape):
    the generator's where they fit, else new ones (a mutated input rank or
    type may leave a valid model that the generator's feeds do not fit).
    None when an input has no fixed shape or an element type numpy lacks."""
    import numpy as np
    from onnx import helper
    rng = np.random.default_rng(0)
    out = {}
    for v in m.graph.input:
        t = v.type.tensor_type
        if not v.type.HasField("tensor_type") or not t.HasField("shape") or \
                any(not d.HasField("dim_value") for d in t.shape.dim):
            return None
        shape = [d.dim_value for d in t.shape.dim]
        if any(d > 2**20 for d in shape) or np.prod(shape, dtype=float) > 2**22:
            return None
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        except Exception:  # noqa: BLE001 - undefined / unknown element types
            return None
        old = feeds.get(v.name)
        if old is not None and list(old.shape) == shape and old.dtype == dtype:
            out[v.name] = old
        elif dtype.kind == "f":
            out[v.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "O":
            out[v.name] = np.full(shape, "a", dtype=object)
        else:
            out[v.name] = np.zeros(shape, dtype)
    return out


def _sorted_copy(m):
    """The model with its graphs topologically sorted, as the importer sorts
    them (ONNX's checker insists on the order; ORT and we do not)."""
    from onnx_ad_mlir.import_prep import sorted_copy
    return sorted_copy(m)


def _validity(data: bytes, feeds):
    """("invalid", why) when the onnx checker (full_check) rejects the model;
    ("ort-fails", why) when it passes but ORT cannot load or run it with
    feeds fitting its declared inputs (or its outputs' shapes differ from
    the declared ones); ("valid", feeds) otherwise."""
    import onnx
    from generate import validate, GeneratorRejected
    try:
        m = _sorted_copy(onnx.load_from_string(data))
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:  # noqa: BLE001 - any refusal by onnx
        return "invalid", f"{type(e).__name__}: {str(e).strip()[:300]}"
    fit = _declared_feeds(m, feeds)
    if fit is None:
        return "ort-fails", "no feeds fit the declared inputs"
    try:
        validate(m, fit)
    except GeneratorRejected as e:
        return "ort-fails", str(e)[:300]
    return "valid", fit


def _run_mutated(data: bytes, feeds, folder, i) -> dict:
    import onnx
    from adcheck import check_derivatives
    from onnx_ad_mlir import api
    path = os.path.join(folder, "in.onnx")
    with open(path, "wb") as f:
        f.write(data)
    before = _sha(path)
    try:
        (api.reverse if i % 2 else api.forward)(path)
        _stage("ort-primal")
        verdict, why = _validity(data, feeds)
        _stage(None)
        m = onnx.load_from_string(data)
        names = [v.name for v in list(m.graph.input) + list(m.graph.output)]
        if verdict == "valid" and len(set(names)) != len(names):
            # seeds get renamed: adcheck cannot feed them
            out = {"outcome": "ok-noref", "detail": "repeated graph input/output names"}
        elif verdict == "valid":
            from adcheck import FLOAT_TYPES
            if not any(v.type.tensor_type.elem_type in FLOAT_TYPES for v in m.graph.input):
                out = {"outcome": "ok-noref", "detail": "no float input left"}
            else:
                checked = _sorted_copy(m)
                try:
                    errs = check_derivatives(checked, why, seed=i)
                    out = {"outcome": "ok", "detail": json.dumps(errs)}
                except Exception as e:  # noqa: BLE001 - re-judged like a generated case
                    out = _judged(e, checked, why, i)
        elif verdict == "ort-fails":
            out = {"outcome": "accepted-ort-fails", "detail": "the onnx checker accepts "
                   "this model, ONNX Runtime cannot run it: " + why}
        else:
            out = {"outcome": "accepted-invalid", "detail": "the onnx checker rejects this "
                   "model: " + why}
    except Exception as e:  # noqa: BLE001
        outcome, detail = _classify_exception(e)
        out = {"outcome": outcome, "detail": detail}
    if _sha(path) != before:
        out = {"outcome": "io", "detail": "input file changed"}
    return out


def _run_mlir(model, seed, folder, rec) -> dict:
    import io
    import contextlib
    from mlir import ir
    from mutate import mutate_mlir
    from onnx_ad_mlir.importer import import_onnx
    from onnx_ad_mlir.tools import opt
    import onnx
    from onnx_ad_mlir.errors import OnnxAdError
    onnx.save(model, os.path.join(folder, "in.onnx"))
    try:  # the text to mutate is made by the importer, which may refuse the model
        with ir.Context() as ctx:
            text = import_onnx(model, context=ctx).operation.get_asm(enable_debug_info=True)
    except OnnxAdError as e:
        return {"outcome": "refused", "detail": f"import: {e}"[:300]}
    mkind, bad = mutate_mlir(text, seed)
    rec["kind"] = f"mlir:{mkind}"
    inp, out = os.path.join(folder, "in.mlir"), os.path.join(folder, "out.mlir")
    with open(inp, "w") as f:
        f.write(bad)
    before = _sha(inp)
    err = io.StringIO()
    mode = "--onnx-ad-reverse" if seed % 2 else "--onnx-ad-forward"
    try:
        with contextlib.redirect_stderr(err):
            rc = opt.main([inp, "--canonicalize", mode, "-o", out])
    except BaseException as e:  # noqa: BLE001 - nothing may escape the tool
        return {"outcome": "crash", "detail": f"onnx-ad-opt raised {type(e).__name__}: {e}"[:500]}
    res = {"outcome": "ok" if rc == 0 else "refused", "detail": err.getvalue().strip()[:300]}
    if rc != 0 and os.path.exists(out):
        res = {"outcome": "io", "detail": "onnx-ad-opt failed but wrote its output"}
    if rc not in (0, 1):
        res = {"outcome": "crash", "detail": f"onnx-ad-opt exit {rc}"}
    if _sha(inp) != before:
        res = {"outcome": "io", "detail": "input file changed"}
    return res


def _worker(conn, base: int, errlog: str | None) -> None:
    global _CONN
    _CONN = conn
    if errlog:  # keep ORT/MLIR chatter out of the parent's terminal
        fd = os.open(errlog, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 2)
    _setup_child()
    while True:
        try:
            i = conn.recv()
        except EOFError:
            return
        if i is None:
            return
        try:
            rec = run_case(i, base)
        except BaseException as e:  # noqa: BLE001 - the harness itself
            rec = {"i": i, "seed": case_seed(base, i), "kind": case_kind(i), "outcome": "crash",
                   "detail": "harness: " + "".join(traceback.format_exception(e))[-800:]}
        conn.send(rec)


# ---- in the parent -----------------------------------------------------------------------

class Worker:
    def __init__(self, base: int, errlog: str | None):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, base, errlog), daemon=True)
        self.proc.start()
        child.close()
        self.case = None
        self.stage = None
        self.started = 0.0

    def send(self, i: int) -> None:
        self.case, self.started, self.stage = i, time.monotonic(), None
        self.conn.send(i)

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def run_cases(cases, base: int = 0, jobs: int = 1, timeout: float = 60.0,
              log=None, errlog: str | None = None, progress: bool = False) -> list[dict]:
    """Runs the case numbers in `cases` on `jobs` worker processes; returns
    one record per case."""
    from multiprocessing.connection import wait
    todo = list(cases)[::-1]
    workers = [Worker(base, errlog) for _ in range(max(1, min(jobs, len(todo))))]
    results, busy = [], {}
    t0 = time.monotonic()

    def finish(rec):
        results.append(rec)
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if progress and len(results) % 100 == 0:
            counts = collections.Counter(r["outcome"] for r in results)
            print(f"[{len(results)} cases, {time.monotonic() - t0:.0f} s] {dict(counts)}",
                  flush=True)

    try:
        while todo or busy:
            for w in workers:
                if w not in busy.values() and todo:
                    i = todo.pop()
                    w.send(i)
                    busy[w.conn] = w
            ready = wait(list(busy), timeout=1.0)
            for conn in ready:
                w = busy.pop(conn)
                try:
                    rec = conn.recv()
                    if "stage" in rec:  # still working on the case
                        w.stage = rec["stage"]
                        busy[conn] = w
                        continue
                    finish(rec)
                except (EOFError, OSError):
                    w.proc.join(5)
                    code = w.proc.exitcode
                    primal = w.stage == "ort-primal"
                    finish({"i": w.case, "seed": case_seed(base, w.case),
                            "kind": case_kind(w.case),
                            "outcome": "ort-primal-crash" if primal else "crash",
                            "detail": ("ONNX Runtime/onnx checker died on the input model "
                                       "(our import and differentiation had finished): "
                                       if primal else "") + f"worker died: exit code {code}"
                                      + (f" (signal {-code})" if code and code < 0 else "")})
                    workers[workers.index(w)] = Worker(base, errlog)
            now = time.monotonic()
            for conn, w in list(busy.items()):
                if now - w.started > timeout:
                    busy.pop(conn)
                    w.proc.kill()
                    w.proc.join()
                    primal = w.stage == "ort-primal"
                    finish({"i": w.case, "seed": case_seed(base, w.case),
                            "kind": case_kind(w.case),
                            "outcome": "ort-primal-hang" if primal else "hang",
                            "detail": ("ONNX Runtime/onnx checker ran the input model "
                                       "(our import and differentiation had finished): "
                                       if primal else "") + f"no answer in {timeout:.0f} s"})
                    workers[workers.index(w)] = Worker(base, errlog)
    finally:
        for w in workers:
            w.stop()
    return sorted(results, key=lambda r: r["i"])


def summary(results: list[dict]) -> str:
    by = collections.Counter(r["outcome"] for r in results)
    lines = [f"{len(results)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))]
    kinds = collections.defaultdict(collections.Counter)
    for r in results:
        kinds[r["kind"].split(":")[0]][r["outcome"]] += 1
    for k, c in sorted(kinds.items()):
        lines.append(f"  {k:5s} " + ", ".join(f"{o} {n}" for o, n in sorted(c.items())))
    bugs = [r for r in results if r["outcome"] in BUGS]
    for r in bugs[:50]:
        lines.append(f"  BUG case {r['i']} seed {r['seed']} {r['kind']} {r['outcome']}: "
                     f"ops {r.get('ops')}: {r.get('detail', '')[:300]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200, help="number of cases")
    ap.add_argument("--start", type=int, default=0, help="first case number")
    ap.add_argument("--seed", type=int, default=0, help="base seed")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--log", help="JSON lines, one record per case")
    ap.add_argument("--errlog", default=os.devnull, help="workers' stderr")
    ap.add_argument("--case", type=int, help="run one case in this process and print it")
    ap.add_argument("--rerun", help="a --log file: run again its cases with bug outcomes")
    args = ap.parse_args(argv)
    if args.case is not None:
        print(json.dumps(run_case(args.case, args.seed), indent=1))
        return 0
    log = open(args.log, "a") if args.log else None
    cases = range(args.start, args.start + args.n)
    if args.rerun:
        with open(args.rerun) as f:
            cases = sorted({r["i"] for r in map(json.loads, f) if r["outcome"] in BUGS})
    results = run_cases(cases, args.seed, args.jobs,
                        args.timeout, log, args.errlog, progress=True)
    print(summary(results))
    return 1 if any(r["outcome"] in BUGS for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
