"""The onnx dialect from Python: parsing, verification, registration, the
generated op classes, and drift against onnx.defs."""
from __future__ import annotations

import ctypes
import importlib.util
import re
from pathlib import Path

import onnx
import pytest
from mlir import ir
from mlir._mlir_libs import _mlir

import onnx_ad_mlir
from onnx_ad_mlir import _op_table
from onnx_ad_mlir.dialects import onnx as onnx_d

ROOT = Path(__file__).resolve().parents[2]

ADD = """
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "onnx.Add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}"""

IF = """
func.func @f(%c: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "onnx.If"(%c) ({
    %r = "onnx.Relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    "onnx.Yield"(%r) : (tensor<2xf32>) -> ()
  }, {
    "onnx.Yield"(%x) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"""


def ops_of(module: ir.Module) -> list[ir.Operation]:
    func = module.body.operations[0]
    return [op.operation for op in func.regions[0].blocks[0].operations]


def test_parse_and_verify_add(ctx: ir.Context) -> None:
    module = ir.Module.parse(ADD)
    assert module.operation.verify()
    add = ops_of(module)[0]
    assert add.name == "onnx.Add"
    assert [str(v.type) for v in add.operands] == ["tensor<2x3xf32>", "tensor<3xf32>"]
    assert str(add.results[0].type) == "tensor<2x3xf32>"


def test_parse_and_verify_if_regions(ctx: ir.Context) -> None:
    module = ir.Module.parse(IF)
    assert module.operation.verify()
    if_op = ops_of(module)[0]
    assert if_op.name == "onnx.If" and len(if_op.regions) == 2
    then_ops = [op.name for op in if_op.regions[0].blocks[0].operations]
    else_ops = [op.name for op in if_op.regions[1].blocks[0].operations]
    assert then_ops == ["onnx.Relu", "onnx.Yield"]  # region 0 is then_branch
    assert else_ops == ["onnx.Yield"]


@pytest.mark.parametrize("body, message", [
    ('%0 = "onnx.Add"(%a) : (tensor<2xf32>) -> tensor<2xf32>',
     "'onnx.Add' op expected 2 operands, but found 1"),
    ('"onnx.Yield"(%a) : (tensor<2xf32>) -> ()',
     "'onnx.Yield' op expects parent op to be one of"),
])
def test_verifier_errors_are_exceptions(ctx: ir.Context, body: str, message: str) -> None:
    text = f"func.func @f(%a: tensor<2xf32>) {{\n  {body}\n  return\n}}"
    with pytest.raises(ir.MLIRError) as info:
        ir.Module.parse(text)
    assert any(message in d.message for d in info.value.error_diagnostics)
    # The process and the context survive: the next parse works.
    assert ir.Module.parse(ADD).operation.verify()


def test_garbage_is_a_parse_error(ctx: ir.Context) -> None:
    for garbage in ["\x01\x02onnx", '"onnx.Add"(', "func.func @f( {{{"]:
        with pytest.raises(ir.MLIRError):
            ir.Module.parse(garbage)


def _bare_context() -> ir.Context:
    """A context made through the C API: unlike `ir.Context()`, it does not
    get the bindings' global registry, so it starts without the onnx dialect."""
    capi = ctypes.CDLL(str(Path(_mlir.__file__).parent / "libMLIRPythonCAPI.so"))
    capi.mlirContextCreate.restype = ctypes.c_void_p
    raw = capi.mlirContextCreate()
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return ir.Context._CAPICreate(new_capsule(raw, b"mlir.ir.Context._CAPIPtr", None))


ONNX_ONLY = '"onnx.Relu"() : () -> tensor<f32>'  # no func: the bare context has no func


def test_register_dialect_into_context() -> None:
    ctx = _bare_context()
    with pytest.raises(ir.MLIRError, match="unregistered"):
        ir.Module.parse(ONNX_ONLY, ctx)
    onnx_ad_mlir.register_dialect(ctx)
    assert ctx.is_registered_operation("onnx.Add")  # loaded, not only registered
    with pytest.raises(ir.MLIRError, match="requires a single operand"):
        ir.Module.parse(ONNX_ONLY, ctx)  # now verified as an onnx op


def test_register_dialect_into_registry() -> None:
    registry = ir.DialectRegistry()
    onnx_ad_mlir.register_dialect(registry)
    ctx = _bare_context()
    with pytest.raises(ir.MLIRError, match="unregistered"):
        ir.Module.parse(ONNX_ONLY, ctx)
    ctx.append_dialect_registry(registry)
    with pytest.raises(ir.MLIRError, match="requires a single operand"):
        ir.Module.parse(ONNX_ONLY, ctx)


def test_register_dialect_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        onnx_ad_mlir.register_dialect("onnx")  # type: ignore[arg-type]


def test_every_new_context_has_the_dialect() -> None:
    assert ir.Context().is_registered_operation("onnx.Conv")


def test_generated_op_classes(ctx: ir.Context) -> None:
    module = ir.Module.parse(ADD)
    add = ops_of(module)[0]
    assert type(add.opview) is onnx_d.ONNXAddOp
    assert add.opview.A == add.operands[0]
    # Build ops with the generated builders, then verify the result.
    f32 = ir.F32Type.get()
    t = ir.RankedTensorType.get([2], f32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        x = onnx_d.Constant(t, value=ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(f32, 2.0)))
        y = onnx_d.Add(t, x, x)
        onnx_d.Concat(ir.RankedTensorType.get([4], f32), [x, y],
                      axis=ir.IntegerAttr.get(ir.IntegerType.get_signed(64), 0))
    assert module.operation.verify()
    names = [op.operation.name for op in module.body.operations]
    assert names == ["onnx.Constant", "onnx.Add", "onnx.Concat"]
    assert type(module.body.operations[2]) is onnx_d.ONNXConcatOp
    assert module.body.operations[2].axis.value == 0


# ---- drift against onnx.defs -------------------------------------------------

def test_every_opset28_op_exists() -> None:
    ctx = ir.Context()
    latest = [s for s in onnx.defs.get_all_schemas() if s.domain == ""]
    assert onnx.defs.onnx_opset_version() == _op_table.MAX_OPSET == 28
    assert len(latest) >= 200
    missing = [s.name for s in latest if not ctx.is_registered_operation(f"onnx.{s.name}")]
    assert missing == []
    for s in latest:  # the newest version keeps the plain name
        assert _op_table.VERSIONS[s.name][-1][1] == s.name
        assert s.since_version in _op_table.OPS[s.name]["since_versions"]


def test_every_table_op_is_registered_and_in_the_ods() -> None:
    ctx = ir.Context()
    td = (ROOT / "dialect/include/onnx_ad/ONNXOps.td").read_text()
    ods_names = set(re.findall(r'^def ONNX\w+Op : ONNX_Op<"(\w+)"', td, re.M))
    assert ods_names == set(_op_table.OPS)
    for name in list(_op_table.OPS) + ["NoValue", "Yield"]:
        assert ctx.is_registered_operation(f"onnx.{name}"), name


@pytest.mark.parametrize("opset", range(_op_table.MIN_OPSET, _op_table.MAX_OPSET + 1))
def test_versions_cover_every_opset(opset: int) -> None:
    """The op chosen for a model at `opset` is the schema ONNX uses there."""
    for op_type, versions in _op_table.VERSIONS.items():
        try:
            schema = onnx.defs.get_schema(op_type, opset, "")
        except onnx.defs.SchemaError:
            continue  # introduced after this opset
        chosen = [name for since, name in versions if since <= opset]
        if schema.deprecated:
            continue
        assert chosen, f"{op_type} at opset {opset}: no op"
        assert schema.since_version in _op_table.OPS[chosen[-1]]["since_versions"], \
            f"{op_type} at opset {opset} -> {chosen[-1]}"


def test_generated_files_are_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen_onnx_ods", ROOT / "dialect/gen_onnx_ods.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    td_text, py_text = gen.generate()
    assert td_text == (ROOT / "dialect/include/onnx_ad/ONNXOps.td").read_text(), \
        "ONNXOps.td is stale: run python dialect/gen_onnx_ods.py"
    assert py_text == (ROOT / "python/onnx_ad_mlir/_op_table.py").read_text(), \
        "_op_table.py is stale: run python dialect/gen_onnx_ods.py"
