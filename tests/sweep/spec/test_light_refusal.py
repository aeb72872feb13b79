"""A spec is read and refused without the heavy libraries: importing `sweep.spec`, loading a
bad spec, and the CLI's refusal of it (``validate``, ``run``, ``worker``) load none of torch,
MLflow, Optuna, scipy, pandas, datasketch or numpy (``bench/reject.py`` times the same path)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testsupport import cli_probe, free_port, tiny_spec

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "mlflow", "optuna", "scipy", "pandas", "datasketch", "numpy")

GOOD = tiny_spec("light")

_LOAD = """
import json, sys
from sweep.spec import SpecError, load_spec
try:
    load_spec(sys.argv[1])
    code = 0
except SpecError:
    code = 2
print(json.dumps({"code": code, "loaded": sorted(m for m in HEAVY if m in sys.modules)}))
"""

_CLI = cli_probe(HEAVY)


def _bad_specs(tmp_path):
    cases = {
        "type": {**GOOD, "model": {**GOOD["model"], "seq_len": "eight"}},
        "rule": {**GOOD, "model": {**GOOD["model"], "n_heads": 3}},
        "data": {**GOOD, "data": "text:/nonexistent/corpus.txt"},
        "tracking": {**GOOD, "tracking": {"uri": "ftp://example.com/store"}},
        "vocab": {**GOOD, "model": {**GOOD["model"], "vocab_size": 8}},
        "no-server": {**GOOD, "tracking": {"uri": f"http://127.0.0.1:{free_port()}"}},
        "device": {**GOOD, "train": {**GOOD["train"], "device": "mps"}},
        "from-study": {**GOOD, "train": {**GOOD["train"],
                                         "lr": {"from_study": "/nonexistent/hparams"}}},
    }
    paths = {}
    for case, data in cases.items():
        paths[case] = tmp_path / f"{case}.yaml"
        paths[case].write_text(yaml.safe_dump(data))
    return paths


def _probe(code, args, cwd):
    proc = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{code}", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_loading_a_bad_spec_loads_no_heavy_library(tmp_path):
    path = _bad_specs(tmp_path)["type"]
    result, stderr = _probe(_LOAD, [path], tmp_path)
    assert result == {"code": 2, "loaded": []}, stderr


@pytest.mark.parametrize("command", ["validate", "run", "worker"])
def test_the_command_lines_refusal_loads_no_heavy_library(tmp_path, command):
    """Each bad spec is refused (exit 2, no traceback, nothing written) with none loaded."""
    for case, path in _bad_specs(tmp_path).items():
        args = [command, path] + ([] if command == "validate" else ["--out", tmp_path / "out"])
        result, stderr = _probe(_CLI, args, tmp_path)
        assert result == {"code": 2, "loaded": []}, (case, stderr)
        assert "Traceback" not in stderr and stderr.count("error:") == 1, (case, stderr)
        assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_the_probe_sees_a_heavy_library_when_one_is_loaded(tmp_path):
    """Not vacuous: the same probe reports numpy once the corpus module (numpy) is imported."""
    path = _bad_specs(tmp_path)["type"]
    result, stderr = _probe("import sweep.data.corpus\n" + _LOAD, [path], tmp_path)
    assert result == {"code": 2, "loaded": ["numpy"]}, stderr


#: The third-party packages the refusal path may load: the CLI (typer, shellingham), the
#: spec's model and parser (pydantic, YAML) and what they import. Not rich: the one ``error:``
#: line is written without it (about 30 ms of imports). A new package here adds its import to
#: every refusal ``bench/reject.py`` times.
LIGHT = {"annotated_doc", "annotated_types", "cython_runtime", "pydantic", "pydantic_core",
         "shellingham", "sweep", "sweep_models", "typer", "typing_extensions",
         "typing_inspection", "yaml"}

_PACKAGES = _CLI + """
print(json.dumps({"code": code, "loaded": sorted({
    m.split(".")[0] for m in seen
    if not m.startswith("_") and m.split(".")[0] not in sys.stdlib_module_names})}))
"""


@pytest.mark.parametrize("command", ["validate", "run", "worker", "submit"])
def test_the_refusal_loads_only_the_clis_and_the_specs_packages(tmp_path, command):
    path = _bad_specs(tmp_path)["rule"]
    args = [command, path] + (["--address", "http://127.0.0.1:9"] if command == "submit" else
                              [] if command == "validate" else ["--out", tmp_path / "out"])
    result, stderr = _probe(_PACKAGES, args, tmp_path)
    packages = set(result["loaded"])
    assert result["code"] == 2, stderr
    assert packages <= LIGHT, sorted(packages - LIGHT)
    assert {"sweep", "typer", "pydantic", "yaml"} <= packages  # the probe sees them


_BUILT = """
import json, os, sys
os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)
import sweep.cli
from pydantic import BaseModel
from sweep.kinds import kinds
from sweep.spec.sections import section_models

kinds()  # the built-in kinds' section models

def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)

ours = sorted({c.__module__ + "." + c.__qualname__ for c in subclasses(BaseModel)
               if c.__module__.startswith("sweep")})
built = sorted({c.__module__ + "." + c.__qualname__ for c in subclasses(BaseModel)
                if c.__module__.startswith("sweep") and c.__pydantic_complete__})
print(json.dumps({"ours": ours, "built": built, "sections": len(section_models()),
                  "plugins": os.environ.get("PYDANTIC_DISABLE_PLUGINS")}))
"""


def test_the_cli_builds_no_spec_model_before_it_validates_and_loads_no_pydantic_plugin(
        tmp_path):
    """Each spec model builds its validator on first use (``defer_build``): a model built at
    import is built again inside its parent, about 60 ms of every refusal. The CLI reads no
    pydantic plugin (finding them reads every installed distribution's entry points)."""
    out = subprocess.run([sys.executable, "-c", _BUILT], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    seen = json.loads(out.stdout)
    assert len(seen["ours"]) >= 15, seen["ours"]
    assert seen["built"] == []
    assert seen["plugins"] == "__all__"


_MODULES = _CLI + """
print(json.dumps({"code": code, "loaded": sorted(m for m in WATCHED if m in seen)}))
"""
#: The service's own modules a refusal at the spec's types has no use for: the search space,
#: the cost model and the grids' shapes (about 30 ms of a refusal's imports); pydantic's plugin
#: loader's importlib.metadata (`sweep.adapters.pydantic`); pickle (a corpus's meta.pkl); the
#: study kinds, whose sections are named without importing them (`sweep.kinds.kind_sections`);
#: the text corpus reader, the trainer's reporter and the simulated laws, each imported by
#: the one thing that needs it (a ``text:`` corpus, a trial, a ``simulate.law``); the corpus
#: URIs' parsers (a spec's fields need only the schemes' names, `sweep.data.schemes`).
WATCHED = ("sweep.space", "sweep_models.cost", "sweep.kinds.scaling.shapes", "rich",
           "importlib.metadata", "pickle", "sweep.kinds.scaling", "sweep.kinds.transfer",
           "sweep.kinds.hparams", "sweep.data.text", "sweep.train.reporter",
           "sweep.simulate.law", "sweep.data.uris")
#: What a refusal by the spec's models (an unknown section, a choice not listed) has no use
#: for besides: the cross-field rules and what they check by, the model and training configs
#: (a dataclass each, with the model's attention patterns and presets), the study folder's
#: layout and json.
FIELD_WATCHED = WATCHED + ("sweep.spec.rules", "sweep.spec.values", "sweep_models.config",
                           "sweep_models.patterns", "sweep_models.presets",
                           "sweep.train.config", "sweep.folder", "sweep.spec.from_study",
                           "json")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_refusal_at_the_specs_types_loads_no_space_cost_model_or_rich(tmp_path, command):
    path = _bad_specs(tmp_path)["type"]
    args = [command, path] + ([] if command == "validate" else ["--out", tmp_path / "out"])
    result, stderr = _probe(f"WATCHED = {WATCHED!r}\n" + _MODULES, args, tmp_path)
    assert result == {"code": 2, "loaded": []}, stderr
    assert stderr.startswith("error: ") and "seq_len" in stderr, stderr


@pytest.mark.parametrize("command", ["validate", "run", "worker"])
def test_a_refusal_by_the_specs_models_loads_no_rules_configs_or_folder(tmp_path, command):
    path = tmp_path / "sampler.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "search": {**GOOD["search"], "sampler": "anneal"}}))
    args = [command, path] + ([] if command == "validate" else ["--out", tmp_path / "out"])
    result, stderr = _probe(f"WATCHED = {FIELD_WATCHED!r}\n" + _MODULES, args, tmp_path)
    assert result == {"code": 2, "loaded": []}, stderr
    assert stderr.startswith("error: ") and "search.sampler" in stderr, stderr


def test_each_built_in_kinds_section_is_named_as_its_kind_names_it():
    """`kind_sections` names the built-in kinds' sections without importing them: the names
    it gives are the sections the imported kinds own, in the same order."""
    from sweep.kinds import kind_sections, kinds

    named = kind_sections()
    assert list(named) == [kind.section for kind in kinds() if kind.section]
    assert [load() for load in named.values()] == [kind for kind in kinds() if kind.section]


def test_a_built_in_kind_with_a_section_selects_by_its_section():
    """What lets `kind_of` leave a kind whose section a spec does not give unimported."""
    from sweep.kinds import _SECTIONED, StudyKind, kinds

    sectioned = [kind for kind in kinds() if type(kind).__module__ in _SECTIONED]
    assert [kind.name for kind in sectioned] == ["scaling", "transfer", "hparams"]
    assert all(type(kind).selects is StudyKind.selects for kind in sectioned)


def test_a_bad_section_loads_only_its_own_kind(tmp_path):
    """A section's problem is found with its kind's model; no other kind is imported."""
    path = tmp_path / "bad-section.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "transfer": {"widthz": [16, 32]}}))
    probe = f"WATCHED = {WATCHED!r}\n" + _MODULES
    result, stderr = _probe(probe, ["validate", path], tmp_path)
    assert result["code"] == 2, stderr
    assert result["loaded"] == ["sweep.kinds.transfer"], stderr
    assert "transfer.widthz" in stderr and "did you mean 'widths'" in stderr, stderr
