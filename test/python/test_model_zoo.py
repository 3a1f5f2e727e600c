"""The model-zoo architectures shipped in the onnx wheel (opset 9, weights
generated in the graph) and the repository's torch.onnx.export fixtures
(legacy and dynamo=True) round-trip with the same ONNX Runtime outputs."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest

from roundtrip_helpers import assert_same_outputs, round_trip, run, session

_LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = sorted(glob.glob(os.path.join(_LIGHT, "*.onnx")))
_TORCH = os.path.join(os.path.dirname(__file__), "..", "fixtures", "torch")
TORCH_MODELS = sorted(glob.glob(os.path.join(_TORCH, "*.onnx")))


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    initializers = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in initializers:
            shape = [d.dim_value or 1 for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds


def test_zoo_models_present():
    assert len(MODELS) == 9, MODELS


@pytest.mark.parametrize("path", MODELS, ids=[os.path.basename(p)[6:-5] for p in MODELS])
def test_zoo_round_trip(path: str):
    model = onnx.load(path)
    exported = round_trip(model)
    assert len(exported.graph.node) == len(model.graph.node)
    assert {t.name for t in exported.graph.initializer} == \
        {t.name for t in model.graph.initializer}
    assert [vi.name for vi in exported.graph.input] == [vi.name for vi in model.graph.input]
    assert [vi.name for vi in exported.graph.output] == [vi.name for vi in model.graph.output]
    feeds = _feeds(model)
    assert_same_outputs(run(session(model), feeds), run(session(exported), feeds),
                        os.path.basename(path))


@pytest.mark.parametrize("path", TORCH_MODELS,
                         ids=[os.path.basename(p)[:-5] for p in TORCH_MODELS])
def test_torch_export_round_trip(path: str):
    model = onnx.load(path)
    exported = round_trip(model)
    feeds = {"x": np.load(path[:-5] + ".npz")["x"]}
    assert_same_outputs(run(session(model), feeds), run(session(exported), feeds),
                        os.path.basename(path))
