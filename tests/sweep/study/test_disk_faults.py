"""A full disk: refused at pre-flight, saying what is free and needed; mid-study, a pause."""

import errno
import shutil
import subprocess
from collections import namedtuple

import pytest

from sweep.spec import parse_spec
from sweep.study import PreflightError, run_study
from sweep.tracking import find_study, read_trials
from sweep.tracking.trial_run import TrialRun

Usage = namedtuple("Usage", "total used free")


def tiny(name, tokens=20000, **search):
    return parse_spec({
        "name": name,
        "data": f"synthetic:markov?order=1&vocab=16&seed=0&tokens={tokens}",
        "model": {"vocab_size": 16, "seq_len": 16, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "batch_size": 4, "lr": {"float": [1e-3, 1e-2], "log": True},
                  "eval_every": 1024, "eval_tokens": 256, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 4,
                   **search},
    })


def test_preflight_refuses_a_disk_without_room_and_says_what_is_needed(tmp_path, monkeypatch):
    monkeypatch.setattr("sweep.study.preflight.shutil.disk_usage",
                        lambda path: Usage(2**30, 2**30 - 10 * 2**20, 10 * 2**20))
    out = tmp_path / "runs" / "full"
    with pytest.raises(PreflightError) as info:
        run_study(tiny("disk-check"), out_dir=out, quiet=True)
    message = str(info.value)
    assert "the disk is full for this study: 10.0 MiB free, about 64.0 MiB needed" in message
    assert "store and artifacts 64.0 MiB" in message
    assert not (tmp_path / "runs").exists()  # nothing left behind


def test_preflight_counts_the_trial_checkpoints(tmp_path, monkeypatch):
    from sweep.study.preflight import checkpoint_bytes

    monkeypatch.setattr("sweep.study.preflight.shutil.disk_usage",
                        lambda path: Usage(2**30, 2**30 - 10 * 2**20, 10 * 2**20))
    spec = tiny("disk-ckpt", checkpoint_interval=1024, parallel=2)
    with pytest.raises(PreflightError) as info:
        run_study(spec, out_dir=tmp_path / "out", quiet=True)
    from sweep.space.sampling import build_configs, fixed_values
    from sweep_models.cost import estimate

    n_params = estimate(build_configs(spec, {**fixed_values(spec), "train.lr": 1e-3})[0]).n_params
    assert f"5 trial checkpoints {5 * checkpoint_bytes(n_params) / 2**20:,.1f} MiB" in str(
        info.value)


def small_disk(tmp_path):
    """A 1 MiB tmpfs mounted under ``tmp_path`` (unmount it after), or None if none mounts."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True)
    return mount if done.returncode == 0 else None


@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_a_corpus_cache_that_fills_the_disk_says_the_disk_is_full(tmp_path, monkeypatch, disk):
    mount = small_disk(tmp_path) if disk == "tmpfs" else None
    if disk == "tmpfs" and mount is None:
        pytest.skip("this machine cannot mount a tmpfs; the injected case covers it")
    if disk == "injected":  # numpy's short write ("N requested and M written", no errno)
        import sweep.data.cache as corpus_module

        real = corpus_module._write_split

        def short_write(tokens, path):
            def tofile(_self, _path):
                raise OSError(f"{tokens.nbytes} requested and 1048576 written")
            real(type("Tokens", (), {"tofile": tofile, "nbytes": tokens.nbytes})(), path)

        monkeypatch.setattr(corpus_module, "_write_split", short_write)
    out = (mount or tmp_path) / "out"
    try:
        with pytest.raises(PreflightError) as info:
            run_study(tiny("disk-corpus", tokens=3_600_000), out_dir=out, quiet=True)
        assert "the disk is full" in str(info.value) and "MiB free" in str(info.value)
        assert not out.exists()
    finally:
        if mount is not None:
            subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_a_disk_full_mid_study_interrupts_one_trial_and_the_study_goes_on(tmp_path,
                                                                         monkeypatch, new_store):
    real_report = TrialRun.report
    calls = {"n": 0}

    def report(self, tokens, metrics):
        calls["n"] += 1
        if calls["n"] == 6:  # the second trial's second evaluation: the disk is full once
            raise OSError(errno.ENOSPC, "No space left on device", "mlflow.db")
        return real_report(self, tokens, metrics)

    monkeypatch.setattr(TrialRun, "report", report)
    spec = tiny("disk-mid", fault_wait_s=60)
    new_store(tmp_path / "out")
    summary = run_study(spec, out_dir=tmp_path / "out", quiet=True)
    trials = read_trials(summary.tracking_uri, *find_study(summary.tracking_uri, spec.name))
    states = sorted(str(t["state"]) for t in trials)
    assert states == ["COMPLETE"] * 4 + ["INTERRUPTED"]
    interrupted = next(t for t in trials if str(t["state"]) == "INTERRUPTED")
    retry = next(t for t in trials if t["retry_of"] is not None)
    assert retry["retry_of"] == interrupted["trial"]
    assert {k: v for k, v in retry["params"].items() if k.startswith("train.lr")} == {
        k: v for k, v in interrupted["params"].items() if k.startswith("train.lr")}
    assert interrupted["fail_reason"] == "interrupted: the disk is full (mlflow.db)"
    assert summary.counts["COMPLETE"] == 4 and summary.counts["FAILED"] == 0
    from sweep.results import load_results

    frame = load_results(tmp_path / "out")  # sweep results says what was retried
    assert list(frame["retry_of"].dropna()) == [interrupted["trial"]]
    assert list(frame["state"]).count("INTERRUPTED") == 1
    shutil.rmtree(tmp_path / "out")


def fill(folder):
    """Write ``folder/fill`` until the disk is full; the file, for removal."""
    path = folder / "fill"
    with path.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 2**20)
                f.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return path


@pytest.mark.slow
def test_a_real_full_disk_stops_the_study_with_one_line_and_the_resume_counts_exactly(
        tmp_path, new_store):
    import os
    import sys
    import time
    from pathlib import Path

    import optuna
    import yaml
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    from sweep.schema import ATTR_PROGRESS

    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=90m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("this machine cannot mount a tmpfs")
    try:
        out = mount / "out"
        new_store(out)
        spec = tiny("disk-real", tokens=200000, fault_wait_s=0, seed=0).to_data()
        spec["train"].update(tokens=100000, eval_every=4096)
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
               "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "sweep.cli", "run", str(tmp_path / "spec.yaml"),
                   "--out", str(out), "--quiet"]
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        journal = out / "optuna.journal"
        deadline = time.monotonic() + 300
        while True:  # until a trial has reported an evaluation
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            if not journal.is_file():
                time.sleep(0.1)
                continue
            try:
                storage = JournalStorage(JournalFileBackend(str(journal)))
                trials = optuna.load_study(study_name="disk-real", storage=storage).get_trials()
            except (KeyError, FileNotFoundError):
                trials = []
            if any(ATTR_PROGRESS in t.user_attrs for t in trials):
                break
            time.sleep(0.1)
        filler = fill(mount)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, err
        assert "Traceback" not in err and "ERROR" not in err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stopped: study disk-real: ") and (
            "cannot write" in lines[0] or "the disk is full" in lines[0]), err
        filler.unlink()
        done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        uri = f"sqlite:///{out / 'mlflow.db'}"
        runs = read_trials(uri, *find_study(uri, "disk-real"))
        assert sorted(str(r["state"]) for r in runs) == ["COMPLETE"] * 4 + ["INTERRUPTED"]
        assert sorted(r["trial"] for r in runs) == list(range(5))
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(mount)], check=False)
