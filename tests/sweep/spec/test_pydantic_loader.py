"""The command line's pydantic runs without its plugin loader (`sweep.adapters.pydantic`)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pydantic

from sweep.adapters.pydantic import LOADER, LOADER_NAMES

ROOT = Path(__file__).resolve().parents[3]


def test_pydantic_imports_only_the_names_the_stand_in_loader_has():
    """An upgrade that imports another name from the loader fails here, not in the CLI."""
    imported = set()
    for path in Path(pydantic.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.endswith("plugin._loader") or (
                        node.module == "_loader" and path.parent.name == "plugin")):
                imported |= {alias.name for alias in node.names}
    assert imported == set(LOADER_NAMES)


_PROBE = f"""
import json, os, sys
import sweep.cli
from pydantic import BaseModel

class M(BaseModel):
    x: int

M(x=1)
print(json.dumps({{"metadata": "importlib.metadata" in sys.modules,
                  "loader": getattr(sys.modules[{LOADER!r}], "__file__", None) is not None}}))
"""


def _probe(env):
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                          **env})
    return json.loads(out.stdout)


def test_the_cli_builds_models_without_the_loader_or_importlib_metadata():
    assert _probe({}) == {"metadata": False, "loader": False}


def test_plugins_asked_for_load_through_pydantics_own_loader():
    assert _probe({"PYDANTIC_DISABLE_PLUGINS": "logfire"}) == {"metadata": True,
                                                               "loader": True}
