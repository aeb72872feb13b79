"""``train.lr: {from_study: ...}``: a learning rate from a hand-written hparams analysis.

The law's numbers are chosen here (vertex: 4 C^-0.125, band: 2 C^-0.1), so eta_opt(C) at a
trial's C = 6 N D is known exactly; N is the cost model's parameter count, D the tokens the
trial trains (whole steps of batch_size x seq_len = 16 tokens).
"""

import json
from pathlib import Path

import pytest
import yaml
from testsupport import tiny_spec
from typer.testing import CliRunner

from sweep import space
from sweep.cli import app
from sweep.spec import SpecError, load_spec, parse_spec
from sweep.spec.from_study import FromStudyError, record_law, resolve_lr, stored_law
from sweep.train.config import resolve_budget
from sweep_models.cost import param_count

ROOT = Path(__file__).resolve().parents[3]
ANALYSIS = {"kind": "hparams", "study": "src", "band": 0.0025, "budgets": [1e6, 1e8],
            "verdict": {"lr": "vertex"},
            "fits": [{"hparam": "lr", "method": "band", "coef": 2.0, "exponent": -0.1,
                      "intervals": {"exponent": [-0.2, 0.0]}},
                     {"hparam": "lr", "method": "vertex", "coef": 4.0, "exponent": -0.125,
                      "intervals": {"exponent": [-0.15, -0.1]}},
                     {"hparam": "batch_size", "method": "band", "coef": 0.3,
                      "exponent": 0.33, "intervals": {}}]}


def source(tmp_path, analysis=ANALYSIS):
    """An hparams study's folder holding only its journal and its analysis file."""
    folder = tmp_path / "src"
    (folder / "analysis").mkdir(parents=True)
    (folder / "optuna.journal").touch()
    (folder / "analysis" / "hparams.json").write_text(json.dumps(analysis))
    return folder


def spec_data(folder, lr=None, **train):
    data = tiny_spec("later", search={"sampler": "tpe"})
    data["train"].pop("steps")
    data["train"].update({"tokens": 1600, "lr": lr or {"from_study": str(folder)}, **train})
    return data


def eta(model, tokens, coef=4.0, exponent=-0.125):
    return coef * (6.0 * param_count(model) * tokens) ** exponent


def test_each_trials_lr_is_eta_opt_at_its_budget_times_its_factor(tmp_path):
    folder = source(tmp_path)
    tokens = {"choice": [1600, 160000]}  # 100 and 10,000 steps of 16 tokens
    spec, notes = resolve_lr(parse_spec(spec_data(folder, tokens=tokens)))
    assert notes == [] and spec.train["lr"].law.estimator == "vertex"  # the verdict
    for d in (1600, 160000):
        model, train = space.configs_from_params(spec, {"train.tokens": d})
        assert train.lr == pytest.approx(eta(model, d), rel=1e-12)
        _, doubled = space.configs_from_params(spec, {"train.tokens": d, "lr.factor": 2.0})
        assert doubled.lr == pytest.approx(2 * eta(model, d), rel=1e-12)
    with pytest.raises(space.InvalidConfig, match=r"lr\.factor=2\.5 is outside"):
        space.configs_from_params(spec, {"train.tokens": 1600, "lr.factor": 2.5})
    band, _ = resolve_lr(parse_spec(spec_data(folder, {"from_study": str(folder),
                                                       "estimator": "band"})))
    model, train = space.configs_from_params(band, {})
    assert train.lr == pytest.approx(eta(model, 1600, 2.0, -0.1), rel=1e-12)


def test_the_sampler_draws_the_factor_within_the_width(tmp_path):
    spec, _ = resolve_lr(parse_spec(spec_data(source(tmp_path), {"from_study": str(
        tmp_path / "src"), "width": 3})))
    drawn = [p["lr.factor"] for p in space.sample_params(spec, 50, seed=0)]
    assert min(drawn) >= 1 / 3 and max(drawn) <= 3 and min(drawn) < 0.6 and max(drawn) > 1.7


def test_validate_names_the_law_and_the_lr_range_at_both_budgets(tmp_path):
    folder = source(tmp_path)
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump(spec_data(folder, tokens={"choice": [1600, 160000]})))
    res = CliRunner().invoke(app, ["validate", str(path), "--samples", "4"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert f"train.lr from study 'src' ({folder / 'analysis' / 'hparams.json'})" in text
    assert "eta_opt = 4 C^-0.1250, b in [-0.1500, -0.1000], estimator vertex" in text
    model, _ = space.configs_from_params(parse_spec(spec_data(folder, lr=1e-3)), {})
    for d, which in ((1600, "smallest"), (160000, "largest")):
        c, lr = 6.0 * param_count(model) * d, eta(model, d)
        assert (f"at C={c:.3g} FLOPs: lr in [{lr / 2:.4g}, {lr * 2:.4g}] (eta_opt {lr:.4g}) "
                f"(the {which} budget)") in text
    res = CliRunner().invoke(app, ["validate", str(path), "--samples", "4", "--json"])
    record = json.loads(res.stdout)["lr_law"]
    assert record["lr_opt"] == pytest.approx([eta(model, 1600), eta(model, 160000)])
    assert record["estimator"] == "vertex" and record["sampled"] is True


def test_validate_warns_of_a_budget_far_beyond_the_fit(tmp_path):
    folder = source(tmp_path, {**ANALYSIS, "budgets": [1e2, 1e3]})
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump(spec_data(folder)))
    res = CliRunner().invoke(app, ["validate", str(path), "--samples", "2"])
    assert res.exit_code == 0, res.output
    assert "beyond the fitted budgets [100, 1e+03]; eta_opt there is an extrapolation" in \
        " ".join(res.stderr.split())


def _hparams_study_without_analysis(tmp_path, section="hparams: {budgets: [1, 2]}\n"):
    folder = tmp_path / "src"
    stored = folder / "mlartifacts" / "0a1b2c" / "artifacts"  # as MLflow lays out a run's
    stored.mkdir(parents=True)
    (folder / "mlflow.db").touch()
    (stored / "spec.yaml").write_text("name: src\n" + section)
    return folder


@pytest.mark.parametrize("case, lr, message", [
    ("missing", {"from_study": "nowhere-at-all"},
     "train.lr.from_study: no study 'nowhere-at-all': neither"),
    ("no-study", {"from_study": "{tmp}"}, "is not a study's folder"),
    ("not-hparams", {"from_study": "{tmp}/src"}, "is not an hparams study"),
    ("not-analysed", {"from_study": "{tmp}/src"}, "run `sweep analyze hparams {tmp}/src` first"),
    ("no-lr-law", {"from_study": "{tmp}/src"}, "holds no learning-rate law"),
    ("estimator", {"from_study": "{tmp}/src", "estimator": "vertex"},
     "train.lr.estimator: the analysis"),
])
def test_a_source_without_a_law_is_refused_naming_the_field(tmp_path, case, lr, message):
    if case == "not-hparams":
        _hparams_study_without_analysis(tmp_path, "scaling: {budgets: [1, 2]}\n")
    elif case == "not-analysed":
        _hparams_study_without_analysis(tmp_path)
    elif case == "no-lr-law":
        source(tmp_path, {**ANALYSIS, "fits": ANALYSIS["fits"][2:]})
    elif case == "estimator":
        source(tmp_path, {**ANALYSIS, "fits": ANALYSIS["fits"][:1]})
    lr = {k: v.replace("{tmp}", str(tmp_path)) for k, v in lr.items()}
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump(spec_data(tmp_path, lr)))
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "o")]):
        res = CliRunner().invoke(app, command)
        assert res.exit_code == 2, res.output
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message.replace("{tmp}", str(tmp_path)) in \
            " ".join(res.stderr.split()), res.stderr
        assert not (tmp_path / "o").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("lr, train, search, message", [
    ({"width": 1}, {}, {}, "train.lr.width: Input should be greater than 1"),
    ({"low": 1e-3, "high": 1e-2}, {}, {}, "train.lr: from_study takes the range from the "
                                          "study's fit"),
    ({"float": [1e-3, 1e-2]}, {}, {}, "remove float"),
    ({}, {"seconds": 5}, {}, "train.seconds: train.lr: {from_study} needs each trial's tokens"),
    ({}, {}, {"sampler": "grid"}, "search.sampler: the grid sampler needs finite axes"),
])
def test_a_bad_from_study_field_is_refused_by_the_spec(tmp_path, lr, train, search, message):
    data = spec_data(tmp_path, {"from_study": "src", **lr}, **train)
    if train:
        data["train"].pop("tokens")
    data["search"].update(search)
    with pytest.raises(SpecError, match=None) as info:
        parse_spec(data)
    assert message in str(info.value) and len(str(info.value).splitlines()) == 2


def test_from_study_is_for_the_learning_rate_only(tmp_path):
    data = spec_data(tmp_path, 1e-3)
    data["model"]["d_model"] = {"from_study": "src"}
    with pytest.raises(SpecError, match="model.d_model: from_study gives a learning rate only"):
        parse_spec(data)


def test_a_resume_keeps_the_law_it_started_with_and_says_the_source_changed(tmp_path):
    folder, out = source(tmp_path), tmp_path / "out"
    out.mkdir()
    spec, notes = resolve_lr(parse_spec(spec_data(folder)), out)
    record_law(spec, out)
    started = spec.train["lr"].law
    assert notes == [] and stored_law(out) == (str(folder), started)
    changed = {**ANALYSIS, "fits": [{**ANALYSIS["fits"][1], "coef": 9.0},
                                    *ANALYSIS["fits"][:1]]}
    (folder / "analysis" / "hparams.json").write_text(json.dumps(changed))
    fresh, _ = resolve_lr(parse_spec(spec_data(folder)))
    assert fresh.train["lr"].law.coef == 9.0  # a new study would take the new fit
    resumed, notes = resolve_lr(parse_spec(spec_data(folder)), out)
    assert resumed.train["lr"].law == started  # a resume keeps the old one, and says so
    (note,) = notes
    assert "changed since this study started" in note and "keeps the law it started with: " \
        "eta_opt = 4 C^-0.1250 (vertex)" in note
    model, train = space.configs_from_params(resumed, {})
    assert train.lr == pytest.approx(eta(model, 1600), rel=1e-12)
    with pytest.raises(FromStudyError, match="train.lr.from_study: this study started with"):
        resolve_lr(parse_spec(spec_data(folder, {"from_study": str(folder),
                                                 "estimator": "band"})), out)


def test_a_grid_kinds_points_train_at_eta_opt_itself(tmp_path):
    data = yaml.safe_load((ROOT / "studies" / "scaling-isoflop.yaml").read_text())
    data["train"]["lr"] = {"from_study": str(source(tmp_path))}
    spec, _ = resolve_lr(parse_spec(data))
    assert not spec.kind.samples_lr_factor
    for corner in space.corner_params(spec):  # the smallest and the largest budget's points
        assert "lr.factor" not in corner
        model, train = space.configs_from_params(spec, corner)
        tokens = resolve_budget(train, model).total_tokens
        assert train.lr == pytest.approx(eta(model, tokens), rel=1e-12)


def test_a_submitted_spec_ships_with_its_law(tmp_path):
    """The cluster does not see this machine's source study: the law travels in the file."""
    from sweep.cluster.submission import shipped_spec

    folder = source(tmp_path)
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump(spec_data(folder)))
    spec, _ = resolve_lr(load_spec(path))
    with shipped_spec(path, spec) as shipped:
        (folder / "analysis" / "hparams.json").unlink()  # gone, as on the cluster
        there, notes = resolve_lr(load_spec(shipped / "later.yaml"))
    assert there.train["lr"].law == spec.train["lr"].law and notes == []
    model, train = space.configs_from_params(there, {})
    assert train.lr == pytest.approx(eta(model, 1600), rel=1e-12)
