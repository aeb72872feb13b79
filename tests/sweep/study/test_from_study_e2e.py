"""An hparams study's fit feeding a later search: ``train.lr: {from_study: ...}`` end to end.

A tiny simulated hparams study (the ``chinchilla-lr`` law: eta_opt = 0.3118 C^-0.125, no
noise; 2 budgets x 5 learning rates, seconds), ``sweep analyze hparams``, then a simulated
search whose learning rate comes from that fit: every trial's logged ``train.lr`` is
eta_opt(C) x its ``lr.factor`` and lies in [eta_opt(C) / 2, eta_opt(C) x 2] at its own
C = 6 N D (N its ``n_params``, D its ``tokens``). Resumed after the source is analysed again,
the study says so and its new trials keep the law it started with.
"""

import json

import pytest
from testsupport import tiny_spec
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.tracking import find_study, read_trials

SIMULATE = {"law": "chinchilla-lr", "noise": 0.0, "seed": 0}


def hparams_spec():
    base = tiny_spec("hp-src", simulate=SIMULATE)
    base["model"] = {"vocab_size": 16, "seq_len": 8}
    base["train"] = {"batch_size": 2, "eval_tokens": 8, "device": "cpu"}
    base["search"] = {"executor": "optuna"}
    base["hparams"] = {"budgets": [1e8, 1e9], "lr": {"low": 1e-3, "high": 1e-1, "n": 5},
                       "shape": {"rule": {"d_model": [16, 24, 32], "aspect": 16,
                                          "d_head": 8}}}
    return parse_spec(base)


@pytest.mark.slow
def test_a_search_takes_its_lr_from_an_hparams_fit(tmp_path, new_store, capsys):
    new_store(tmp_path / "src")
    first = run_study(hparams_spec(), out_dir=tmp_path / "src", quiet=True)
    assert first.counts.get("COMPLETE") == 10, first.counts
    res = CliRunner().invoke(app, ["analyze", "hparams", str(tmp_path / "src"),
                                   "--bootstrap", "10", "--json"])
    assert res.exit_code == 0, res.output
    analysis = json.loads((tmp_path / "src" / "analysis" / "hparams.json").read_text())
    fit = next(f for f in analysis["fits"]
               if f["hparam"] == "lr" and f["method"] == analysis["verdict"]["lr"])
    assert fit["method"] == "vertex" and fit["exponent"] == pytest.approx(-0.125, abs=0.01)

    later = tiny_spec("later", simulate=SIMULATE,
                      search={"sampler": "random", "n_trials": 6})
    later["train"].pop("steps")
    later["train"].update({"tokens": {"choice": [1600, 16000]},
                           "lr": {"from_study": str(tmp_path / "src"), "width": 2}})
    uri = new_store(tmp_path / "later")
    summary = run_study(parse_spec(later), out_dir=tmp_path / "later", quiet=True)
    assert summary.counts.get("COMPLETE") == 6, summary.counts
    trials = read_trials(uri, *find_study(uri, "later"))
    assert len(trials) == 6
    for t in trials:
        c = 6.0 * t["metrics"]["n_params"] * t["metrics"]["tokens"]
        eta = fit["coef"] * c ** fit["exponent"]
        lr, factor = float(t["params"]["train.lr"]), float(t["params"]["lr.factor"])
        assert lr == pytest.approx(eta * factor, rel=1e-9)
        assert eta / 2 * (1 - 1e-12) <= lr <= eta * 2 * (1 + 1e-12)
    assert len({t["metrics"]["tokens"] for t in trials}) == 2  # both budgets drawn
    stored = json.loads((tmp_path / "later" / "lr-law.json").read_text())
    assert (stored["law"]["coef"], stored["law"]["exponent"]) == (fit["coef"], fit["exponent"])

    # The source analysed again (another law): the resumed study's new trials keep the old one.
    path = tmp_path / "src" / "analysis" / "hparams.json"
    path.write_text(json.dumps({**analysis, "fits": [{**f, "coef": 10 * f["coef"]}
                                                    for f in analysis["fits"]]}))
    later["search"]["n_trials"] = 8
    again = run_study(parse_spec(later), out_dir=tmp_path / "later", quiet=True)
    assert again.counts.get("COMPLETE") == 8, again.counts
    assert "changed since this study started" in capsys.readouterr().err
    trials = read_trials(uri, *find_study(uri, "later"))
    assert len(trials) == 8
    for t in trials:
        c = 6.0 * t["metrics"]["n_params"] * t["metrics"]["tokens"]
        lr, factor = float(t["params"]["train.lr"]), float(t["params"]["lr.factor"])
        assert lr == pytest.approx(fit["coef"] * c ** fit["exponent"] * factor, rel=1e-9)
