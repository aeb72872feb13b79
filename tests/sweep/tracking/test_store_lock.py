"""Several drivers opening one fresh SQLite tracking store at once: one creates and migrates it
under the store lock, the others wait and find it ready."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

ROOT = Path(__file__).resolve().parents[3]

#: A driver's first steps against the store, as ``sweep run`` takes them: check the store file
#: (`check_stores`, which must not mistake a store another driver is migrating for a foreign
#: file), open it (`ensure_store`), create its experiment and a run. It imports MLflow, says it
#: is ready, and waits for the go file, so that all of them open the store together.
_DRIVER = r"""
import sys, time
from pathlib import Path
from mlflow import MlflowClient
from sweep.spec import parse_spec
from sweep.study.preflight import check_stores
from sweep.tracking import ensure_store
uri, name, ready, go = sys.argv[1:5]
spec = parse_spec({"name": name, "data": "synthetic:markov?order=1&vocab=16&seed=0",
                   "model": {"vocab_size": 16}, "train": {"steps": 1},
                   "tracking": {"uri": uri}})
Path(ready).touch()
while not Path(go).exists():
    time.sleep(0.005)
check_stores(spec)
ensure_store(uri)
check_stores(spec)
client = MlflowClient(uri)
client.create_run(client.create_experiment(name))
"""


@pytest.mark.slow
def test_four_drivers_open_one_fresh_store_at_once(tmp_path):
    db = tmp_path / "shared" / "mlflow.db"
    uri = f"sqlite:///{db}"
    go = tmp_path / "go"
    names = [f"study-{i}" for i in range(4)]
    procs = [subprocess.Popen([sys.executable, "-c", _DRIVER, uri, name,
                               str(tmp_path / f"ready-{name}"), str(go)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                              "MLFLOW_LOGGING_LEVEL": "WARNING"})
             for name in names]
    try:
        while not all((tmp_path / f"ready-{n}").exists() for n in names):
            assert all(p.poll() is None for p in procs), "a driver ended before the start"
            time.sleep(0.01)
        go.touch()
        errs = [p.communicate(timeout=300)[1] for p in procs]
        results = [(p.returncode, err) for p, err in zip(procs, errs, strict=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for code, err in results:
        assert code == 0, err
        assert "Traceback" not in err, err
    client = MlflowClient(uri)
    studies = {e.name: e.experiment_id for e in client.search_experiments()
               if e.name != "Default"}
    assert sorted(studies) == names
    for experiment_id in studies.values():
        assert len(client.search_runs([experiment_id])) == 1
    assert (db.parent / "mlflow.db.lock").is_file()
