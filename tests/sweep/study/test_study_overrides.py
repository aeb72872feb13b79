import pytest
from typer.testing import CliRunner

from sweep.cli import app
from sweep.spec import SpecError, load_spec
from sweep.study import with_overrides


@pytest.mark.parametrize(("study", "pruner", "scheduler"), [
    ("quickstart", "hyperband", "hyperband"),
    ("sparsity-temperature", "sha", "asha"),
])
def test_switching_executor_keeps_the_early_stopping_rule(study, pruner, scheduler):
    spec = load_spec(f"studies/{study}.yaml")
    other = "ray" if spec.search.executor == "optuna" else "optuna"
    switched = with_overrides(spec, executor=other, n_trials=3)
    assert switched.search.executor == other and switched.search.n_trials == 3
    optuna_side = switched if other == "optuna" else spec
    ray_side = switched if other == "ray" else spec
    assert optuna_side.search.pruner == pruner
    assert ray_side.search.scheduler == scheduler
    back = with_overrides(switched, executor=spec.search.executor)
    assert (back.search.pruner, back.search.scheduler) == (spec.search.pruner,
                                                           spec.search.scheduler)


def test_pbt_cannot_switch_to_optuna():
    with pytest.raises(SpecError, match="search.scheduler"):
        with_overrides(load_spec("studies/pbt.yaml"), executor="optuna")
    result = CliRunner().invoke(app, ["run", "studies/pbt.yaml", "--executor", "optuna"])
    assert result.exit_code == 2 and "search.scheduler" in result.output


def test_unknown_executor_flag_exits_2():
    result = CliRunner().invoke(app, ["run", "studies/quickstart.yaml", "--executor", "dask"])
    assert result.exit_code == 2 and "--executor" in result.output
