"""The package layout's rules: one spelling of every schema name, no import cycle."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import sweep
from sweep import schema
from sweep.train.config import TrainConfig

SWEEP = Path(sweep.__file__).parent


def _schema_names() -> set[str]:
    """Every state, tag, attribute, config key and metric name `sweep.schema` defines.

    Names that are also config field names (``tokens`` is a budget field, ``lr`` a train
    field) are left out: the code spells those fields as themselves.
    """
    names = {s.value for s in schema.TrialState}
    for key, value in vars(schema).items():
        if key.startswith(("TAG_", "ATTR_", "CONFIG_", "METRIC_", "JOB_")) and \
                isinstance(value, str):
            names.add(value)
    names.update(schema.COST_METRICS, schema.RESULT_METRICS, schema.EVAL_METRICS)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    return names - fields


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def test_schema_names_are_spelled_only_in_the_schema_module():
    names = _schema_names()
    assert {"COMPLETE", "sweep.state", "val_loss", "best_val_loss", "sweep_run_id"} <= names
    found = []
    for path in sorted(SWEEP.rglob("*.py")):
        if path == SWEEP / "schema.py":
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in skip and node.value in names:
                found.append(f"{path.relative_to(SWEEP.parent)}:{node.lineno}: {node.value!r}")
    assert not found, "spell these with sweep.schema's names:\n" + "\n".join(found)


def test_the_check_sees_a_literal(tmp_path):
    """The check above finds a state literal when one is there (it is not vacuous)."""
    tree = ast.parse('state = "PRUNED"\n')
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert set(literals) & _schema_names() == {"PRUNED"}


def _modules() -> list[str]:
    names = ["sweep", "sweep_models"]
    for package in (sweep, importlib.import_module("sweep_models")):
        names += [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
                  if not m.name.endswith(".__main__")]  # runs the CLI when imported
    return names


def _imports(name: str) -> set[str]:
    """Project modules that module ``name`` imports at module level (not inside functions)."""
    spec = importlib.util.find_spec(name)
    tree = ast.parse(Path(spec.origin).read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports do not run
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            known = set(_modules())
            for alias in node.names:  # `from pkg import submodule` depends on the submodule
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    known = set(_modules())
    return {m for m in out if m in known and m != name}


def test_every_module_imports_and_there_is_no_import_cycle():
    modules = _modules()
    assert len(modules) > 40
    for name in modules:
        importlib.import_module(name)
    # Edges are the imports written at module level; a package's own __init__ importing its
    # submodules is one direction, so a submodule importing its package's __init__ (``from
    # sweep.spec import X`` inside sweep/spec/) closes a cycle and is reported.
    graph = {name: _imports(name) for name in modules}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep):], dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    sys.setrecursionlimit(10_000)
    for name in modules:
        if name not in state:
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_models_never_imports_sweep():
    for name in _modules():
        if name.startswith("sweep_models"):
            assert not {m for m in _imports(name) if m == "sweep" or m.startswith("sweep.")}, name


def _mapped_paths(text: str) -> list[str]:
    paths = []
    for line in text.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            paths += [p for p in re.findall(r"`([^`]+)`", first) if "/" in p]
    return paths


def test_the_maps_name_only_paths_that_exist():
    root = SWEEP.parent
    readme = (root / "README.md").read_text()
    architecture = (root / "docs" / "architecture.md").read_text()
    assert "docs/architecture.md" in readme
    for text in (readme, architecture):
        paths = _mapped_paths(text)
        assert len(paths) > 10
        missing = [path for path in paths if not (root / path).exists()]
        assert not missing, missing


def test_every_sweep_package_is_in_the_architecture_page():
    architecture = (SWEEP.parent / "docs" / "architecture.md").read_text()
    for path in sorted(SWEEP.rglob("*.py")):
        rel = path.relative_to(SWEEP.parent).as_posix()
        if path.name == "__init__.py":
            rel = rel.rsplit("/", 1)[0] + "/"
            if rel == "sweep/":
                continue
        folder = rel.rsplit("/", 1)[0] + "/"
        assert rel in architecture or path.name in architecture and folder in architecture, rel


def test_python_m_sweep_cli_runs_the_cli():
    import subprocess

    result = subprocess.run([sys.executable, "-m", "sweep.cli", "--help"], capture_output=True,
                            text=True, timeout=120, cwd=SWEEP.parent)
    assert result.returncode == 0, result.stderr
    assert "validate" in result.stdout and "run" in result.stdout
