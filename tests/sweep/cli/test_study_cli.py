"""Bad input to ``sweep run``, ``sweep validate`` and ``sweep worker``: exit 2, one message,
nothing written, and refused before torch, MLflow or Optuna is imported."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testsupport import cli_probe, tiny_spec
from typer.testing import CliRunner

import sweep.study.preflight as preflight_module
from sweep.cli import app
from sweep.spec import parse_spec
from sweep.study.preflight import PreflightError, check_inputs

ROOT = Path(__file__).resolve().parents[3]


def spec_dict(**sections):
    return tiny_spec("cli-study", **sections)


def write_spec(tmp_path, data):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def invoke(*args, **kwargs):
    result = CliRunner().invoke(app, [str(a) for a in args], **kwargs)
    return result, " ".join(result.output.split())


# ------------------------------------------------------------- refused before heavy imports
_PROBE = cli_probe(("torch", "mlflow", "optuna"))


@pytest.mark.parametrize("command", ["run", "validate", "worker"])
@pytest.mark.parametrize("case", ["type", "tracking-scheme", "missing-data", "no-valid-config",
                                  "cuda"])
def test_bad_input_is_refused_before_torch_mlflow_or_optuna_is_imported(tmp_path, command,
                                                                       case):
    if case == "cuda" and not preflight_module.no_cuda_driver():
        pytest.skip("this machine has a CUDA driver")
    data = {
        "type": spec_dict(model={"seq_len": "eight"}),
        "tracking-scheme": spec_dict(tracking={"uri": "ftp://example.com/store"}),
        "missing-data": spec_dict(data="text:/nonexistent/corpus.txt"),
        "no-valid-config": spec_dict(constraints={"max_params": 10}),
        "cuda": spec_dict(train={"device": "cuda"}),
    }[case]
    args = [command, str(write_spec(tmp_path, data))]
    if command != "validate":
        args += ["--out", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 2, proc.stderr
    # Pricing the space draws its random configs with Optuna's samplers (light); the spec's own
    # errors come before even that.
    allowed = ["optuna"] if case == "no-valid-config" else []
    assert result["loaded"] == allowed, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow  # a whole `sweep run` in a process of its own: 6.5 s
def test_the_probe_sees_heavy_imports_of_a_good_spec(tmp_path, new_store):
    """Not vacuous: a spec that passes the checks loads torch, MLflow and Optuna (to train)."""
    new_store(tmp_path / "out")
    args = ["run", str(write_spec(tmp_path, spec_dict())), "--out", str(tmp_path / "out"),
            "--quiet"]
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stderr
    assert {"torch", "mlflow", "optuna"} <= set(result["loaded"]), proc.stderr


# ------------------------------------------------------------------------ train.device cuda
@pytest.mark.parametrize("command", ["run", "validate", "worker"])
@pytest.mark.parametrize("driver", [False, True])
def test_cuda_device_without_cuda_exits_2_with_one_message(tmp_path, monkeypatch, command,
                                                           driver):
    """Without a driver it is refused before torch loads; with one, torch says no CUDA."""
    import torch

    monkeypatch.setattr(preflight_module, "no_cuda_driver", lambda: not driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "out"
    args = [command, write_spec(tmp_path, spec_dict(train={"device": "cuda"}))]
    result, text = invoke(*args, *([] if command == "validate" else ["--out", out]))
    assert result.exit_code == 2, result.output
    assert "train.device='cuda': no CUDA device is available on this machine" in text
    assert text.count("error:") == 1 and "Traceback" not in text
    assert isinstance(result.exception, SystemExit)  # typer.Exit(2), not an error
    assert not out.exists()


def test_cuda_among_the_choices_of_train_device_is_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight_module, "no_cuda_driver", lambda: True)
    spec = parse_spec(spec_dict(train={"device": {"choice": ["cpu", "cuda:1"]}}))
    with pytest.raises(PreflightError, match=r"train.device='cuda:1': no CUDA device"):
        check_inputs(spec)
    check_inputs(spec, device="cpu")  # --device replaces the spec's devices


# ----------------------------------------------------------------------- tracking.uri scheme
def test_unknown_tracking_scheme_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    path = write_spec(tmp_path, spec_dict(tracking={"uri": "ftp://user:secret@host/x"}))
    for command, extra in (("run", ["--out", out]), ("validate", []), ("worker", ["--out", out])):
        result, text = invoke(command, path, *extra)
        assert result.exit_code == 2, result.output
        assert "tracking.uri" in text and "'ftp'" in text and "sqlite" in text and "http" in text
        assert "secret" not in text
        assert not (tmp_path / "a").exists()


def test_tracking_scheme_from_the_environment_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "s3://bucket/mlflow")
    result, text = invoke("run", write_spec(tmp_path, spec_dict()), "--out", tmp_path / "out")
    assert result.exit_code == 2 and "MLFLOW_TRACKING_URI" in text and "'s3'" in text
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("uri", ["sqlite:///x/mlflow.db", "http://127.0.0.1:PORT",
                                 "postgresql+psycopg2://u@h/db", "file:///tmp/mlruns",
                                 "./mlruns", "/abs/mlruns"])
def test_tracking_uris_mlflow_opens_pass(uri):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as listening:  # an http URI must be listened at
        uri = uri.replace("PORT", str(listening.getsockname()[1]))
        check_inputs(parse_spec(spec_dict(tracking={"uri": uri})))


# ---------------------------------------------------------------------------- data, clean-up
def test_validate_refuses_a_missing_corpus(tmp_path):
    result, text = invoke("validate", write_spec(tmp_path, spec_dict(data="tokens:/no/such")))
    assert result.exit_code == 2 and "'/no/such' does not exist" in text


def test_preflight_removes_every_folder_it_created(tmp_path):
    """A corpus too short for the models is found after the output folder is made."""
    out = tmp_path / "runs" / "deep" / "study"
    data = spec_dict(data="synthetic:markov?order=1&vocab=16&tokens=20")
    result, text = invoke("run", write_spec(tmp_path, data), "--out", out)
    assert result.exit_code == 2 and "seq_len + 1" in text, result.output
    assert not (tmp_path / "runs").exists()
