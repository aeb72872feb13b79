"""A user's own ``models`` (folder or module) never replaces the installed model factory.

The factory's import name is ``sweep_models`` (the project's ``models/`` folder provides it), so a
notebook or a command run from a folder that holds a ``models/`` package of its own, as ``sweep
train --save models/quick`` makes one, still finds it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "studies" / "quickstart.yaml"


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    """A working folder holding a ``models/`` package of the user's, with names the factory has."""
    package = tmp_path / "models"
    package.mkdir()
    (package / "__init__.py").write_text('ModelConfig = "the user\'s own"\n')
    (package / "config.py").write_text('raise ImportError("the user\'s models/config.py")\n')
    return tmp_path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_cli_runs_from_a_folder_with_its_own_models_package(user_folder):
    result = _run(["-m", "sweep.cli", "validate", str(SPEC), "--samples", "4", "--json"],
                  user_folder)
    assert result.returncode == 0, result.stderr
    assert '"name": "quickstart"' in result.stdout


def test_a_notebook_imports_both_its_own_models_and_the_factory(user_folder):
    code = ("import models, sweep_models, sweep.space\n"
            "from sweep_models import ModelConfig, build_model\n"
            "print(models.ModelConfig)\n"
            "print(ModelConfig.__module__, build_model(ModelConfig(vocab_size=64, d_model=32, "
            "n_heads=2, n_layers=1, seq_len=16)).__class__.__name__)\n"
            "print(sweep_models.__file__)\n")
    result = _run(["-c", code], user_folder)
    assert result.returncode == 0, result.stderr
    own, factory, path = result.stdout.splitlines()
    assert own == "the user's own"
    assert factory == "sweep_models.config Transformer"
    assert Path(path).is_relative_to(ROOT / "models")
