"""README promises: two set-up commands, and CI runs the test one."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    commands = [line for b in blocks for line in b.splitlines() if line.strip()]
    assert len(commands) == 2, commands
    main_cmd, test_cmd = commands
    example = re.search(r"examples/\S+", main_cmd)
    assert example and (ROOT / example.group(0)).is_file(), main_cmd
    assert test_cmd.endswith("python -m pytest")
    assert test_cmd in (ROOT / ".ci/run").read_text().splitlines()
