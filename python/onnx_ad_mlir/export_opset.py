"""The opset and IR version an exported model declares.

Transformations add ops of the newest versions (plain names) even to models
imported at an old opset, so the default-domain opset is raised to the
highest first version any present op needs, provided every present op is
still the same schema group at that opset.
"""
from __future__ import annotations

from onnx import helper

from . import _op_table
from .errors import ExportFailure


def _valid_ranges() -> dict[str, tuple[int, int]]:
    """MLIR op name -> (first, last) opset at which it is the op in effect."""
    ranges = {}
    for versions in _op_table.VERSIONS.values():
        for i, (since, name) in enumerate(versions):
            last = versions[i + 1][0] - 1 if i + 1 < len(versions) else _op_table.MAX_OPSET
            ranges[name] = (since, last)
    return ranges


_RANGES = _valid_ranges()


def model_versions(ir_version: int | None, stored: dict[str, int], op_names: set[str]
                   ) -> tuple[int, dict[str, int]]:
    """(ir_version, {domain: version}) for a model using the MLIR ops
    `op_names` (names without 'onnx.'), imported with `stored` opsets."""
    opsets = dict(stored)
    default = opsets.pop("ai.onnx", None)
    default = opsets.get("", default)
    ranges = {name: _RANGES[name] for name in op_names if name in _RANGES}
    if ranges:
        lowest = max(first for first, _ in ranges.values())
        highest = min(last for _, last in ranges.values())
        target = max(default or lowest, lowest)
        if target > highest:
            newest = max(ranges, key=lambda n: ranges[n][0])
            oldest = min(ranges, key=lambda n: ranges[n][1])
            raise ExportFailure(
                f"no single opset fits every op: onnx.{newest} needs opset >= "
                f"{ranges[newest][0]} but onnx.{oldest} is only valid up to opset "
                f"{ranges[oldest][1]}" + (f" (model opset {default})" if default else ""))
    else:
        target = default or _op_table.MAX_OPSET
    opsets[""] = target
    if ir_version is not None and target == default:
        # The source's own pairing (e.g. an IR 3 model at opset 9, whose
        # initializers are all graph inputs): kept, since at IR >= 4 ONNX
        # Runtime treats initializers listed as inputs as overridable, so it
        # neither folds them nor prepacks Conv weights (light zoo 2-3x slower).
        return ir_version, opsets
    needed_ir = _min_ir_version(target)
    return max(ir_version or needed_ir, needed_ir), opsets


def _min_ir_version(opset: int) -> int:
    """The oldest IR version whose release supports this default opset."""
    for _release, ir_version, ai_onnx, *_ in helper.VERSION_TABLE:
        if ai_onnx >= opset:
            return ir_version
    return helper.VERSION_TABLE[-1][1]
