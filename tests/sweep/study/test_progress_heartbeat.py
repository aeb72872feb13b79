"""Progress without a terminal: heartbeat lines; PBT changes shown as the summary shows them."""

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from sweep.schema import TrialState
from sweep.study.progress import ProgressView, TrialRow, format_params


def _console(terminal=False):
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=300), out


def _rows():
    return [
        TrialRow(3, TrialState.COMPLETE, {"train.lr": 0.001}, 4096, 2.5, 2.4),
        TrialRow(4, TrialState.RUNNING, {"train.lr": 0.002}, 120_000, 3.1234),
        TrialRow(5, TrialState.RUNNING, {"train.lr": 0.003}, 0),
    ]


def test_a_log_gets_a_heartbeat_line_every_interval_with_each_running_trial():
    console, out = _console()
    with ProgressView("s", 10, console=console, progress_every_s=0.05) as view:
        view.update(_rows())
        time.sleep(0.4)
    beats = [line for line in out.getvalue().splitlines() if "running:" in line]
    assert len(beats) >= 3
    assert re.match(r"^\[ +0m00s\] 1/10 done: 1 complete, .*; 2 running; best val_loss 2\.4000; "
                    r"running: trial 4 \(tokens 120,000, val_loss 3\.1234\), "
                    r"trial 5 \(tokens 0, val_loss -\)$", beats[0]), beats[0]


def test_no_heartbeat_on_a_terminal_when_quiet_or_turned_off():
    for kwargs, terminal in (({}, True), ({"quiet": True}, False),
                             ({"progress_every_s": 0}, False)):
        console, out = _console(terminal)
        with ProgressView("s", 10, console=console, **{"progress_every_s": 0.05, **kwargs}) \
                as view:
            view.update(_rows())
            time.sleep(0.25)
        assert "running: trial" not in out.getvalue(), kwargs


def test_pbt_changes_show_the_initial_and_current_value():
    assert format_params({"train.lr": 0.001, "model.dropout": 0.1},
                         mutated={"train.lr": 0.0031}) == "lr=0.001->0.0031 dropout=0.1"
    console, out = _console()
    row = TrialRow(7, TrialState.RUNNING, {"train.lr": 0.001}, 500, 3.0,
                   mutated={"train.lr": 0.0031})
    view = ProgressView("s", 2, console=console, progress_every_s=0)
    view.update([row])
    assert view.heartbeat().endswith("trial 7 (tokens 500, val_loss 3.0000, lr->0.0031)")
    row.state, row.best_val_loss = TrialState.COMPLETE, 2.9
    view.update([row])
    assert "lr=0.001->0.0031" in out.getvalue()


@pytest.mark.slow  # a `sweep run` process: its imports, a trial and the summary, 7 s
def test_sweep_run_in_a_log_prints_heartbeats(tmp_path, new_store):
    (tmp_path / "spec.yaml").write_text("""\
name: beats
data: synthetic:markov?order=1&vocab=8&seed=0&tokens=20000
model: {seq_len: 16, d_model: 16, n_heads: 2, n_layers: 1}
train: {steps: 100, batch_size: 4, eval_tokens: 64, device: cpu,
        lr: {float: [1.0e-3, 1.0e-2], log: true}}
search: {executor: optuna, sampler: random, pruner: none, n_trials: 1}
""")
    new_store(tmp_path / "out")
    # In a process of its own, its output a pipe (no terminal), as under a scheduler.
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    result = subprocess.run([sys.executable, "-m", "sweep.cli", "run", str(tmp_path / "spec.yaml"),
                             "--out", str(tmp_path / "out"), "--progress-every", "0.2"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    beats = [line for line in result.stdout.splitlines() if re.match(r"^\[ *\d+m\d\ds\] ", line)]
    assert beats, result.stdout
    assert any("running: trial 0 (tokens" in line for line in beats), beats


def test_the_summary_reads_pbt_final_values_from_the_runs_tags(tmp_path, new_store):
    from mlflow import MlflowClient

    from sweep.schema import mutation_key
    from sweep.tracking import mutated_params

    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    experiment = client.create_experiment("pbt")
    mutated = client.create_run(experiment, tags={mutation_key("train.lr"): "0.0031",
                                                  mutation_key("donor"): "2"}).info.run_id
    plain = client.create_run(experiment).info.run_id
    found = mutated_params(uri, [mutated, plain])
    assert found == {mutated: {"train.lr": 0.0031}, plain: {}}
    assert format_params({"train.lr": 0.001}, mutated=found[mutated]) == "lr=0.001->0.0031"
