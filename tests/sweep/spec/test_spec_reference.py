"""The spec's JSON Schema and field reference: true to the loader, and committed up to date."""

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import SpecError, load_spec
from sweep.spec.loader import read_yaml
from sweep.spec.reference import json_schema, reference_markdown

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "studies").glob("*.yaml")) + sorted((ROOT / "docker").glob("*.yaml"))
REGENERATE = ("regenerate it: sweep schema --markdown > docs/spec-reference.md; "
              "sweep schema > docs/study-spec.schema.json")


def _validator():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_committed_reference_and_schema_are_up_to_date():
    assert (ROOT / "docs" / "spec-reference.md").read_text() == reference_markdown(), REGENERATE
    committed = json.loads((ROOT / "docs" / "study-spec.schema.json").read_text())
    assert committed == json_schema(), REGENERATE


def test_sweep_schema_prints_the_schema_and_the_reference():
    printed = CliRunner().invoke(app, ["schema"])
    assert printed.exit_code == 0 and json.loads(printed.stdout) == json_schema()
    markdown = CliRunner().invoke(app, ["schema", "--markdown"])
    assert markdown.exit_code == 0 and markdown.stdout == reference_markdown()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_spec_is_valid_under_the_schema(path):
    load_spec(path)  # and under the loader
    errors = [e.message for e in _validator().iter_errors(read_yaml(path.read_text()))]
    assert not errors, errors


GOOD = """\
name: s
data: builtin:python-stdlib
model: {d_model: {int: [32, 64], step: 32}, n_heads: 2, attn_pattern: local,
        attn_sparsity: 0.5}
train: {tokens: 1.0e4, lr: {float: [1.0e-4, 1.0e-2], log: true}, schedule: wsd}
search: {n_trials: 2}
"""


@pytest.mark.parametrize(("old", "new"), [
    ("n_heads: 2", "n_head: 2"),                     # unknown model field
    ("log: true", "log: maybe"),                     # a domain's log is a bool
    ("attn_sparsity: 0.5", "attn_sparsity: 1.5"),    # outside [0, 1)
    ("attn_pattern: local", "attn_pattern: {choice: local}"),  # a choice is a list
    ("n_trials: 2", "n_trials: 0"),                  # search.n_trials >= 1
    ("data: builtin:python-stdlib", "data: stdlib"),  # no scheme
    ("search: {n_trials: 2}", "serach: {n_trials: 2}"),  # unknown section
])
def test_what_the_loader_refuses_the_schema_refuses(tmp_path, old, new):
    assert not list(_validator().iter_errors(read_yaml(GOOD)))
    text = GOOD.replace(old, new)
    assert text != GOOD
    (tmp_path / "spec.yaml").write_text(text)
    with pytest.raises(SpecError):
        load_spec(tmp_path / "spec.yaml")
    assert list(_validator().iter_errors(read_yaml(text)))


def test_a_train_choice_the_loader_leaves_to_validate_is_refused_by_the_schema():
    # load_spec leaves TrainConfig's str choices to `sweep validate`, which builds the configs.
    assert list(_validator().iter_errors(read_yaml(GOOD.replace("wsd", "step"))))


def test_the_reference_lists_every_field_with_its_default_and_rule():
    text = reference_markdown()
    assert "| `attn_sparsity` | float | 0 | 0 <= value < 1 |" in text
    assert "| `n_trials` | int | 20 | >= 1 |" in text
    assert "| `schedule` | `cosine` \\| `linear` \\| `constant` \\| `wsd` | `cosine` |" in text
    for heading in ("## `model`", "## `train`", "## `search.pbt`", "## `scaling.ladder[]`"):
        assert heading in text
