"""A small seeded sample of the fuzz run (test/fuzz/run.py, issue 7): 60
cases (30 generated valid models, some with run-time extents, 24 mutated
models, 6 garbage MLIR texts)
in a child worker process, through import -> forward/reverse -> export ->
ONNX Runtime and the CLI. No case may crash, hang, give a wrong derivative,
hit a RuleError, change its input file or leave a partial output."""
from __future__ import annotations

import os
import sys

FUZZ = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz")
sys.path.insert(0, FUZZ)

import run as fuzz  # noqa: E402

BASE_SEED = 7
CASES = range(60)


def test_fuzz_sample():
    results = fuzz.run_cases(CASES, base=BASE_SEED, jobs=1, timeout=60)
    assert len(results) == len(CASES)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)
    refused = [r for r in results if r["outcome"] == "refused" and not r["kind"].startswith("gen")]
    assert refused, "the mutated cases should mostly be refused"
    ok = [r for r in results if r["kind"].startswith("gen") and r["outcome"] == "ok"]
    assert len(ok) >= 20, fuzz.summary(results)


def test_fuzz_sample_with_sequences():
    """20 generated models from a base seed whose models hold sequence
    idioms (lists appended by Loops and read back inside them,
    SplitToSequence, SequenceConstruct)."""
    cases = [i for i in range(40) if fuzz.case_kind(i) == "gen"]
    results = fuzz.run_cases(cases, base=fuzz.WINDOW_SEEDS, jobs=1, timeout=60)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)
    with_sequences = [r for r in results if r["outcome"] == "ok" and
                      any("Sequence" in op for op in r.get("ops", []))]
    assert len(with_sequences) >= 3, fuzz.summary(results)


def test_fuzz_sample_with_the_wider_op_set():
    """20 generated models from a base seed whose models also draw on the
    generator's wider op set (indexing, RNN/GRU/LSTM, global and Lp pools,
    the remaining activations)."""
    cases = [i for i in range(40) if fuzz.case_kind(i) == "gen"]
    results = fuzz.run_cases(cases, base=fuzz.WIDE_SEEDS, jobs=1, timeout=60)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)
    wide = {"GatherElements", "GatherND", "ScatterElements", "ScatterND", "TopK", "Trilu",
            "ReverseSequence", "Compress", "CumProd", "RNN", "GRU", "LSTM", "PRelu", "Mean",
            "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool", "LpNormalization",
            "MeanVarianceNormalization", "ReduceProd", "ReduceL1", "ReduceLogSum", "Shrink",
            "Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh", "Sinh", "Cosh", "Tan",
            "Softsign", "Selu", "HardSigmoid", "Celu", "HardSwish", "Mish", "Gelu"}
    checked = [r for r in results if r["outcome"] == "ok" and wide & set(r.get("ops", []))]
    assert len(checked) >= 5, fuzz.summary(results)


def test_fuzz_sample_reading_values_piece_by_piece():
    """40 generated models from a base seed whose models also read values
    piece by piece (Slices, Gathers of a scalar or of consecutive indices)
    and concatenate them back: reverse mode's sums of placements."""
    cases = [i for i in range(80) if fuzz.case_kind(i) == "gen"]
    results = fuzz.run_cases(cases, base=fuzz.PIECES_SEEDS, jobs=1, timeout=60)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)
    read = [r for r in results if r["outcome"] == "ok" and "Concat" in r.get("ops", [])
            and {"Slice", "Gather"} & set(r.get("ops", []))]
    assert len(read) >= 3, fuzz.summary(results)


def test_fuzz_sample_reading_values_by_strided_slices():
    """40 generated models from a base seed whose models also read values by
    strided Slices (x[j::step], a patch merge's quarters) and concatenate
    them back: the pieces' grid placements joined under one Reshape."""
    from generate import generate
    cases = [i for i in range(80) if fuzz.case_kind(i) == "gen"]
    results = fuzz.run_cases(cases, base=fuzz.STRIDED_SEEDS, jobs=1, timeout=60)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)

    def strided(seed: int) -> bool:
        model, _ = generate(seed, sequences=fuzz.sequence_level(fuzz.STRIDED_SEEDS),
                            wide=fuzz.wide_level(fuzz.STRIDED_SEEDS))
        return any(n.op_type == "Slice" and len(n.input) == 5 for n in model.graph.node)
    read = [r for r in results if r["outcome"] == "ok" and strided(r["seed"])]
    assert len(read) >= 3, fuzz.summary(results)


def test_fuzz_sample_at_old_opsets():
    """50 generated models from a base seed whose models are built at
    opsets 7-28: the forms of each op the older opsets have, and the ops the
    rules emit written with those opsets' ops."""
    cases = [i for i in range(100) if fuzz.case_kind(i) == "gen"]
    results = fuzz.run_cases(cases, base=fuzz.OLD_OPSET_SEEDS, jobs=1, timeout=60)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)
    old = [r for r in results if r["outcome"] == "ok" and r["opset"] < 13]
    assert len(old) >= 4, fuzz.summary(results)


def test_fuzz_sample_with_rarer_ops():
    """40 generated models from a base seed whose models also hold Det,
    CenterCropPad, DFT, AffineGrid, Col2Im, RoiAlign, MaxUnpool and
    GridSample."""
    rare = {"Det", "CenterCropPad", "DFT", "AffineGrid", "Col2Im", "RoiAlign", "MaxUnpool",
            "GridSample"}
    cases = [i for i in range(80) if fuzz.case_kind(i) == "gen"]
    results = fuzz.run_cases(cases, base=fuzz.RARE_SEEDS, jobs=1, timeout=60)
    bugs = [r for r in results if r["outcome"] in fuzz.BUGS]
    assert not bugs, fuzz.summary(results)
    held = [r for r in results if r["outcome"] == "ok" and rare & set(r.get("ops", []))]
    assert len(held) >= 3, fuzz.summary(results)
