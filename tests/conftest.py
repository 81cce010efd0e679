from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def iomatrix_argv() -> list[str]:
    """The installed CLI, falling back to the module (same interpreter as the tests)."""
    exe = Path(sys.executable).parent / "iomatrix"
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from iomatrix.cli import main; main()"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*iomatrix_argv(), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.fixture
def data_dir() -> Path:
    return DATA


def needs(program: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which(program) is None, reason=f"{program} not installed")


requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
