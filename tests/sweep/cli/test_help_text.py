"""``--help`` writes flags as flags and arguments by their names (``SPEC``, not ``{SPEC}``)."""

import re
import runpy
import sys

import pytest
import typer
from typer.testing import CliRunner

from sweep.cli import app

GROUP = typer.main.get_command(app)
COMMANDS = [(name,) for name in GROUP.commands if name != "analyze"] + [("analyze", "scaling")]


def _help(*names):
    result = CliRunner().invoke(app, [*names, "--help"], terminal_width=200,
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("names", COMMANDS, ids=" ".join)
def test_no_flag_shows_a_value_type_and_no_argument_is_braced(names):
    text = _help(*names)
    assert "<bool>" not in text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage
    assert re.search(r"--help\s+Show this message", text)


def test_run_shows_its_spec_argument_and_flags_as_the_readme_writes_them():
    text = _help("run")
    assert re.search(r"Usage: .* run \[OPTIONS\] SPEC\s*$", text, re.M)
    assert re.search(r"--quiet\s+No progress display", text)
    assert re.search(r"--track\s+--no-track\s+Log the run", _help("train"))
    assert re.search(r"--trials\s+<int range>", text)  # options that take a value keep theirs
    assert re.search(r"Usage: .* scaling \[OPTIONS\] \[STUDY_OR_DIR\]\s*$",
                     _help("analyze", "scaling"), re.M)


def test_python_m_sweep_cli_is_the_same_command_line(monkeypatch, capsys):
    """``python -m sweep.cli`` (sweep/cli/__main__.py) runs the app ``sweep`` runs."""
    monkeypatch.setattr(sys, "argv", ["sweep", "--help"])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as done:
        runpy.run_module("sweep.cli", run_name="__main__")
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "Usage:" in text and all(name in text for name in GROUP.commands), text
