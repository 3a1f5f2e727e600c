"""Mutations of valid models into (mostly) invalid ones, for the fuzz run.

    mutate(model, seed) -> (kind, data)    data: serialized model bytes
    mutate_mlir(text, seed) -> (kind, text) garbage MLIR for onnx-ad-opt

Each mutation names what it broke (`kind`), so a refusal's message can be
read against it. Some mutations can leave the model valid (e.g. a dangling
name that happens to be... nothing here does on purpose, but a truncated
protobuf can still parse): the runner then expects a correct derivative.
"""
from __future__ import annotations

import random

import onnx
from onnx import AttributeProto as AP
from onnx import TensorProto as TP
from onnx import helper as h


def _nodes(graph: onnx.GraphProto, out=None):
    """Every node, nested bodies included, with the graph that owns it."""
    out = [] if out is None else out
    for n in graph.node:
        out.append((graph, n))
        for a in n.attribute:
            if a.type == AP.GRAPH:
                _nodes(a.g, out)
    return out


def _bodies(graph: onnx.GraphProto):
    return [(n, a) for _, n in _nodes(graph) for a in n.attribute if a.type == AP.GRAPH]


def m_truncate(m, r):
    data = m.SerializeToString()
    return data[:r.randrange(0, max(1, len(data)))]


def m_bitflip(m, r):
    data = bytearray(m.SerializeToString())
    for _ in range(r.randint(1, 8)):
        i = r.randrange(len(data))
        data[i] ^= 1 << r.randrange(8)
    return bytes(data)


def m_garbage(m, r):
    return bytes(r.randrange(256) for _ in range(r.randint(0, 200)))


def m_attr_type(m, r):
    cands = [(g, n, a) for g, n in _nodes(m.graph) for a in n.attribute if a.type != AP.GRAPH]
    if not cands:
        return None
    _, n, a = r.choice(cands)
    kind = r.choice(["float", "string", "ints", "tensor", "graph", "undefined"])
    name = a.name
    n.attribute.remove(a)
    if kind == "float":
        n.attribute.append(h.make_attribute(name, 1.5))
    elif kind == "string":
        n.attribute.append(h.make_attribute(name, "bogus"))
    elif kind == "ints":
        n.attribute.append(h.make_attribute(name, [7, -9, 2**40]))
    elif kind == "tensor":
        n.attribute.append(h.make_attribute(name, h.make_tensor("t", TP.INT64, [2], [1, 2])))
    elif kind == "graph":
        n.attribute.append(h.make_attribute(name, h.make_graph([], "empty", [], [])))
    else:
        bad = AP(name=name)
        bad.type = AP.UNDEFINED
        n.attribute.append(bad)
    return m


def m_attr_value(m, r):
    """Out-of-range values of the right type: axis, perm, group, kernel_shape..."""
    cands = [(n, a) for _, n in _nodes(m.graph) for a in n.attribute
             if a.type in (AP.INT, AP.INTS)]
    if not cands:
        return None
    n, a = r.choice(cands)
    if a.type == AP.INT:
        a.i = r.choice([-(2**62), -7, 7, 99, 2**62])
    else:
        del a.ints[:]
        a.ints.extend(r.choice([[], [0, 0, 0], [99], [-5, 3], [2**62] * 2]))
    return m


def m_drop_attr(m, r):
    cands = [(n, a) for _, n in _nodes(m.graph) for a in n.attribute]
    if not cands:
        return None
    n, a = r.choice(cands)
    n.attribute.remove(a)
    return m


def m_unknown_attr(m, r):
    _, n = r.choice(_nodes(m.graph))
    n.attribute.append(h.make_attribute("no_such_attribute", 3))
    return m


def m_dangling(m, r):
    cands = [(n, i) for _, n in _nodes(m.graph) for i in range(len(n.input)) if n.input[i]]
    if not cands:
        return None
    n, i = r.choice(cands)
    n.input[i] = "dangling_" + n.input[i]
    return m


def m_dangling_output(m, r):
    m.graph.output[r.randrange(len(m.graph.output))].name = "never_produced"
    return m


def m_cycle(m, r):
    nodes = [n for n in m.graph.node if n.input and n.op_type != "Constant"]
    if len(nodes) < 1:
        return None
    first = nodes[0]
    last = m.graph.node[-1]
    first.input[0] = r.choice([last.output[0], first.output[0]])  # a cycle or a self-loop
    return m


def m_shuffle(m, r):
    """The nodes of every graph in a random order: a valid model still (ONNX
    Runtime and the importer sort them; the checker is given a sorted copy)."""
    # innermost first: shuffling a graph copies its nodes, bodies included
    graphs = [a.g for _, a in _bodies(m.graph)][::-1] + [m.graph]
    if all(len(g.node) < 2 for g in graphs):
        return None
    for g in graphs:
        nodes = list(g.node)
        r.shuffle(nodes)
        copies = [onnx.NodeProto() for _ in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del g.node[:]
        g.node.extend(copies)
    return m


def m_duplicate_output(m, r):
    if len(m.graph.node) >= 2 and r.random() < 0.6:
        a, b = r.sample(list(m.graph.node), 2)
        b.output[0] = a.output[0]
    else:
        m.graph.output.append(m.graph.output[0])
    return m


def m_duplicate_input(m, r):
    if not m.graph.input:
        return None
    m.graph.input.append(m.graph.input[0])
    return m


def m_region_signature(m, r):
    bodies = _bodies(m.graph)
    if not bodies:
        return None
    n, a = r.choice(bodies)
    g = a.g
    choice = r.choice(["drop_output", "add_input", "drop_input", "input_type", "output_type",
                       "extra_output"])
    if choice == "drop_output" and g.output:
        g.output.pop()
    elif choice == "add_input":
        g.input.append(h.make_tensor_value_info("extra_in", TP.FLOAT, [2]))
    elif choice == "drop_input" and g.input:
        g.input.pop()
    elif choice == "input_type" and g.input:
        g.input[0].type.tensor_type.elem_type = TP.STRING
    elif choice == "output_type" and g.output:
        g.output[-1].type.tensor_type.elem_type = TP.INT32
    else:
        g.output.append(g.output[0] if g.output else
                        h.make_tensor_value_info("ghost", TP.FLOAT, [1]))
    return m


def m_unknown_op(m, r):
    _, n = r.choice(_nodes(m.graph))
    if r.random() < 0.5:
        n.domain = r.choice(["com.unknown", "ai.onnx.ml", "com.microsoft"])
    else:
        n.op_type = r.choice(["FooBar", "", "conv", "Add ", "If\x00"])
    return m


def m_huge_dims(m, r):
    vals = list(m.graph.input) + list(m.graph.output)
    v = r.choice(vals)
    dims = v.type.tensor_type.shape.dim
    if not dims:
        v.type.tensor_type.shape.dim.add().dim_value = 2**62
        return m
    d = r.choice(dims)
    d.dim_value = r.choice([2**62, 2**63 - 1, -3, 10**12])
    return m


def m_huge_tensor(m, r):
    """A constant claiming many more elements than its bytes hold."""
    for _, n in _nodes(m.graph):
        if n.op_type == "Constant":
            t = n.attribute[0].t
            if t.dims:
                t.dims[0] = r.choice([2**40, 2**62, -1, t.dims[0] + 1])
            else:
                t.dims.append(2**40)
            return m
    return None


def m_bad_dtype(m, r):
    v = r.choice(list(m.graph.input) + list(m.graph.output))
    v.type.tensor_type.elem_type = r.choice([0, 999, TP.STRING, TP.COMPLEX128])
    return m


def m_bad_opset(m, r):
    choice = r.random()
    if choice < 0.3:
        del m.opset_import[:]
    elif choice < 0.6:
        m.opset_import[0].version = r.choice([0, 1, 5, 6, 99, -1, 2**40])
    elif choice < 0.8:
        m.opset_import.append(h.make_opsetid("", 13))  # two default-domain entries
    else:
        m.ir_version = r.choice([0, 1, 2, 99])
    return m


def m_empty_name(m, r):
    _, n = r.choice(_nodes(m.graph))
    if n.output:
        n.output[0] = ""
    return m


def m_input_rank(m, r):
    """An input whose declared rank no longer fits its uses."""
    v = r.choice(list(m.graph.input))
    dims = v.type.tensor_type.shape.dim
    if dims and r.random() < 0.5:
        dims.pop()
    else:
        dims.add().dim_value = 3
    return m


MUTATIONS = {f.__name__[2:]: f for f in (
    m_truncate, m_bitflip, m_garbage, m_attr_type, m_attr_value, m_drop_attr, m_unknown_attr,
    m_dangling, m_dangling_output, m_cycle, m_shuffle, m_duplicate_output, m_duplicate_input,
    m_region_signature, m_unknown_op, m_huge_dims, m_huge_tensor, m_bad_dtype, m_bad_opset,
    m_empty_name, m_input_rank)}


def mutate(model: onnx.ModelProto, seed: int, kind: str | None = None) -> tuple[str, bytes]:
    """(kind, bytes) for one mutation of a copy of `model` (deterministic)."""
    r = random.Random(seed)
    kinds = sorted(MUTATIONS)
    for _ in range(10):
        k = kind or r.choice(kinds)
        m = onnx.ModelProto()
        m.CopyFrom(model)
        out = MUTATIONS[k](m, r)
        if out is None:
            kind = None
            continue
        return k, out if isinstance(out, bytes) else out.SerializeToString()
    return "truncate", m_truncate(model, r)


def mutate_mlir(text: str, seed: int) -> tuple[str, str]:
    """Garbage MLIR for onnx-ad-opt: truncated, characters changed, lines dropped
    or duplicated, types swapped, random tokens."""
    r = random.Random(seed)
    lines = text.splitlines()
    kind = r.choice(["truncate", "chars", "drop_line", "dup_line", "types", "tokens", "swap"])
    if kind == "truncate":
        return kind, text[:r.randrange(len(text) + 1)]
    if kind == "chars":
        t = list(text)
        for _ in range(r.randint(1, 6)):
            t[r.randrange(len(t))] = r.choice("{}()<>%^@:,=\"x0-1\n#!")
        return kind, "".join(t)
    if kind == "drop_line" and len(lines) > 1:
        del lines[r.randrange(len(lines))]
    elif kind == "dup_line" and lines:
        i = r.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == "types":
        a, b = r.sample(["f32", "f64", "i64", "i1", "f16", "none", "?x?xf32", "0x", "1x"], 2)
        return kind, text.replace(a, b)
    elif kind == "swap" and len(lines) > 2:
        i, j = r.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
    else:
        toks = ["onnx.If", "onnx.Loop", "\"onnx.Conv\"()", "%0", "^bb0:", "onnx.Yield",
                "dense<1.0>", "tensor<*xf32>", "-> ()", "{axis = 99 : si64}"]
        i = r.randrange(len(lines) + 1)
        lines.insert(i, " ".join(r.choice(toks) for _ in range(r.randint(1, 4))))
        kind = "tokens"
    return kind, "\n".join(lines) + "\n"
