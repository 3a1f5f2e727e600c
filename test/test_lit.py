"""Runs the lit suite (test/lit) as one pytest test, so that `python -m pytest`
is the single test command.  lit's summary is printed; any failing lit test
fails this test with lit's full output."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

LIT_DIR = Path(__file__).parent / "lit"


def test_lit(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", "import lit.main; lit.main.main()",
                           "-v", str(LIT_DIR)],
                          capture_output=True, text=True, timeout=1800)
    output = proc.stdout + proc.stderr
    summary = output[output.rfind("Testing Time"):] if "Testing Time" in output else output[-2000:]
    with capsys.disabled():
        print("\n[lit] " + summary.strip().replace("\n", "\n[lit] "))
    assert proc.returncode == 0, f"lit failed:\n{output}"
    passed = re.search(r"Passed\s*:\s*(\d+)", output)
    assert passed and int(passed.group(1)) > 0, f"lit ran no test:\n{output}"
    assert not re.search(r"(Unresolved|Unsupported|Failed)\s*:", summary), output
