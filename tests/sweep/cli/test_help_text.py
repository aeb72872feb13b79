"""``--help`` writes flags as flags and arguments by their names (``SPEC``, not ``{SPEC}``),
reads cleanly at 80 columns, and lists the commands in the order of a user's day."""

import importlib.metadata
import re
import runpy
import sys

import pytest
import typer
from typer.testing import CliRunner

from sweep.cli import app

GROUP = typer.main.get_command(app)
COMMANDS = [(name,) for name in GROUP.commands if name != "analyze"] + [("analyze", "scaling")]


def _every_command(group=GROUP, names=()):
    """Every command and group under ``group``, as the names that call it."""
    yield names
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if hasattr(command, "list_commands"):
            yield from _every_command(command, (*names, name))
        else:
            yield (*names, name)


EVERY = list(_every_command())


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
    assert re.search(r"--help\s+-h\s+Show this message", text)


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


def _help_at_80(*names, flag="--help"):
    result = CliRunner().invoke(app, [*names, flag], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.stdout


#: The widest line of text help writes beside its one-space margins at 80 columns.
_TEXT_WIDTH = 78


@pytest.mark.parametrize("names", EVERY, ids=lambda names: " ".join(names) or "sweep")
def test_help_reads_cleanly_at_80_columns(names):
    text = _help_at_80(*names)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "`" not in text, text  # no reST markup (``sweep run``), no code references
    # The description is wrapped by rich, not by the docstring's own line breaks: a line ends
    # early only where its paragraph ends (the next word would not have fitted).
    description = text.split("╭", 1)[0].splitlines()
    lines = [line.strip() for line in description[description.index(
        next(line for line in description if "Usage:" in line)) + 1:]]
    for line, following in zip(lines, lines[1:], strict=False):
        if line and following:
            assert len(line) + 1 + len(following.split()[0]) > _TEXT_WIDTH, (line, following)


def test_sweep_help_lists_the_commands_in_the_order_of_a_users_day():
    text = _help_at_80()
    listed = re.findall(r"^│ ([a-z][a-z-]+) ", text.split("Commands", 1)[1], re.M)
    assert listed[:9] == ["run", "validate", "plan", "results", "ui", "dashboard", "analyze",
                          "train", "sample"]
    assert sorted(listed) == sorted(GROUP.commands)


@pytest.mark.parametrize("names", [(), ("run",), ("analyze", "scaling")], ids=" ".join)
def test_dash_h_is_help(names):
    assert _help_at_80(*names, flag="-h") == _help_at_80(*names)


def test_version_prints_the_installed_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"sweep {importlib.metadata.version('transformer-sweep')}\n"


def test_shell_completion_is_offered_and_completes_commands(monkeypatch):
    help_text = _help(*())
    assert "--install-completion" in help_text and "--show-completion" in help_text
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")  # no shell probe
    script = CliRunner().invoke(app, ["--show-completion", "bash"], prog_name="sweep")
    assert script.exit_code == 0 and "_SWEEP_COMPLETE=complete_bash" in script.stdout
    for words, expected in (("sweep ru", "run"), ("sweep analyze sc", "scaling")):
        done = CliRunner().invoke(app, [], prog_name="sweep", env={
            "_SWEEP_COMPLETE": "complete_bash", "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1)})
        assert done.stdout.split() == [expected], done.output
