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


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
        or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST, *, inside_functions: bool) -> list[ast.AST]:
    """The import statements that run: at module level and, with ``inside_functions``, inside
    functions and methods too; never those under ``if TYPE_CHECKING:``."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                continue
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and (inside_functions
                                                                    or not in_function):
                found.append(child)
            visit(child, nested)

    visit(tree, False)
    return found


def _imports(name: str, *, inside_functions: bool = True) -> set[str]:
    """Project modules that module ``name`` imports, inside functions too unless told not to."""
    spec = importlib.util.find_spec(name)
    tree = ast.parse(Path(spec.origin).read_text())
    known = set(_modules())
    out = set()
    for node in _import_nodes(tree, inside_functions=inside_functions):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:  # `from pkg import submodule` depends on the submodule
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
    return {m for m in out if m in known and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[str]:
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
    for name in sorted(graph):
        if name not in state:
            visit(name)
    return cycles


def test_every_module_imports_and_there_is_no_import_cycle():
    modules = _modules()
    assert len(modules) > 40
    for name in modules:
        importlib.import_module(name)
    # Edges are every import that runs, inside functions too; a package's own __init__
    # importing its submodules is one direction, so a submodule importing its package's
    # __init__ (``from sweep.spec import X`` inside sweep/spec/) closes a cycle and is reported.
    cycles = _cycles({name: _imports(name) for name in modules})
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_sees_an_import_inside_a_function():
    tree = ast.parse("import a\ndef f():\n    import b\nif TYPE_CHECKING:\n    import c\n")
    names = [a.name for n in _import_nodes(tree, inside_functions=True) for a in n.names]
    assert names == ["a", "b"]
    assert _cycles({"a": {"b"}, "b": {"a"}}) == ["a -> b -> a"]


#: The most lines a module of ``sweep/`` or ``models/`` may hold, and a function.
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    root = SWEEP.parent
    return sorted([*(root / "sweep").rglob("*.py"), *(root / "models").rglob("*.py")])


def _long_functions(path: Path, limit: int) -> list[str]:
    rel = path.relative_to(SWEEP.parent).as_posix()
    return [f"{rel}:{node.name}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def test_modules_and_functions_stay_small():
    big = sorted(p.relative_to(SWEEP.parent).as_posix() for p in _sources()
                 if len(p.read_text().splitlines()) > MAX_MODULE_LINES)
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"
    long = sorted(name for p in _sources() for name in _long_functions(p, MAX_FUNCTION_LINES))
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_size_check_sees_a_long_function(tmp_path):
    path = SWEEP.parent / "sweep" / "_probe_long_function.py"
    assert not path.exists()
    try:
        path.write_text("def f():\n" + "    x = 1\n" * 5)
        assert _long_functions(path, 5) == ["sweep/_probe_long_function.py:f"]
        assert _long_functions(path, 6) == []
    finally:
        path.unlink()


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


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text())


def _outside(folder: str) -> list[Path]:
    return [p for p in sorted(SWEEP.rglob("*.py"))
            if not p.relative_to(SWEEP.parent).as_posix().startswith(folder)]


def _imports_of(library: str, tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that import ``library`` or one of its modules."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == library
                                                     for a in node.names)
            or isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == library]


def test_mlflow_is_used_only_through_sweep_tracking():
    """And its private parts in `sweep.adapters.mlflow`, which only `sweep.tracking` calls."""
    found = [f"{p.relative_to(SWEEP.parent)}:{line}" for p in _outside("sweep/tracking/")
             if p != SWEEP / "adapters" / "mlflow.py"
             for line in _imports_of("mlflow", _tree(p))]
    assert not found, "MLflow imported outside sweep/tracking:\n" + "\n".join(found)
    callers = [p.relative_to(SWEEP.parent).as_posix() for p in _outside("sweep/tracking/")
               if p != SWEEP / "adapters" / "mlflow.py" and "adapters.mlflow" in p.read_text()
               .replace("adapters import mlflow", "adapters.mlflow")]
    assert not callers, f"sweep.adapters.mlflow used outside sweep/tracking: {callers}"
    assert _imports_of("mlflow", ast.parse("from mlflow.entities import Run\nimport mlflow\n"))\
        == [1, 2]


def test_matplotlib_is_used_only_through_the_plotting_helper():
    """One backend choice: every figure takes pyplot from `sweep.plotting.pyplot`."""
    found = [f"{p.relative_to(SWEEP.parent)}:{line}" for p in _outside("sweep/plotting.py")
             for line in _imports_of("matplotlib", _tree(p))]
    assert not found, "take pyplot from sweep.plotting:\n" + "\n".join(found)
    assert _imports_of("matplotlib", ast.parse("import matplotlib.pyplot as plt\n"
                                               "from optuna.visualization import matplotlib\n"))\
        == [1]


#: Public names of the standard library that start with an underscore.
_PUBLIC_UNDERSCORED = {"_exit", "_replace", "_asdict", "_fields", "_make"}


def _own_names() -> set[str]:
    """Every name the project defines (functions, classes, attributes, variables)."""
    names = set()
    for path in [*SWEEP.rglob("*.py"), *(SWEEP.parent / "models").rglob("*.py")]:
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _private_uses(tree: ast.AST, own: set[str]) -> list[str]:
    """Private attributes and modules of other libraries that ``tree`` reaches into."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__") and node.attr not in own \
                and node.attr not in _PUBLIC_UNDERSCORED \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module not in (None, "__future__") \
                and any(part.startswith("_") for part in node.module.split(".")):
            found.append(f"{node.lineno}: from {node.module}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(("optuna.", "ray.")) and "._" in node.value:
            found.append(f"{node.lineno}: {node.value!r}")
    return found


def test_private_parts_of_other_libraries_are_used_only_in_the_adapters():
    own = _own_names()
    found = [f"{p.relative_to(SWEEP.parent)}:{use}" for p in _outside("sweep/adapters/")
             for use in _private_uses(_tree(p), own)]
    assert not found, "move these into sweep/adapters:\n" + "\n".join(found)
    probe = ast.parse("study._storage.get(t._trial_id)\nfrom ray._private import x\n"
                      "self._mine\nos._exit(1)\n")
    assert sorted(_private_uses(probe, own)) == ["1: ._storage", "1: ._trial_id",
                                                 "2: from ray._private"]


#: What names a study kind: the built-in kinds' sections and the PBT scheduler's name.
_KIND_NAMES = {"scaling", "transfer", "pbt", "search.pbt"}


def _kind_checks(tree: ast.AST) -> list[str]:
    """Where ``tree`` asks which kind a study is: a kind's section read or compared by name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _KIND_NAMES \
                and not (isinstance(node.value, ast.Name) and node.value.id == "sweep"):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Compare):
            found += [f"{node.lineno}: == {c.value!r}" for c in [node.left, *node.comparators]
                      if isinstance(c, ast.Constant) and c.value in _KIND_NAMES]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "section" and node.args \
                and isinstance(node.args[0], ast.Constant):
            found.append(f"{node.lineno}: section({node.args[0].value!r})")
    return found


def test_only_the_kinds_own_modules_ask_which_kind_a_study_is():
    found = [f"{p.relative_to(SWEEP.parent)}:{check}" for p in _outside("sweep/kinds/")
             for check in _kind_checks(_tree(p))]
    assert not found, "ask the study's kind (spec.kind) instead:\n" + "\n".join(found)
    probe = ast.parse('if spec.scaling is not None and s.scheduler == "pbt":\n'
                      '    spec.section("transfer")\nsweep.scaling.fit()\n')
    assert sorted(_kind_checks(probe)) == ["1: .scaling", "1: == 'pbt'", "2: section('transfer')"]


def test_the_command_line_loads_nothing_heavy_until_a_command_needs_it():
    """``sweep --help`` and a refused flag stay fast: the CLI's modules import no library."""
    import subprocess

    heavy = ("pydantic", "numpy", "scipy", "torch", "mlflow", "optuna", "ray", "datasketch",
             "pandas", "sweep.spec", "sweep.kinds")
    code = (f"import sys, sweep.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=SWEEP.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
