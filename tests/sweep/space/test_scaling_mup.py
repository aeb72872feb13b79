"""A scaling study under muP: every shape of the IsoFLOP grid builds with one base width."""

from pathlib import Path

import yaml
from typer.testing import CliRunner

from sweep.cli import app
from sweep.kinds.scaling import shapes
from sweep.space import configs_from_params
from sweep.spec import parse_spec
from sweep_models import parametrization as par

STUDY = Path(__file__).resolve().parents[3] / "studies" / "scaling-isoflop.yaml"


def mup_data():
    data = yaml.safe_load(STUDY.read_text())
    data["model"].update(parametrization="mup", base_d_model=64)
    return data


def test_every_grid_shape_builds_under_one_base_width():
    spec = parse_spec(mup_data())
    labels = shapes.all_labels(spec)
    assert len(labels) == 4 * 24  # every budget x every width of the size rule
    for label in labels:
        model, train = configs_from_params(spec, {shapes.SCALING_POINT: label})
        assert (model.parametrization, model.base_d_model) == ("mup", 64)
        # the one tuned lr, scaled per shape by the parametrization: hidden matrices lr * 64 / d
        assert par.lr_mult(model, "hidden") == 64 / model.d_model
        assert train.lr == spec.train["lr"]


def test_validate_says_what_the_parametrization_means_for_the_grid(tmp_path):
    path = tmp_path / "iso-mup.yaml"
    path.write_text(yaml.safe_dump({**mup_data(), "name": "iso-mup"}))
    result = CliRunner().invoke(app, ["validate", str(path), "--samples", "4"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "parametrization mup (base d_model 64): one tuned train.lr serves every size" in text
    result = CliRunner().invoke(app, ["validate", str(STUDY), "--samples", "4"])
    assert "parametrization sp: the best train.lr drifts with width" in " ".join(
        result.output.split())
