"""`onnx-ad-mlir`: differentiate ONNX model files.

    onnx-ad-mlir forward f.onnx fwd_f.onnx [--inputs x ..] [--outputs y ..] [--layout casadi|onnx]
                                          [--directions K]
    onnx-ad-mlir reverse f.onnx adj_f.onnx ...
    onnx-ad-mlir family  f.onnx out/f.onnx      # f.onnx, adj_f.onnx, fwd_adj_f.onnx

Bad input exits 1 with a one-line `error:`; `--debug` shows the traceback.
The input file is only read; outputs are written atomically.
"""
from __future__ import annotations

import argparse
import sys
import traceback



def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="onnx-ad-mlir", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("forward", "forward mode: seeds fwd_<x>, results fwd_<y>"),
                        ("reverse", "reverse mode: seeds adj_<y>, results adj_<x>"),
                        ("family", "write f.onnx, adj_f.onnx, fwd_adj_f.onnx for CasADi")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("input", help="the model to differentiate (.onnx)")
        s.add_argument("output", help="where to write the result (.onnx)")
        s.add_argument("--inputs", nargs="+", help="inputs to differentiate (default: float ones)")
        s.add_argument("--outputs", nargs="+", help="outputs to differentiate (default: float ones)")
        if name != "family":
            s.add_argument("--layout", choices=("casadi", "onnx"), default="casadi")
            s.add_argument("--directions", type=int, metavar="K",
                           help="seeds of exactly K directions, a static extent (default: any)")
        s.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from onnx_ad_mlir import api
        if args.command == "family":
            for path in api.family(args.input, args.output, inputs=args.inputs,
                                   outputs=args.outputs):
                print(path)
            return 0
        from onnx_ad_mlir.output_files import same_file
        if same_file(args.input, args.output):
            raise ValueError(f"refusing to overwrite the input file {args.input}")
        transform = api.forward if args.command == "forward" else api.reverse
        model = transform(args.input, inputs=args.inputs, outputs=args.outputs,
                          layout=args.layout, directions=args.directions)
        api.save_atomic(model, args.output)
        return 0
    except Exception as e:  # every failure becomes one line unless --debug
        if args.debug:
            traceback.print_exc()
        else:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"error: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
