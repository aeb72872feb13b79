"""Malformed and hostile spec files: each is refused with one line naming what is wrong, by
``sweep validate``, ``sweep run`` and ``sweep worker`` alike, with nothing written.

Every file in ``hostile/`` starts with ``# expect: TEXT``: the field path (or, for a problem
of the whole file, the words) the one problem must contain. Files that cannot carry that line
(empty, over the size limit) are made here.
"""

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import SpecError, load_spec
from sweep.spec.loader import MAX_SPEC_BYTES

HOSTILE = Path(__file__).with_name("hostile")
FILES = sorted(HOSTILE.glob("*.yaml"))


def expectation(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode()
    assert first.startswith("# expect: "), f"{path.name}: no '# expect:' first line"
    return first.removeprefix("# expect: ")


def made_files(folder: Path) -> dict[Path, str]:
    """The cases that cannot live in the corpus, written into ``folder``."""
    empty = folder / "empty.yaml"
    empty.write_bytes(b"")
    large = folder / "oversize.yaml"
    with large.open("w") as f:  # valid YAML: only the size is wrong
        f.write("name: big\ndata: builtin:python-stdlib\ntrain: {tokens: 100000}\n")
        f.write("description: |\n" + ("  " + "x" * 77 + "\n") * (MAX_SPEC_BYTES // 80 + 1))
    return {empty: "the spec is empty", large: f"{MAX_SPEC_BYTES:,} bytes (1 MB)"}


def check_refused(path: Path, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(path)
    problems = info.value.problems
    assert len(problems) == 1, problems
    (problem,) = problems
    assert expected in problem, problem
    # one line; the longest is an unknown model key's, which lists the model's ~30 fields
    assert "\n" not in problem and len(problem) < 600, problem
    for mechanism in ("Traceback", "pydantic", "For further information", "errors.pydantic.dev",
                      "<unicode string>", "NoneType", "Field required"):
        assert mechanism not in problem, problem


def test_the_corpus_covers_the_common_mistakes():
    assert len(FILES) >= 40


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_each_corpus_file_is_refused_with_one_line_naming_the_field(path):
    check_refused(path, expectation(path))


def test_empty_and_oversize_files_are_refused_with_one_line(tmp_path):
    for path, expected in made_files(tmp_path).items():
        check_refused(path, expected)


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_validate_run_and_worker_refuse_every_corpus_file_alike(tmp_path, monkeypatch):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    cases = {path: expectation(path) for path in FILES}
    cases.update(made_files(inputs))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    corpus = listing(HOSTILE)
    runner = CliRunner()
    for path, expected in cases.items():
        messages = {}
        for command in ("validate", "run", "worker"):
            args = [command, os.fspath(path)]
            if command != "validate":
                args += ["--out", os.fspath(work / "out" / f"{path.stem}-{command}")]
            result = runner.invoke(app, args)
            assert result.exit_code == 2, (path.name, command, result.output)
            assert "Traceback" not in result.output, (path.name, command, result.output)
            errors = [line for line in result.output.splitlines() if line.startswith("error:")]
            assert len(errors) == 1, (path.name, command, result.output)
            messages[command] = " ".join(result.output.split())
            assert " ".join(expected.split()) in messages[command], \
                (path.name, command, result.output)
        # None of these needs data or a server: every command says the same.
        assert messages["run"] == messages["validate"] == messages["worker"], (path.name,
                                                                                messages)
    # No output folder, MLflow store or Optuna study anywhere.
    assert listing(work) == []
    assert listing(inputs) == ["empty.yaml", "oversize.yaml"]
    assert listing(HOSTILE) == corpus
