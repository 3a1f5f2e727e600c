#!/usr/bin/env python3
"""Generate the ONNX dialect's ODS and the Python op table from onnx.defs.

    python dialect/gen_onnx_ods.py      # rewrites both generated files

Outputs (checked in, marked generated):
  dialect/include/onnx_ad/ONNXOps.td      one ODS op per kept schema version
  python/onnx_ad_mlir/_op_table.py        names, operands, attributes, defaults

Version policy: every schema version in effect at some opset in
[MIN_OPSET, the newest] is kept.  Consecutive versions with the same
signature (operand/result names and arity, attribute names, kinds, defaults)
share one op; the group holding the newest version keeps the plain name
(`onnx.Conv`), older groups are named after their newest member
(`onnx.UpsampleV7`).  Operand type constraints are the union over the group.
"""
from __future__ import annotations

import collections
import os
import pprint
import sys

import onnx
from onnx import defs

PINNED_ONNX = "1.23.2"
MIN_OPSET = 7
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TD_PATH = os.path.join(ROOT, "dialect", "include", "onnx_ad", "ONNXOps.td")
TABLE_PATH = os.path.join(ROOT, "python", "onnx_ad_mlir", "_op_table.py")

# Ops with side effects: everything else is Pure (or RecursiveMemoryEffects
# when it has regions).  Dropout draws a random mask in training mode, so
# two Dropouts must not be merged.
IMPURE = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
          "Multinomial", "Bernoulli", "Dropout"}
# Region ops that may not terminate (Loop without a trip count) must not be
# speculated, e.g. hoisted out of an If by loop-invariant code motion.
MAY_NOT_TERMINATE = {"Loop"}
# Region ops with RegionBranchOpInterface and a hand-written verifier
# (dialect/lib/ONNXOps.cpp).  Only the newest version of each is wired.
# The interface methods each one defines beyond the required ones: If's
# branches run at most once, which lets control-flow-sink move ops into them.
_BRANCH_METHODS = ["getEntrySuccessorOperands", "areTypesCompatible"]
REGION_BRANCH = {"If": _BRANCH_METHODS + ["getRegionInvocationBounds"],
                 "Loop": _BRANCH_METHODS, "Scan": _BRANCH_METHODS}
# Loop ops (LoopLikeOpInterface, ONNXOps.cpp: getLoopRegions): upstream
# loop-invariant-code-motion hoists Pure ops out of their bodies in a
# caller's pipeline. Our cleanup does not run it: the recurrent rules place
# invariants themselves, and a step matrix made from a constant inside a Scan
# body is one ONNX Runtime folds and prepacks there (hoisted, a forward LSTM's
# reverse model ran 2.5-6% slower).
LOOP_LIKE = {"Loop", "Scan"}
# Ops with hand-written folders.
FOLDERS = {"Constant", "Identity", "Transpose"}

ELEMENT_TYPES = {
    "float16": "F16", "bfloat16": "BF16", "float": "F32", "double": "F64",
    "bool": "I1", "int2": "I<2>", "int4": "I<4>", "int8": "I8", "int16": "I16",
    "int32": "I32", "int64": "I64", "uint2": "UI<2>", "uint4": "UI<4>",
    "uint8": "UI8", "uint16": "UI16", "uint32": "UI32", "uint64": "UI64",
    "complex64": "Complex<F32>", "complex128": "Complex<F64>",
    "string": "ONNX_StringType",
    "float8e4m3fn": "F8E4M3FN", "float8e4m3fnuz": "F8E4M3FNUZ",
    "float8e5m2": "F8E5M2", "float8e5m2fnuz": "F8E5M2FNUZ",
    "float8e8m0": "F8E8M0FNU", "float4e2m1": "F4E2M1FN",
    "float6e2m3": "F6E2M3FN", "float6e3m2": "F6E3M2FN",
}

A = defs.OpSchema.AttrType
# ONNX attribute kind -> (ODS constraint, table kind)
ATTR_KINDS = {
    A.INT: ("SI64Attr", "int"),
    A.FLOAT: ("F32Attr", "float"),
    A.STRING: ("StrAttr", "string"),
    A.INTS: ("I64ArrayAttr", "ints"),
    A.FLOATS: ("F32ArrayAttr", "floats"),
    A.STRINGS: ("StrArrayAttr", "strings"),
    A.TENSOR: ("ElementsAttr", "tensor"),
    A.SPARSE_TENSOR: ("AnyAttr", "sparse_tensor"),
    A.TYPE_PROTO: ("TypeAttr", "type"),
    A.TENSORS: ("ArrayAttr", "tensors"),
    A.SPARSE_TENSORS: ("ArrayAttr", "sparse_tensors"),
    A.TYPE_PROTOS: ("TypeArrayAttr", "types"),
}
GRAPH_KINDS = {A.GRAPH, A.GRAPHS}
FORM = defs.OpSchema.FormalParameterOption


def default_value(attr: defs.OpSchema.Attribute):
    """The schema default as a plain Python value, or None."""
    d = attr.default_value
    if d is None or not d.name:
        return None
    v = onnx.helper.get_attribute_value(d)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    if isinstance(v, (int, float, str)):
        return v
    return None  # tensors/graphs: no defaults used in the default domain


def signature(s: defs.OpSchema) -> tuple:
    params = lambda ps: tuple((p.name, int(p.option), p.is_homogeneous) for p in ps)
    attrs = tuple(sorted((a.name, int(a.type), a.required, repr(default_value(a)))
                         for a in s.attributes.values()))
    return params(s.inputs), params(s.outputs), attrs


def kept_groups(versions: list[defs.OpSchema]) -> list[list[defs.OpSchema]]:
    """Versions in effect at some opset >= MIN_OPSET, grouped by signature."""
    versions = sorted(versions, key=lambda s: s.since_version)
    start = 0
    for i, s in enumerate(versions):
        if s.since_version <= MIN_OPSET:
            start = i
    groups: list[list[defs.OpSchema]] = []
    for s in versions[start:]:
        if groups and signature(groups[-1][-1]) == signature(s):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def type_strs(group: list[defs.OpSchema], index: int) -> list[str]:
    """The union over the group of the types allowed for parameter `index`
    of inputs + outputs: each version names its own type parameter (Dropout-7's
    mask is T, Dropout-10's is T1)."""
    allowed: list[str] = []
    for s in group:
        type_str = (list(s.inputs) + list(s.outputs))[index].type_str
        tcs = {tc.type_param_str: tc.allowed_type_strs for tc in s.type_constraints}
        for t in tcs.get(type_str, [type_str]):
            if t not in allowed:
                allowed.append(t)
    return allowed


def ods_type(allowed: list[str]) -> str:
    elems, extra = [], []
    for t in allowed:
        if t.startswith("tensor(") and t[7:-1] in ELEMENT_TYPES:
            e = ELEMENT_TYPES[t[7:-1]]
            if e not in elems:
                elems.append(e)
        elif t.startswith("seq(") and "ONNX_AnySeq" not in extra:
            extra.append("ONNX_AnySeq")
        elif t.startswith("optional(") and "ONNX_AnyOpt" not in extra:
            extra.append("ONNX_AnyOpt")
        elif t.startswith("map(") and "AnyType" not in extra:
            extra.append("AnyType")
    parts = ([f"TensorOf<[{', '.join(elems)}]>"] if elems else []) + extra
    if not parts:
        return "AnyType"
    return parts[0] if len(parts) == 1 else f"AnyTypeOf<[{', '.join(parts)}]>"


def param_decl(group, index: int, p, ods_name: str) -> str:
    t = ods_type(type_strs(group, index))
    if p.option == FORM.Variadic:
        return f"Variadic<{t}>:${ods_name}"
    if p.option == FORM.Optional:
        return f"AnyTypeOf<[{t}, NoneType]>:${ods_name}"
    return f"{t}:${ods_name}"


class OdsNames:
    """ODS names unique per op, also after accessor camel-casing (`X` vs `x`)."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def __call__(self, name: str, suffix: str) -> str:
        ods = name
        while ods.lower().replace("_", "") in self.taken:
            ods += suffix
        self.taken.add(ods.lower().replace("_", ""))
        return ods


def same_type_traits(group: list[defs.OpSchema], ods_names: list[str]) -> list[str]:
    """`AllElementTypesMatch` for the single (not optional, not variadic)
    tensor operands and results that share a type parameter (`T`) in every
    schema of the group: ONNX binds one type per parameter and node.
    Parameters that may be sequences or optionals are left out: their
    "element type" would be the whole type, shapes included."""
    def key(i: int) -> tuple | None:
        keys = []
        for s in group:
            p = (list(s.inputs) + list(s.outputs))[i]
            allowed = {tc.type_param_str: tc.allowed_type_strs for tc in s.type_constraints}
            if p.option != FORM.Single or p.type_str not in allowed:
                return None
            if not all(t.startswith("tensor(") for t in allowed[p.type_str]):
                return None
            keys.append(p.type_str)
        return tuple(keys)
    by_key: dict[tuple, list[str]] = collections.defaultdict(list)
    for i, ods in enumerate(ods_names):
        k = key(i)
        if k is not None:
            by_key[k].append(ods)
    traits = []
    for same in by_key.values():
        if len(same) > 1:
            quoted = ", ".join(f'"{n}"' for n in same)
            traits.append(f"AllElementTypesMatch<[{quoted}]>")
    return traits


def cpp_class(mlir_name: str) -> str:
    return f"ONNX{mlir_name}Op"


def op_record(name: str, group: list[defs.OpSchema], newest: bool) -> tuple[str, dict]:
    s = group[-1]
    mlir_name = name if newest else f"{name}V{s.since_version}"
    graphs = [a for a in s.attributes.values() if a.type in GRAPH_KINDS]
    attrs = [a for a in s.attributes.values() if a.type not in GRAPH_KINDS]
    if graphs:
        traits = ["RecursiveMemoryEffects"]
        if name not in MAY_NOT_TERMINATE:
            traits.append("RecursivelySpeculatable")
    elif name in IMPURE:
        traits = []
    else:
        traits = ["Pure"]
    if newest and name in REGION_BRANCH:
        methods = ", ".join(f'"{m}"' for m in REGION_BRANCH[name])
        traits.append(f"DeclareOpInterfaceMethods<RegionBranchOpInterface, [{methods}]>")
    if newest and name in LOOP_LIKE:
        traits.append("DeclareOpInterfaceMethods<LoopLikeOpInterface>")
    if newest and name == "Constant":
        traits.append("ConstantLike")
    names = OdsNames()
    in_names = [names(p.name, "_in") for p in s.inputs]
    args = [param_decl(group, i, p, n) for i, (p, n) in enumerate(zip(s.inputs, in_names))]
    for a in attrs:
        ods, _ = ATTR_KINDS[a.type]
        args.append(f"{ods if a.required else f'OptionalAttr<{ods}>'}:${names(a.name, '_attr')}")
    out_names = [names(p.name, "_out") for p in s.outputs]
    results = [param_decl(group, len(s.inputs) + i, p, n)
               for i, (p, n) in enumerate(zip(s.outputs, out_names))]
    traits += same_type_traits(group, in_names + out_names)
    # If's regions are (then, else); every other op keeps schema order.
    if name == "If":
        graphs = sorted(graphs, key=lambda a: a.name != "then_branch")
    lines = [f"def {cpp_class(mlir_name)} : ONNX_Op<\"{mlir_name}\", [{', '.join(traits)}]> {{",
             f"  let summary = \"ONNX {name}, opset {s.since_version}\";",
             f"  let arguments = (ins {', '.join(args)});",
             f"  let results = (outs {', '.join(results)});"]
    if graphs:
        lines.append("  let regions = (region "
                     + ", ".join(f"SizedRegion<1>:${names(g.name, '_region')}" for g in graphs) + ");")
    if newest and name in REGION_BRANCH:
        lines.append("  let hasVerifier = 1;")
    if newest and name in FOLDERS:
        lines.append("  let hasFolder = 1;")
    lines.append("}")
    entry = {
        "op_type": name,
        "since_versions": [g.since_version for g in group],
        "inputs": [(p.name, _option(p)) for p in s.inputs],
        "outputs": [(p.name, _option(p)) for p in s.outputs],
        "attributes": {a.name: (ATTR_KINDS[a.type][1], a.required, default_value(a))
                       for a in attrs},
        "regions": [g.name for g in graphs],
        "pure": "Pure" in traits,
    }
    return "\n".join(lines), (mlir_name, entry)


def _option(p) -> str:
    return {FORM.Single: "single", FORM.Optional: "optional", FORM.Variadic: "variadic"}[p.option]


def generate() -> tuple[str, str]:
    if onnx.__version__ != PINNED_ONNX:
        sys.exit(f"gen_onnx_ods.py: onnx {onnx.__version__} installed, {PINNED_ONNX} pinned")
    by_name: dict[str, list] = collections.defaultdict(list)
    for s in defs.get_all_schemas_with_history():
        if s.domain == "":
            by_name[s.name].append(s)
    td, table, versions = [], {}, {}
    for name in sorted(by_name):
        groups = kept_groups(by_name[name])
        versions[name] = []
        for i, group in enumerate(groups):
            text, (mlir_name, entry) = op_record(name, group, i == len(groups) - 1)
            td.append(text)
            table[mlir_name] = entry
            versions[name].append((group[0].since_version, mlir_name))
    header = ("// GENERATED by dialect/gen_onnx_ods.py from onnx "
              f"{PINNED_ONNX} (opset {defs.onnx_opset_version()}). DO NOT EDIT.\n")
    td_text = (header + "#ifndef ONNX_AD_ONNX_OPS\n#define ONNX_AD_ONNX_OPS\n\n"
               "include \"onnx_ad/ONNXBase.td\"\n\n" + "\n\n".join(td)
               + "\n\n#endif // ONNX_AD_ONNX_OPS\n")
    py_text = (f'"""GENERATED by dialect/gen_onnx_ods.py from onnx {PINNED_ONNX}. DO NOT EDIT.\n\n'
               "OPS: MLIR op name (without 'onnx.') -> schema facts.\n"
               "VERSIONS: ONNX op type -> [(first since_version, MLIR op name)], ascending.\n"
               '"""\n\n'
               f"ONNX_VERSION = {PINNED_ONNX!r}\n"
               f"MAX_OPSET = {defs.onnx_opset_version()}\n"
               f"MIN_OPSET = {MIN_OPSET}\n\n"
               f"OPS = {pprint.pformat(table, width=100, sort_dicts=True)}\n\n"
               f"VERSIONS = {pprint.pformat(versions, width=100, sort_dicts=True)}\n")
    return td_text, py_text


def main() -> None:
    td_text, py_text = generate()
    for path, text in ((TD_PATH, td_text), (TABLE_PATH, py_text)):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    print(f"wrote {TD_PATH} and {TABLE_PATH}")


if __name__ == "__main__":
    main()
