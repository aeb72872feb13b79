"""The ``scaling:`` section: defaults, the fields it owns, and one message per broken rule."""

import copy

import pytest
import yaml
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import SpecError, parse_spec

BASE = {
    "name": "iso",
    "data": "builtin:python-stdlib",
    "model": {"seq_len": 64},
    "train": {"batch_size": 16, "lr": 3e-3},
    "scaling": {"budgets": [6e11, 2e11, 2e12], "sizes_per_budget": 5,
                "rule": {"d_model": {"min": 16, "max": 96, "step": 8}, "n_layers": 2,
                         "d_head": 8}},
}


def spec_with(**changes):
    data = copy.deepcopy(BASE)
    for path, value in changes.items():
        *head, last = path.split("__")
        node = data
        for key in head:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def message(data):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return str(info.value)


def test_defaults_sort_budgets_and_turn_early_stopping_off():
    spec = parse_spec(BASE)
    sc = spec.scaling
    assert sc.budgets == [2e11, 6e11, 2e12]
    assert (sc.tokens_per_param, sc.span, sc.max_epochs, sc.recentre) == (20.0, 4.0, 4.0, True)
    assert (spec.search.pruner, spec.search.scheduler) == ("none", "none")
    assert spec.budget()[0] == "flops"
    explicit = parse_spec(spec_with(search__pruner="hyperband"))
    assert explicit.search.pruner == "hyperband"  # asked for: kept (validate warns)


@pytest.mark.parametrize(("changes", "expected"), [
    ({"model__d_model": 64}, "model.d_model: a scaling study takes every shape from "
                             "scaling.rule"),
    ({"model__d_head": 16}, "model.d_head: a scaling study takes every shape"),
    ({"train__tokens": 100000}, "train.tokens: a scaling study trains each shape for tokens"),
    ({"train__batch_size": {"choice": [8, 16]}}, "train.batch_size: must be fixed in a scaling"),
    ({"search__n_trials": 12}, "search.n_trials: a scaling study's trials are its grid points"),
    ({"search__objectives": ["val_loss", "n_params"]}, "search.objectives: a scaling study fits "
                                                       "val_loss only"),
    ({"scaling__budgets": [1e12, -3.0]}, "every budget must be a finite FLOP count > 0"),
    ({"scaling__budgets": [1e12, 1e12]}, "budgets must be distinct"),
    ({"scaling__sizes_per_budget": 2}, "scaling.sizes_per_budget"),
    ({"scaling__span": 1.0}, "scaling.span"),
    ({"scaling__rule__aspect": 32}, "give exactly one of aspect (d_model / n_layers) and "
                                    "n_layers"),
    ({"scaling__rule__d_head": 24}, "not divisible by d_head=24"),
    ({"scaling__rule__d_model": [16, 32]}, "2 widths: give at least 3 distinct positive widths"),
    ({"scaling__rule__d_model": {"min": 64, "max": 16, "step": 8}},
     "scaling.rule.d_model: range {min, max, step}: max=16 is below min=64"),
    ({"scaling__rule__d_model": [8, 16, "x"]}, "scaling.rule.d_model: list of widths: entry 3: "
                                               "Input should be a valid integer"),
    ({"scaling__rule__d_model": "wide"}, "'wide': give a list of widths or a range"),
    ({"scaling__rule__n_layers": [1, 2]}, "n_layers has 2 entries for 11 widths"),
    ({"scaling__ladder": [{"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}]},
     "give exactly one of rule (a size rule) and ladder"),
])
def test_broken_rules_are_named(changes, expected):
    assert expected in message(spec_with(**changes))


def test_ladder_rules():
    rung = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}
    base = spec_with(scaling__rule=None)
    assert "ladder has 2 shapes" in message(spec_with(scaling__rule=None,
                                                      scaling__ladder=[rung, rung]))
    base["scaling"]["ladder"] = [rung, rung, rung]
    assert "ladder lists a shape twice" in message(base)
    base["scaling"]["ladder"] = [{**rung, "n_heads": 3}, rung, {**rung, "d_model": 64}]
    assert "d_model=32 is not divisible by n_heads=3" in message(base)


def test_pbt_is_refused():
    data = spec_with(search__executor="ray", search__scheduler="pbt", search__sampler="random",
                     search__pbt={"perturbation_interval": 4096,
                                  "hyperparam_mutations": {"lr": {"float": [1e-4, 1e-2]}}})
    assert "search.scheduler: pbt mutates trials mid-run" in message(data)


runner = CliRunner()


def test_validate_prints_the_grid_and_warns_on_pruning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(spec_with(search__pruner="hyperband",
                                             scaling__tokens_per_param=40)))
    result = runner.invoke(app, ["validate", str(path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "IsoFLOP grid: 15 trials" in out
    for budget in ("2e+11", "6e+11", "2e+12"):
        assert f"C={budget}: centred on N*=" in out
    assert "prior: 40 tokens per parameter" in out
    assert "tokens/N" in out and "memory" in out
    assert "est. time" not in out and "no finished trials of this study" in out  # no dashes
    assert "warning: search.pruner=hyperband: early stopping removes points" in out
    assert not (tmp_path / "runs").exists()  # validate writes nothing


def _grid_cells(out):
    """The IsoFLOP grid's cells but the shape labels, row by row (continuation lines empty)."""
    lines = out[out.index("IsoFLOP grid"):].split("└", 1)[0].splitlines()
    rows = [line.split("│")[1:-1] for line in lines if line.startswith("│")]
    return [c.strip() for cells in rows for c in [cells[0], *cells[2:]] if c.strip()]


def test_the_grid_at_80_columns_shows_every_number_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "iso.yaml"
    # WSD branches add a column: eight in all, wider than 80 columns at their natural widths.
    path.write_text(yaml.safe_dump(spec_with(scaling__tokens_per_param=40, scaling__branches=True,
                                             train__schedule="wsd", train__warmup=4096)))
    wide = runner.invoke(app, ["validate", str(path)], terminal_width=200, env={"COLUMNS": "200"})
    narrow = runner.invoke(app, ["validate", str(path)], terminal_width=80, env={"COLUMNS": "80"})
    assert wide.exit_code == narrow.exit_code == 0, narrow.output
    table = narrow.output[narrow.output.index("IsoFLOP grid"):].split("└", 1)[0]
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "…" not in table
    assert _grid_cells(narrow.output) == _grid_cells(wide.output)
    assert any("," in cell for cell in _grid_cells(narrow.output))  # counts like 1,234,560


def test_validate_refuses_a_bad_scaling_spec(tmp_path):
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(spec_with(model__n_layers=2)))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "model.n_layers: a scaling study takes every shape from scaling.rule" in result.output


def test_a_scaling_spec_round_trips_through_its_stored_form():
    spec = parse_spec(BASE)
    again = parse_spec(spec.to_data())
    assert again == spec
    from sweep.study import with_overrides

    assert with_overrides(spec, executor="ray").search.executor == "ray"
    with pytest.raises(SpecError, match="search.n_trials: a scaling study's trials"):
        with_overrides(spec, n_trials=5)


def test_run_refuses_trials_for_a_scaling_study(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(BASE))
    result = runner.invoke(app, ["run", str(path), "--trials", "3"])
    assert result.exit_code == 2
    assert "--trials 3: a scaling study's trials are its grid points" in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("changes", "expected"), [
    ({"scaling__budgets": [1e9, 1.00001e9]}, "budgets 1e+09 differ only beyond 4 significant"),
    ({"scaling__budgets": [True, 3e9]}, "budgets are FLOP counts, not true/false"),
    ({"scaling__span": float("inf")}, "scaling.span"),
    ({"scaling__tokens_per_param": float("inf")}, "scaling.tokens_per_param"),
    ({"scaling__rule__d_ff_ratio": float("inf")}, "scaling.rule.d_ff_ratio"),
    ({"scaling__sizes_per_budget": 10**9}, "scaling.sizes_per_budget"),
    ({"scaling__rule__d_model": {"min": 8, "max": 800_000_000, "step": 8}},
     "100,000,000 widths: at most 1,000"),
    ({"scaling__rule__n_layers": 0}, "n_layers: every depth must be >= 1"),
    ({"scaling__rule__n_layers": None, "scaling__rule__aspect": 0.01}, "scaling.rule.aspect"),
])
def test_values_that_would_crash_or_hang_are_refused(changes, expected):
    assert expected in message(spec_with(**changes))


def test_validate_refuses_a_budget_that_cannot_make_a_curve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(spec_with(scaling__budgets=[1.0, 6e11, 2e12])))
    result = runner.invoke(app, ["validate", str(path)], terminal_width=200)
    assert result.exit_code == 2
    assert "scaling.budgets: C=1 has 0 trainable size(s), an IsoFLOP curve needs 3" in \
        result.output
    assert "less than one optimizer step" in result.output


def test_run_refuses_a_grid_the_corpus_cannot_serve_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(spec_with(
        data="synthetic:markov?order=1&vocab=16&seed=0&tokens=20000", model={"vocab_size": 16,
                                                                             "seq_len": 32},
        train={"batch_size": 8, "lr": 1e-2}, scaling__budgets=[1e11, 3e11, 1e12])))
    result = runner.invoke(app, ["run", str(path), "--quiet"], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "trainable size(s), an IsoFLOP curve needs 3" in result.output
    assert "over scaling.max_epochs=4" in result.output
    assert not (tmp_path / "runs").exists()


def test_worker_refuses_a_scaling_study(tmp_path):
    path = tmp_path / "iso.yaml"
    path.write_text(yaml.safe_dump(BASE))
    result = runner.invoke(app, ["worker", str(path)])
    assert result.exit_code == 2
    assert "a scaling study's grid points are queued by sweep run" in result.output


def test_a_changed_grid_cannot_resume_the_study():
    from sweep.spec.resume import ResumeError, check_resume_compatible

    old = parse_spec(BASE).to_data()
    more = parse_spec(spec_with(scaling__sizes_per_budget=6)).to_data()
    assert check_resume_compatible(old, more) == []  # the same points, more of them
    added = parse_spec(spec_with(scaling__budgets=[2e11, 6e11, 2e12, 6e12])).to_data()
    with pytest.raises(ResumeError, match="scaling.budgets changed from"):
        check_resume_compatible(old, added)
    plain = {k: v for k, v in old.items() if k != "scaling"}
    with pytest.raises(ResumeError, match="the scaling section was added"):
        check_resume_compatible(plain, old)
