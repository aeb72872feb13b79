"""The program imports only the module of the command it runs (`sweep.cli.COMMAND_MODULES`)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testsupport import cli_probe, tiny_spec

from sweep.cli import COMMAND_MODULES

ROOT = Path(__file__).resolve().parents[3]

_REGISTERED = """
import importlib, json, sys
import typer.main
from sweep.cli.common import app

seen, out = set(), {}
for module in sys.argv[1:]:
    importlib.import_module(f"sweep.cli.{module}")
    names = set(typer.main.get_command(app).commands)
    out[module] = sorted(names - seen)
    seen = names
print(json.dumps(out))
"""


def _run(code, *args, cwd=None):
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120, env={"PYTHONPATH": str(ROOT),
                                                                "PATH": "/usr/bin:/bin"})
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_each_module_registers_exactly_the_commands_mapped_to_it():
    modules = sorted(set(COMMAND_MODULES.values()))
    registered, _ = _run(_REGISTERED, *modules)
    expected = {m: sorted(c for c, mod in COMMAND_MODULES.items() if mod == m) for m in modules}
    assert registered == expected


def test_the_full_app_has_every_command_and_no_other():
    import typer.main

    from sweep.cli import app

    assert set(typer.main.get_command(app).commands) == set(COMMAND_MODULES)


#: `cli_probe`, printing which command modules (of ``MODULES``) the command line imported.
_LOADED = cli_probe(()).replace(
    'print(json.dumps({"code": code, "loaded": loaded}))',
    'print(json.dumps({"code": code, "loaded": sorted({m.split(".")[2] for m in sys.modules '
    'if m.startswith("sweep.cli.") and m.split(".")[2] in MODULES})}))')


@pytest.mark.parametrize("command", ["validate", "run", "submit", "estimate"])
def test_a_command_line_imports_only_its_commands_module(tmp_path, command):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**tiny_spec("lazy"), "search": "x"}))
    args = {"validate": [path], "run": [path, "--out", tmp_path / "out"],
            "submit": [path, "--address", "http://127.0.0.1:9"],
            "estimate": ["--preset", "no-such-preset"]}[command]
    modules = sorted(set(COMMAND_MODULES.values()))
    result, stderr = _run(f"MODULES = {modules!r}\n" + _LOADED, command, *args, cwd=tmp_path)
    assert result["code"] == 2, stderr
    assert result["loaded"] == [COMMAND_MODULES[command]], stderr


def test_help_and_an_unknown_command_see_every_command(tmp_path):
    modules = sorted(set(COMMAND_MODULES.values()))
    result, stderr = _run(f"MODULES = {modules!r}\n" + _LOADED, "vlidate", cwd=tmp_path)
    assert result["code"] == 2 and "Did you mean 'validate'" in stderr, stderr
    assert result["loaded"] == modules
