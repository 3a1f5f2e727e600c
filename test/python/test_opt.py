"""The pass registry, pipeline building, and the onnx-ad-opt tool, with
test-only passes registered for the duration of each test."""
from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from mlir import ir
from mlir.passmanager import PassManager

from onnx_ad_mlir import passes
from onnx_ad_mlir.errors import OnnxAdError
from onnx_ad_mlir.tools import opt

DUPLICATES = """
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "onnx.Exp"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %1 = "onnx.Exp"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %2 = "onnx.Add"(%0, %1) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %2 : tensor<2xf32>
}
"""


class TagFailure(OnnxAdError):
    pass


@pytest.fixture
def test_passes() -> Iterator[list[tuple[str, dict[str, str]]]]:
    """Registers `test-tag` (records its options, tags the module, counts
    onnx ops) and `test-fail`; unregisters them afterwards."""
    calls: list[tuple[str, dict[str, str]]] = []

    @passes.register_pass("test-tag", "Tag the module with the number of onnx ops")
    def tag(module: ir.Operation, options: dict[str, str]) -> None:
        count = 0

        def visit(op: ir.Operation) -> ir.WalkResult:
            nonlocal count
            count += op.name.startswith("onnx.")
            return ir.WalkResult.ADVANCE
        module.walk(visit)
        calls.append((module.name, options))
        module.attributes["test.onnx_ops"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), count)

    @passes.register_pass("test-fail", "Always fails")
    def fail(module: ir.Operation, options: dict[str, str]) -> None:
        raise TagFailure(f"test-fail: {options.get('why', 'no reason')}")

    yield calls
    del passes._PASSES["test-tag"], passes._PASSES["test-fail"]


def run_pipeline(text: str, ir_text: str = DUPLICATES) -> ir.Module:
    with ir.Context():
        module = ir.Module.parse(ir_text)
        pm = PassManager("builtin.module")
        passes.build_pipeline(pm, text)
        pm.run(module.operation)
    return module


# ---- registry and pipelines --------------------------------------------------

def test_parse_options() -> None:
    assert passes.parse_options("") == {}
    assert passes.parse_options("{inputs=x,y mode=rev flag}") == \
        {"inputs": "x,y", "mode": "rev", "flag": "true"}
    assert passes.parse_options("{name='a b' other={1,2}}") == {"name": "a b", "other": "{1,2}"}
    with pytest.raises(passes.PipelineError):
        passes.parse_options("inputs=x")


def test_mixed_pipeline_runs_in_order(test_passes: list) -> None:
    module = run_pipeline("builtin.module(test-tag{k=1},func.func(cse),test-tag{k=2,3},canonicalize)")
    # First run saw 3 onnx ops, the second (after cse) 2.
    assert [opts for _, opts in test_passes] == [{"k": "1"}, {"k": "2,3"}]
    assert [name for name, _ in test_passes] == ["builtin.module", "builtin.module"]
    assert int(module.operation.attributes["test.onnx_ops"]) == 2
    assert str(module).count('"onnx.Exp"') == 1


def test_bare_pipeline_without_anchor(test_passes: list) -> None:
    module = run_pipeline("cse,test-tag")
    assert int(module.operation.attributes["test.onnx_ops"]) == 2


def test_our_pass_nested_in_func_is_refused(test_passes: list) -> None:
    with pytest.raises(passes.PipelineError, match="runs on builtin.module only"):
        run_pipeline("builtin.module(func.func(cse,test-tag))")


@pytest.mark.parametrize("bad", ["builtin.module(no-such-pass)", "builtin.module(cse",
                                 "func.func(cse))"])
def test_bad_pipelines_are_pipeline_errors(bad: str) -> None:
    with pytest.raises(passes.PipelineError):
        run_pipeline(bad)


def test_pass_failure_propagates(test_passes: list) -> None:
    with pytest.raises(TagFailure, match="test-fail: because"):
        run_pipeline("builtin.module(test-fail{why=because})")


def test_duplicate_registration_is_refused(test_passes: list) -> None:
    with pytest.raises(ValueError, match="already registered"):
        passes.register_pass("test-tag", "again")(lambda m, o: None)


# ---- onnx-ad-opt -------------------------------------------------------------

def run_opt(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = opt.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def dup_file(tmp_path: Path) -> Path:
    path = tmp_path / "in.mlir"
    path.write_text(DUPLICATES)
    return path


def test_opt_pass_flags_in_order(capsys, test_passes, dup_file: Path) -> None:
    code, out, err = run_opt(capsys, str(dup_file), "--test-tag=k=1 j=a,b", "-cse",
                             "--test-tag")
    assert code == 0, err
    assert [opts for _, opts in test_passes] == [{"k": "1", "j": "a,b"}, {}]
    assert out.count('"onnx.Exp"') == 1 and "test.onnx_ops = 2" in out


def test_opt_pass_pipeline_and_output_file(capsys, test_passes, dup_file: Path,
                                           tmp_path: Path) -> None:
    before = dup_file.read_text()
    out_path = tmp_path / "out.mlir"
    code, out, err = run_opt(capsys, str(dup_file), "-o", str(out_path),
                             "--pass-pipeline=builtin.module(func.func(cse),test-tag)")
    assert (code, out, err) == (0, "", "")
    assert "test.onnx_ops = 2" in out_path.read_text()
    assert dup_file.read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_opt_refuses_to_overwrite_input(capsys, dup_file: Path) -> None:
    before = dup_file.read_text()
    code, _, err = run_opt(capsys, str(dup_file), "-o", str(dup_file), "--cse")
    assert code == 1 and "refusing to overwrite the input" in err
    assert dup_file.read_text() == before


def test_opt_failing_pass_is_one_line(capsys, test_passes, dup_file: Path) -> None:
    code, out, err = run_opt(capsys, str(dup_file), "--test-fail=why=nope")
    assert code == 1
    assert err == "error: test-fail: nope\n"


def test_opt_debug_shows_traceback(capsys, test_passes, dup_file: Path) -> None:
    code, _, err = run_opt(capsys, str(dup_file), "--test-fail", "--debug")
    assert code == 1 and "Traceback" in err and err.endswith("error: test-fail: no reason\n")


def test_opt_flags_and_pipeline_conflict(capsys, dup_file: Path) -> None:
    code, _, err = run_opt(capsys, str(dup_file), "--cse", "--pass-pipeline=builtin.module(cse)")
    assert code == 1 and err.startswith("error: --pass-pipeline cannot be combined")


@pytest.mark.parametrize("data, message", [
    (b"\xff\xfe\x00garbage", "not UTF-8 text"),
    (b"abc\x00def", "contains NUL bytes"),
    (b'"onnx.Add"(%a', "error: "),
    (b"func.func @f( {{{", "error: expected"),
])
def test_opt_garbage_input(capsys, tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.mlir"
    path.write_bytes(data)
    code, out, err = run_opt(capsys, str(path))
    assert code == 1 and out == ""
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_opt_missing_file(capsys, tmp_path: Path) -> None:
    code, _, err = run_opt(capsys, str(tmp_path / "nope.mlir"))
    assert code == 1 and err == f"error: cannot read {tmp_path / 'nope.mlir'}: No such file or directory\n"


def test_opt_split_input_file_errors_per_chunk(capsys, tmp_path: Path) -> None:
    path = tmp_path / "split.mlir"
    path.write_text(DUPLICATES + "// -----\nfunc.func @g() {\n  \"onnx.Yield\"() : () -> ()\n"
                    "  return\n}\n// -----\n" + DUPLICATES.replace("@f", "@h"))
    code, out, err = run_opt(capsys, str(path), "-split-input-file", "--cse")
    assert code == 1
    # The bad chunk reports its line in the whole file; the others are printed.
    assert err.startswith(f"{path}:10:3: error: 'onnx.Yield' op expects parent op")
    assert "@f" in out and "@h" in out and "@g" not in out
    assert out.count("// -----") == 1 and out.count('"onnx.Exp"') == 2


def test_opt_verify_diagnostics(capsys, tmp_path: Path) -> None:
    good = tmp_path / "good.mlir"
    good.write_text('func.func @g() {\n  // expected-error @below {{expects parent op}}\n'
                    '  "onnx.Yield"() : () -> ()\n  return\n}\n')
    assert run_opt(capsys, str(good), "--verify-diagnostics")[0] == 0
    wrong = tmp_path / "wrong.mlir"
    wrong.write_text('func.func @g() {\n  // expected-error @+2 {{expects parent op}}\n'
                     '  "onnx.Yield"() : () -> ()\n  return\n}\n')
    code, _, err = run_opt(capsys, str(wrong), "--verify-diagnostics")
    assert code == 1
    assert "3:3: error: unexpected error: 'onnx.Yield' op expects parent op" in err
    assert "2: error: expected error \"expects parent op\" was not produced" in err


def test_opt_allow_unregistered_dialect(capsys, tmp_path: Path) -> None:
    path = tmp_path / "u.mlir"
    path.write_text('"foo.bar"() : () -> ()\n')
    assert run_opt(capsys, str(path))[0] == 1
    code, out, _ = run_opt(capsys, str(path), "--allow-unregistered-dialect")
    assert code == 0 and '"foo.bar"() : () -> ()' in out


def test_opt_print_ir_after_all(capfd, dup_file: Path) -> None:
    # IR printing is written by MLIR's C++ straight to file descriptor 2.
    assert opt.main([str(dup_file), "--cse", "--mlir-print-ir-after-all"]) == 0
    _, err = capfd.readouterr()
    assert "IR Dump After CSE" in err


def test_opt_stdin_and_help(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(DUPLICATES.encode())))
    code, out, _ = run_opt(capsys, "-", "--cse")
    assert code == 0 and out.count('"onnx.Exp"') == 1
    with pytest.raises(SystemExit) as info:
        opt.main(["--help"])
    assert info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ["--canonicalize", "--cse", "--symbol-dce", "--inline", "--pass-pipeline",
                 "--split-input-file", "--verify-diagnostics"]:
        assert flag in help_text


def test_opt_upstream_flags_are_real_passes() -> None:
    with ir.Context():
        pm = PassManager("builtin.module")
        for name in opt.UPSTREAM_PASSES:
            passes.build_pipeline(pm, f"builtin.module({name})")


@pytest.mark.parametrize("tail", ['{ w: "0x0800', '{ w: "0x08\n  } }\n#-}\n', "{ w: ",
                                  '{ w: "0x0800000", v: @'])
@pytest.mark.parametrize("tool", ["onnx_ad_mlir.tools.opt", "onnx_ad_mlir.tools.translate"])
def test_truncated_resource_is_an_error_not_an_abort(tmp_path: Path, tool: str, tail: str) -> None:
    """MLIR's parser aborts the process (an assertion) on a resource entry
    without a complete value, as in a truncated file (fuzz seed 124 case
    1209): both tools answer with one error line naming the place."""
    path = tmp_path / "cut.mlir"
    path.write_text("module {\n}\n{-# dialect_resources: { builtin: " + tail)
    args = [str(path), "--cse"] if tool.endswith("opt") else ["--export-onnx", str(path),
                                                             "-o", str(tmp_path / "out.onnx")]
    proc = subprocess.run([sys.executable, "-m", tool, *args], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert f"{path}:3:" in proc.stderr
    assert "has no complete value" in proc.stderr or "ends before '#-}'" in proc.stderr


def test_two_forward_passes_in_one_pipeline(tmp_path: Path) -> None:
    """--onnx-ad-forward twice on a LayerNormalization: the second pass's
    folds reuse the unit-scale LayerNormalization the first one built and
    moved it above its use without its bias's NoValue ('operand #2 does not
    dominate this use'; found by running pass pipelines over generated
    models). The exported second-order model matches the API's."""
    import numpy as np
    import onnx
    from onnx import helper as h, numpy_helper
    from adcheck import run
    from onnx_ad_mlir.api import forward
    w = numpy_helper.from_array(np.array([-1.7, -0.1, 1.2, -0.6], np.float32), "w")
    m = h.make_model(h.make_graph(
        [h.make_node("LayerNormalization", ["x", "w"], ["y"], axis=-1, epsilon=1e-3)], "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 4])], [w]),
        opset_imports=[h.make_opsetid("", 18)])
    onnx.save(m, tmp_path / "m.onnx")

    def tool(name: str, *args: str) -> None:
        p = subprocess.run([sys.executable, "-m", f"onnx_ad_mlir.tools.{name}", *args],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr

    tool("translate", "--import-onnx", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.mlir"))
    tool("opt", str(tmp_path / "m.mlir"), "--onnx-ad-forward", "--onnx-ad-forward",
         "-o", str(tmp_path / "ff.mlir"))
    tool("translate", "--export-onnx", str(tmp_path / "ff.mlir"), "-o", str(tmp_path / "ff.onnx"))
    got = onnx.load(tmp_path / "ff.onnx")
    onnx.checker.check_model(got, full_check=True)
    rng = np.random.default_rng(7)
    feeds = {name: rng.standard_normal((2, 4)).astype(np.float32)
             for name in ("x", "fwd_x", "fwd2_x", "fwd2_fwd_x")}
    want = run(forward(forward(m)), feeds)
    for name, value in run(got, feeds).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6)


def test_opt_as_module_subprocess(dup_file: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "onnx_ad_mlir.tools.opt", str(dup_file), "--cse"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count('"onnx.Exp"') == 1
