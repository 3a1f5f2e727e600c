"""onnx-ad-translate: ONNX <-> MLIR text, mlir-translate style.

    onnx-ad-translate --import-onnx f.onnx [-o f.mlir]
    onnx-ad-translate --export-onnx f.mlir -o f.onnx
    ... | onnx-ad-translate --import-onnx - | ...

`-` is stdin/stdout.  Imported IR is printed with its locations, which carry
the ONNX node and value names (DESIGN.md, "Import/export conventions"), so
that a later export restores them; `--strip-debuginfo` drops them.  Bad input
exits with status 1 and one `error:` line (`--debug`: with the traceback).
Output files are replaced atomically.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

import onnx
from mlir import ir

from onnx_ad_mlir import output_files
from onnx_ad_mlir.errors import OnnxAdError
from onnx_ad_mlir.exporter import export_onnx
from onnx_ad_mlir.importer import import_onnx
from onnx_ad_mlir.tools import _mlir_text


class ToolError(OnnxAdError):
    """A usage or I/O error reported as one `error:` line."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        return _run(argv)
    except Exception as e:  # noqa: BLE001 - the tool's last line of defence
        if debug:
            traceback.print_exc()
        message = str(e) if isinstance(e, OnnxAdError) else \
            f"internal error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"error: {message}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="onnx-ad-translate", allow_abbrev=False,
                                 description="Translate between ONNX and onnx-dialect MLIR.")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--import-onnx", action="store_true", help="ONNX model -> MLIR text")
    mode.add_argument("--export-onnx", action="store_true", help="MLIR text -> ONNX model")
    ap.add_argument("input", nargs="?", default="-", help="input file, - for stdin")
    ap.add_argument("-o", dest="output", default="-", help="output file (default stdout)")
    ap.add_argument("--strip-debuginfo", action="store_true",
                    help="print imported IR without locations (loses ONNX names)")
    ap.add_argument("--mlir-print-op-generic", action="store_true")
    ap.add_argument("--debug", action="store_true", help="show Python tracebacks")
    return ap


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if "-" not in (args.input, args.output) and output_files.same_file(args.input, args.output):
        raise ToolError(f"refusing to overwrite the input file {args.input}")
    data = _read(args.input)
    with ir.Context() as context:
        if args.import_onnx:
            source = os.path.abspath(args.input) if args.input != "-" else data
            module = import_onnx(source, context)
            text = module.operation.get_asm(enable_debug_info=not args.strip_debuginfo,
                                            print_generic_op_form=args.mlir_print_op_generic,
                                            assume_verified=True)
            _write_bytes(args.output, text.encode())
        else:
            module = _parse_mlir(data, args.input)
            _write_model(args.output, export_onnx(module))
    return 0


def _read(path: str) -> bytes:
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from None


def _parse_mlir(data: bytes, path: str) -> ir.Module:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{path}: not MLIR text (invalid UTF-8 at byte {e.start})") from None
    problem = _mlir_text.resource_problem(text)
    if problem:  # (the parser would abort the process)
        line, col, what = problem
        raise ToolError(f"{path}: invalid MLIR: {path}:{line}:{col}: {what}")
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as e:
        first = e.error_diagnostics[0] if e.error_diagnostics else None
        detail = f"{first.location}: {first.message}" if first else str(e)
        raise ToolError(f"{path}: invalid MLIR: {detail}") from None


def _write_model(path: str, model: onnx.ModelProto) -> None:
    if path != "-":
        output_files.save_model(model, path)
    elif model.ByteSize() > output_files.EXTERNAL_DATA_LIMIT:
        raise ToolError("the model needs external data (> 2 GB): write it to a file")
    else:
        _write_bytes(path, model.SerializeToString())


def _write_bytes(path: str, data: bytes) -> None:
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        output_files.write_bytes(path, data)


if __name__ == "__main__":
    sys.exit(main())
