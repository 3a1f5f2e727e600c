"""onnx-ad-opt: mlir-opt for the onnx dialect, with our Python passes.

    onnx-ad-opt in.mlir --canonicalize --onnx-ad-forward='inputs=x,y' -o out.mlir
    onnx-ad-opt in.mlir --pass-pipeline='builtin.module(func.func(cse),onnx-ad-forward{inputs=x})'
    onnx-ad-opt in.mlir -split-input-file -verify-diagnostics

Like mlir-opt: one flag per pass, run in command-line order; pass options go
after `=` in mlir-opt's syntax (`--pass='opt1=v opt2=a,b'`); single-dash long
flags (`-split-input-file`) are accepted; diagnostics are printed as
`file:line:col: error: message`.  Exit status 1 on any error.
"""
from __future__ import annotations

import argparse
import sys
import traceback

from mlir import ir
from mlir.passmanager import PassManager

import onnx_ad_mlir  # noqa: F401  (registers the dialect)
from onnx_ad_mlir import output_files, passes
from onnx_ad_mlir.errors import OnnxAdError
from onnx_ad_mlir.tools import _diagnostics as diagnostics
from onnx_ad_mlir.tools import _mlir_text

# Upstream passes offered as flags; any other runs via --pass-pipeline.
UPSTREAM_PASSES = {
    "canonicalize": "Canonicalize operations (folds and patterns)",
    "cse": "Eliminate common sub-expressions",
    "inline": "Inline function calls",
    "symbol-dce": "Eliminate dead symbols",
    "symbol-privatize": "Mark symbols private",
    "sccp": "Sparse conditional constant propagation",
    "loop-invariant-code-motion": "Hoist loop invariant instructions",
    "control-flow-sink": "Sink operations into conditional blocks",
    "remove-dead-values": "Remove dead values",
    "strip-debuginfo": "Strip debug info from all operations",
}
SPLIT_MARKER = "// -----"


def _pass_flags() -> dict[str, str]:
    flags = dict(UPSTREAM_PASSES)
    flags.update({a: p.description for a, p in passes.registered_passes().items()})
    return flags


def _arg_parser(pass_flags: dict[str, str]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="onnx-ad-opt", allow_abbrev=False,
        description="Parse, verify, transform and print onnx-dialect MLIR.")
    ap.add_argument("input", nargs="?", default="-", help="input .mlir file, - for stdin")
    ap.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    ap.add_argument("--pass-pipeline", help="textual pipeline, e.g. "
                    "'builtin.module(func.func(cse),canonicalize)'")
    ap.add_argument("--split-input-file", action="store_true",
                    help=f"process each '{SPLIT_MARKER}'-separated chunk separately")
    ap.add_argument("--verify-diagnostics", action="store_true",
                    help="check diagnostics against expected-* comments")
    ap.add_argument("--allow-unregistered-dialect", action="store_true")
    ap.add_argument("--mlir-print-ir-after-all", action="store_true",
                    help="print the IR after every pass (stderr)")
    ap.add_argument("--mlir-print-op-generic", action="store_true")
    ap.add_argument("--mlir-print-debuginfo", action="store_true")
    ap.add_argument("--debug", action="store_true", help="show Python tracebacks")
    group = ap.add_argument_group("passes (run in command-line order; "
                                  "options as --pass='opt=value opt2=a,b')")
    for name, help_text in sorted(pass_flags.items()):
        group.add_argument(f"--{name}", action="store_true", help=help_text)
    return ap


def _split_pass_flags(argv: list[str], pass_flags: dict[str, str]) -> tuple[list[str], list[str]]:
    """Separates pass flags (kept in order, as pipeline elements) from the
    rest; mlir-opt's single-dash long flags become double-dash."""
    rest, elements = [], []
    for arg in argv:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2 and arg[1].isalpha():
            arg = "-" + arg
        name, eq, opts = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in pass_flags:
            elements.append(f"{name}{{{opts}}}" if eq and opts else name)
        else:
            rest.append(arg)
    return rest, elements


class ToolError(OnnxAdError):
    """A usage or I/O error reported as one `error:` line."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or "-debug" in argv
    try:
        return _run(argv)
    except Exception as e:  # noqa: BLE001 - the tool's last line of defence
        if debug:
            traceback.print_exc()
        print(f"error: {_describe(e)}", file=sys.stderr)
        return 1


def _describe(e: Exception) -> str:
    if isinstance(e, OnnxAdError):
        return str(e)
    return f"internal error: {type(e).__name__}: {e}"


def _run(argv: list[str]) -> int:
    pass_flags = _pass_flags()
    rest, elements = _split_pass_flags(argv, pass_flags)
    args = _arg_parser(pass_flags).parse_args(rest)
    if elements and args.pass_pipeline:
        raise ToolError("--pass-pipeline cannot be combined with individual pass flags")
    pipeline = args.pass_pipeline or (f"builtin.module({','.join(elements)})" if elements else "")
    if pipeline:  # fail early on a bad pipeline, once, not per chunk
        with ir.Context():
            passes.build_pipeline(PassManager("builtin.module"), pipeline)
    filename = "<stdin>" if args.input == "-" else args.input
    text = _read(args.input, filename)
    chunks = _chunks(text) if args.split_input_file else [(text, 1)]
    outputs, ok = [], True
    for chunk, first_line in chunks:
        out, chunk_ok = _process(chunk, first_line, pipeline, args, filename)
        ok &= chunk_ok
        if out is not None:
            outputs.append(out)
    if ok or args.output == "-":  # a failed run leaves an output file alone
        # As mlir-opt: chunk outputs separated by marker lines.
        _write(args.output, f"{SPLIT_MARKER}\n".join(o.rstrip("\n") + "\n" for o in outputs),
               args.input)
    return 0 if ok else 1


def _chunks(text: str) -> list[tuple[str, int]]:
    """Splits at lines starting with the marker; keeps each chunk's first
    line number so diagnostics point into the original file."""
    chunks, current, start = [], [], 1
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if line.startswith(SPLIT_MARKER):
            chunks.append(("".join(current), start))
            current, start = [], number + 1
        else:
            current.append(line)
    chunks.append(("".join(current), start))
    return chunks


def _process(chunk: str, first_line: int, pipeline: str,
             args: argparse.Namespace, filename: str) -> tuple[str | None, bool]:
    """Parses, verifies and transforms one chunk; returns (printed IR or
    None on failure, success).  Diagnostics go to stderr."""
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = args.allow_unregistered_dialect
    collected: list[diagnostics.Diag] = []

    def handler(d: ir.Diagnostic) -> bool:  # warnings/remarks from passes
        collected.append(diagnostics.from_mlir(d))
        return True
    ctx.attach_diagnostic_handler(handler)
    # Leading blank lines keep MLIR's line numbers equal to the file's.
    padded = "\n" * (first_line - 1) + chunk
    out, failed = None, False
    problem = _mlir_text.resource_problem(padded)
    if problem:  # (the parser would abort the process)
        line, col, what = problem
        collected.append(diagnostics.Diag("error", what, line, col))
        failed = True
    else:
        try:
            module = ir.Module.parse(padded, ctx)
            if pipeline:
                with ctx:
                    pm = PassManager("builtin.module")
                    passes.build_pipeline(pm, pipeline)
                    if args.mlir_print_ir_after_all:
                        pm.enable_ir_printing()
                    pm.run(module.operation)
            out = module.operation.get_asm(print_generic_op_form=args.mlir_print_op_generic,
                                           enable_debug_info=args.mlir_print_debuginfo)
        except ir.MLIRError as e:
            collected.extend(diagnostics.from_mlir(d) for d in e.error_diagnostics)
            if not e.error_diagnostics:
                collected.append(diagnostics.Diag("error", str(e)))
            failed = True
    if args.verify_diagnostics:
        problems = diagnostics.verify(collected, chunk, first_line, filename)
        for p in problems:
            print(p, file=sys.stderr)
        return (None if failed else out), not problems
    for d in collected:
        print(d.format(filename), file=sys.stderr)
        if args.debug:
            for n in d.notes:
                print("  " + n.format(filename), file=sys.stderr)
    return out, not failed and not any(d.kind == "error" for d in collected)


def _read(path: str, filename: str) -> str:
    try:
        data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    except OSError as e:
        raise ToolError(f"cannot read {filename}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{filename}: not UTF-8 text (byte {e.start}); "
                        "MLIR bytecode is not supported") from None
    if "\0" in text:
        raise ToolError(f"{filename}: contains NUL bytes; not MLIR text")
    return text


def _write(path: str, text: str, input_path: str) -> None:
    """Writes atomically (temp file + rename); never over the input."""
    if text and not text.endswith("\n"):
        text += "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    if input_path != "-" and output_files.same_file(path, input_path):
        raise ToolError(f"refusing to overwrite the input file {path}")
    output_files.write_bytes(path, text.encode())


if __name__ == "__main__":
    sys.exit(main())
