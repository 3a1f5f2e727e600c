#!/usr/bin/env python3
"""Builds the benchmark corpus in bench/corpus/ (not committed; not needed by CI).

    /opt/torchenv/bin/python bench/make_corpus.py          # torch + hand-built + zoo
    /opt/torchenv/bin/python bench/make_corpus.py --only mlp,gru

Needs torch, onnx, onnxruntime (the hand-built models' references are finite
differences of a float64 twin run by ONNX Runtime). For every model it writes
`<name>.onnx` and `<name>.npz` holding the input `x`, a tangent `v` (shape of
x), a cotangent `u` (shape of y) and the references `jvp` = J v and `vjp` =
J^T u (torch autograd in float64 for torch models, central differences of a
float64 twin for hand-built ones), plus `meta` (a JSON string: input and
output names, reference kind). Zoo models (onnx wheel, light/) are copied;
their reference is computed by bench/run.py (finite differences).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


# ---------------------------------------------------------------- torch models
def torch_models():
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self, act, d_in=128, hidden=256, d_out=16):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(d_in, hidden), act(), nn.Linear(hidden, hidden),
                                     act(), nn.Linear(hidden, d_out))

        def forward(self, x):
            return self.net(x)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1)
            self.c2 = nn.Conv2d(16, 32, 3, padding=1)
            self.fc = nn.Linear(32 * 8 * 8, 10)

        def forward(self, x):
            x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
            x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
            return self.fc(x.flatten(1))

    class Block(nn.Module):
        """Pre-norm transformer block: LayerNorm, multi-head attention, GELU MLP."""

        def __init__(self, d=64, heads=4):
            super().__init__()
            self.d, self.heads = d, heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            hd = d // self.heads
            split = lambda z: z.reshape(b, t, self.heads, hd).transpose(1, 2)
            att = torch.softmax(split(q) @ split(k).transpose(-1, -2) / hd ** 0.5, -1)
            x = x + self.proj((att @ split(v)).transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class Transformer(nn.Module):
        def __init__(self, layers, d=64, heads=4):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
            self.ln = nn.LayerNorm(d)

        def forward(self, x):
            return self.ln(self.blocks(x))

    class ResBlock(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.c1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(c_out)
            self.c2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(c_out)
            self.skip = None
            if stride != 1 or c_in != c_out:
                self.skip = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                          nn.BatchNorm2d(c_out))

        def forward(self, x):
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.skip is None else self.skip(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU())
            self.layers = nn.Sequential(ResBlock(16, 16, 1), ResBlock(16, 32, 2),
                                        ResBlock(32, 64, 2))
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(self.layers(self.stem(x)).mean((2, 3)))

    class Recurrent(nn.Module):
        def __init__(self, cell):
            super().__init__()
            self.rnn = cell(16, 32, num_layers=2)

        def forward(self, x):
            return self.rnn(x)[0]

    def randomize_bn(m):
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
        return m

    # name: (constructor, input shape, dynamic batch axis or None)
    return {
        "mlp": (lambda: MLP(nn.Tanh), (32, 128), 0),
        "gelu_mlp": (lambda: MLP(nn.GELU), (32, 128), 0),
        "cnn": (CNN, (8, 3, 32, 32), 0),
        "transformer_block": (lambda: Block(), (2, 32, 64), 0),
        "transformer_6": (lambda: Transformer(6), (2, 32, 64), 0),
        "transformer_48": (lambda: Transformer(48), (1, 16, 64), None),  # static: ~2,000 nodes
        "resnet": (lambda: randomize_bn(ResNet()), (4, 3, 32, 32), 0),
        "gru": (lambda: Recurrent(nn.GRU), (20, 4, 16), 1),
        "lstm": (lambda: Recurrent(nn.LSTM), (20, 4, 16), 1),
    }


def export_torch(name, make, shape, batch_axis):
    import torch
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    path = os.path.join(OUT, f"{name}.onnx")
    dyn = None if batch_axis is None else {"x": {batch_axis: "batch"}, "y": {batch_axis: "batch"}}
    torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"], output_names=["y"],
                      opset_version=18, dynamic_axes=dyn)
    m64 = model.double()
    x64 = x.double()
    y64 = m64(x64)
    g = np.random.default_rng(1)
    v = torch.from_numpy(g.standard_normal(shape))
    u = torch.from_numpy(g.standard_normal(tuple(y64.shape)))
    _, jvp = torch.autograd.functional.jvp(m64, x64, v)
    _, vjp = torch.autograd.functional.vjp(m64, x64, u)
    save(name, x.numpy(), v.numpy().astype(np.float32), u.numpy().astype(np.float32),
         jvp.detach().numpy(), vjp.detach().numpy(), "torch autograd (float64)")


def save(name, x, v, u, jvp, vjp, ref, inputs=("x",), outputs=("y",)):
    meta = {"inputs": list(inputs), "outputs": list(outputs), "reference": ref}
    np.savez(os.path.join(OUT, f"{name}.npz"), x=x, v=v, u=u, jvp=jvp, vjp=vjp,
             meta=np.array(json.dumps(meta)))
    print(f"{name}: {len(onnx.load(os.path.join(OUT, name + '.onnx')).graph.node)} nodes")


# ---------------------------------------------------------- hand-built models
def _hand_built(dtype):
    """If, Scan and Loop models in `dtype` (TensorProto code); float64 twins
    give finite-difference references."""
    np_t = {T.FLOAT: np.float32, T.DOUBLE: np.float64}[dtype]
    g = np.random.default_rng(2)

    def init(name, *shape):
        return numpy_helper.from_array((g.standard_normal(shape) / np.sqrt(shape[0])).astype(np_t),
                                       name)

    B, D, S = 8, 32, 16
    models = {}
    # If: the branch depends on the data (sign of the sum), both branches use W.
    then_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["t0"]),
                           h.make_node("Tanh", ["t0"], ["t1"])], "then", [],
                          [h.make_tensor_value_info("t1", dtype, [B, D])])
    else_g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["e0"]),
                           h.make_node("Sigmoid", ["e0"], ["e1"]),
                           h.make_node("Mul", ["e1", "x"], ["e2"])], "else", [],
                          [h.make_tensor_value_info("e2", dtype, [B, D])])
    graph = h.make_graph(
        [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         h.make_node("Greater", ["s", "zero"], ["c"]),
         h.make_node("If", ["c"], ["y0"], then_branch=then_g, else_branch=else_g),
         h.make_node("MatMul", ["y0", "W2"], ["y"])],
        "if_model", [h.make_tensor_value_info("x", dtype, [B, D])],
        [h.make_tensor_value_info("y", dtype, [B, D])],
        [init("W", D, D), init("W2", D, D),
         numpy_helper.from_array(np.zeros((), np_t), "zero")])
    models["if_model"] = (graph, (B, D))

    # Scan: an Elman RNN over T steps, state [B, S].
    Tn = 20
    body = h.make_graph(
        [h.make_node("MatMul", ["xt", "Wx"], ["a"]), h.make_node("MatMul", ["h", "Wh"], ["b"]),
         h.make_node("Add", ["a", "b"], ["c"]), h.make_node("Add", ["c", "bias"], ["d"]),
         h.make_node("Tanh", ["d"], ["h2"]), h.make_node("Identity", ["h2"], ["o"])],
        "body", [h.make_tensor_value_info("h", dtype, [B, S]),
                 h.make_tensor_value_info("xt", dtype, [B, D])],
        [h.make_tensor_value_info("h2", dtype, [B, S]),
         h.make_tensor_value_info("o", dtype, [B, S])])
    graph = h.make_graph(
        [h.make_node("Scan", ["h0", "x"], ["hT", "y"], num_scan_inputs=1, body=body)],
        "scan_rnn", [h.make_tensor_value_info("x", dtype, [Tn, B, D])],
        [h.make_tensor_value_info("y", dtype, [Tn, B, S])],
        [init("Wx", D, S), init("Wh", S, S),
         numpy_helper.from_array(np.zeros(S, np_t), "bias"),
         numpy_helper.from_array(np.zeros((B, S), np_t), "h0")])
    models["scan_rnn"] = (graph, (Tn, B, D))

    # Loop: 10 iterations of h = tanh(h W + x), plus a scan output of h.
    body = h.make_graph(
        [h.make_node("MatMul", ["h", "W"], ["a"]), h.make_node("Add", ["a", "x"], ["b"]),
         h.make_node("Tanh", ["b"], ["h2"]), h.make_node("Identity", ["cond"], ["cond2"]),
         h.make_node("Identity", ["h2"], ["so"])],
        "loop_body", [h.make_tensor_value_info("i", T.INT64, []),
                      h.make_tensor_value_info("cond", T.BOOL, []),
                      h.make_tensor_value_info("h", dtype, [B, D])],
        [h.make_tensor_value_info("cond2", T.BOOL, []),
         h.make_tensor_value_info("h2", dtype, [B, D]),
         h.make_tensor_value_info("so", dtype, [B, D])])
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "", "x"], ["hT", "hs"], body=body),
         h.make_node("ReduceMean", ["hs"], ["m"], axes=[0], keepdims=0),
         h.make_node("Add", ["m", "hT"], ["y"])],
        "loop_model", [h.make_tensor_value_info("x", dtype, [B, D])],
        [h.make_tensor_value_info("y", dtype, [B, D])],
        [init("W", D, D), numpy_helper.from_array(np.array(10, np.int64), "M")])
    models["loop_model"] = (graph, (B, D))

    # A neural ODE: 20 classical Runge-Kutta steps of dx/dt = tanh(x W1 + b1) W2
    # + b2 in a Loop, the final state out (the sensitivity of a trajectory's
    # end to its start, what a shooting method asks for).
    H, dt = 64, 0.05
    nodes, stage = [], ["x"]

    def f(inp, k):
        nodes.extend([h.make_node("MatMul", [inp, "W1"], [f"{k}a"]),
                      h.make_node("Add", [f"{k}a", "b1"], [f"{k}b"]),
                      h.make_node("Tanh", [f"{k}b"], [f"{k}c"]),
                      h.make_node("MatMul", [f"{k}c", "W2"], [f"{k}d"]),
                      h.make_node("Add", [f"{k}d", "b2"], [k])])
    for i, (k, c) in enumerate((("k1", None), ("k2", "half"), ("k3", "half"), ("k4", "full"))):
        if c is not None:
            nodes.extend([h.make_node("Mul", [f"k{i}", c], [f"s{i}"]),
                          h.make_node("Add", ["x", f"s{i}"], [f"xs{i}"])])
            stage.append(f"xs{i}")
        f(stage[-1], k)
    nodes.extend([h.make_node("Add", ["k2", "k3"], ["m23"]),
                  h.make_node("Add", ["m23", "m23"], ["m23x2"]),
                  h.make_node("Add", ["k1", "k4"], ["m14"]),
                  h.make_node("Add", ["m14", "m23x2"], ["msum"]),
                  h.make_node("Mul", ["msum", "sixth"], ["dx"]),
                  h.make_node("Add", ["x", "dx"], ["xn"]),
                  h.make_node("Identity", ["cond"], ["cond2"])])
    body = h.make_graph(nodes, "rk4_step", [h.make_tensor_value_info("i", T.INT64, []),
                                            h.make_tensor_value_info("cond", T.BOOL, []),
                                            h.make_tensor_value_info("x", dtype, [B, 16])],
                        [h.make_tensor_value_info("cond2", T.BOOL, []),
                         h.make_tensor_value_info("xn", dtype, [B, 16])])
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
        "neural_ode", [h.make_tensor_value_info("x", dtype, [B, 16])],
        [h.make_tensor_value_info("y", dtype, [B, 16])],
        [init("W1", 16, H), init("W2", H, 16),
         numpy_helper.from_array((0.1 * g.standard_normal(H)).astype(np_t), "b1"),
         numpy_helper.from_array((0.1 * g.standard_normal(16)).astype(np_t), "b2"),
         numpy_helper.from_array(np.array(dt / 2, np_t), "half"),
         numpy_helper.from_array(np.array(dt, np_t), "full"),
         numpy_helper.from_array(np.array(dt / 6, np_t), "sixth"),
         numpy_helper.from_array(np.array(20, np.int64), "M")])
    models["neural_ode"] = (graph, (B, 16))
    return models


def export_hand_built(only):
    import onnxruntime as ort
    f32, f64 = _hand_built(T.FLOAT), _hand_built(T.DOUBLE)
    for name, (graph, shape) in f32.items():
        if only and name not in only:
            continue
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        onnx.save(model, os.path.join(OUT, f"{name}.onnx"))
        twin = h.make_model(f64[name][0], opset_imports=[h.make_opsetid("", 17)])
        twin.ir_version = 8
        sess = ort.InferenceSession(twin.SerializeToString(), providers=["CPUExecutionProvider"])
        f = lambda x: sess.run(["y"], {"x": x})[0]
        g = np.random.default_rng(3)
        x = g.standard_normal(shape)
        v = g.standard_normal(shape)
        y = f(x)
        u = g.standard_normal(y.shape)
        eps = 1e-6
        jvp = (f(x + eps * v) - f(x - eps * v)) / (2 * eps)
        vjp = np.zeros(x.size)
        flat = x.reshape(-1)
        for i in range(x.size):  # full Jacobian by central differences
            e = np.zeros_like(flat)
            e[i] = eps
            col = (f((flat + e).reshape(shape)) - f((flat - e).reshape(shape))) / (2 * eps)
            vjp[i] = np.sum(col * u)
        save(name, x.astype(np.float32), v.astype(np.float32), u.astype(np.float32), jvp,
             vjp.reshape(shape), "central differences of a float64 twin")


def copy_zoo(only):
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        name = "zoo_" + os.path.basename(path)[len("light_"):-len(".onnx")]
        if only and name not in only:
            continue
        shutil.copy(path, os.path.join(OUT, f"{name}.onnx"))
        print(f"{name}: copied")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated model names")
    only = set(filter(None, ap.parse_args().only.split(",")))
    os.makedirs(OUT, exist_ok=True)
    for name, spec in torch_models().items():
        if not only or name in only:
            export_torch(name, *spec)
    export_hand_built(only)
    copy_zoo(only)


if __name__ == "__main__":
    main()
