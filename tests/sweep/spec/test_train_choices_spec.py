"""Train fields with a fixed set of choices: a spec's value outside it is refused by the spec."""

import pytest
import yaml
from typer.testing import CliRunner

from sweep.cli import app
from sweep.train.config import CHOICE_FIELDS

SPEC = {
    "name": "train-choices",
    "data": "synthetic:markov?vocab=16&tokens=20000",
    "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
    "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 1},
}


def test_the_train_choice_fields_are_read_from_the_annotations():
    assert CHOICE_FIELDS["schedule"] == ("cosine", "linear", "constant", "wsd")
    assert CHOICE_FIELDS["precision"] == ("auto", "fp32", "bf16")


@pytest.mark.parametrize("form", ["fixed", "choice"])
@pytest.mark.parametrize("field", sorted(CHOICE_FIELDS))
def test_sweep_validate_refuses_a_value_outside_a_train_choice_field(tmp_path, field, form):
    allowed = CHOICE_FIELDS[field]
    value = "step" if form == "fixed" else {"choice": [allowed[0], "step"]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "train": {"tokens": 100000, field: value}}))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    problems = [line.strip() for line in result.output.splitlines()
                if line.strip().startswith("train.")]
    where = f"train.{field}" if form == "fixed" else f"train.{field}.choice[1]"
    assert problems == [f"{where}: 'step' is not one of {', '.join(allowed)}"]
