"""A Ray study asking for GPUs per trial on a local Ray where this machine has none: refused
(exit 2) unless ``sweep run --allow-cpu`` runs its trials on CPU."""

import pytest
import yaml
from typer.testing import CliRunner

import sweep.study.preflight as preflight_module
from sweep.cli import app
from sweep.spec import parse_spec
from sweep.study.preflight import PreflightError, check_gpus, local_gpus_missing


def spec_dict(executor="ray", gpus=5):
    search = {"executor": executor, "sampler": "random", "n_trials": 1}
    search.update({"scheduler": "none"} if executor == "ray" else {"pruner": "none"})
    return {
        "name": "gpus",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu"},
        "search": search,
        "resources": {"gpus_per_trial": gpus},
    }


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(preflight_module, "no_cuda_driver", lambda: True)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_gpus_on_a_local_ray_without_a_gpu_are_refused(no_gpu):
    with pytest.raises(PreflightError) as info:
        check_gpus(parse_spec(spec_dict()))
    message = str(info.value)
    assert message.startswith("resources.gpus_per_trial=5: this machine has no GPU")
    assert "--allow-cpu" in message
    with pytest.raises(PreflightError):  # ray.init(address="local"): a Ray on this machine
        check_gpus(parse_spec(spec_dict(gpus=0.5)), "local")


def test_what_is_not_decided_here_passes(no_gpu, monkeypatch):
    assert local_gpus_missing(parse_spec(spec_dict(gpus=0))) is None
    assert local_gpus_missing(parse_spec(spec_dict(executor="optuna"))) is None
    # A cluster's GPUs are its own, known once Ray connects.
    assert local_gpus_missing(parse_spec(spec_dict()), "head:6379") is None
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert local_gpus_missing(parse_spec(spec_dict())) is None


def test_an_empty_cuda_visible_devices_hides_the_gpus(monkeypatch):
    monkeypatch.setattr(preflight_module, "no_cuda_driver", lambda: False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert local_gpus_missing(parse_spec(spec_dict())) is None  # Ray decides
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "CUDA_VISIBLE_DEVICES is empty" in local_gpus_missing(parse_spec(spec_dict()))


def test_run_refuses_and_writes_nothing(no_gpu, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_dict()))
    result = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "resources.gpus_per_trial=5: this machine has no GPU" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_allow_cpu_runs_the_trials_without_gpus_and_says_so(no_gpu, tmp_path, monkeypatch):
    import sweep.study

    monkeypatch.chdir(tmp_path)
    seen = []

    def run_study(spec, **kwargs):  # stands in for the study: what would it be given?
        seen.append(spec)
        raise PreflightError("stopped before the study")

    monkeypatch.setattr(sweep.study, "run_study", run_study)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_dict()))
    result = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "out"),
                                      "--allow-cpu"])
    assert "stopped before the study" in result.output
    (given,) = seen
    assert given.resources.gpus_per_trial == 0
    notes = [line for line in result.output.splitlines() if "--allow-cpu" in line]
    assert notes == ["note: resources.gpus_per_trial=5: this machine has no GPU (no NVIDIA or "
                     "ROCm driver found); --allow-cpu: the trials run on CPU"]


def test_allow_cpu_changes_nothing_where_no_fallback_is_needed(monkeypatch):
    from sweep.cli.study import _on_cpu_without_gpus

    monkeypatch.setattr(preflight_module, "no_cuda_driver", lambda: True)
    spec = parse_spec(spec_dict())
    assert _on_cpu_without_gpus(spec, "head:6379") is spec
    optuna_spec = parse_spec(spec_dict(executor="optuna"))
    assert _on_cpu_without_gpus(optuna_spec, None) is optuna_spec
