"""Functions several test modules share (importable as ``testsupport``: tests/ is on sys.path).

Fixtures live in ``conftest.py``; plain functions a test calls live here.
"""

import math
import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (a server started next may take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Hoffmann et al. 2022 (Chinchilla), eq. 10: L(N, D) = E + A / N^alpha + B / D^beta.
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def law(n, d, p=CHINCHILLA):
    """The loss of ``n`` parameters trained on ``d`` tokens under the law ``p``."""
    return p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]


def same_3_digits(value, truth):
    """Agree to 3 significant digits: within half a unit of the third digit of the truth."""
    return abs(value - truth) <= 0.5 * 10 ** (math.floor(math.log10(abs(truth))) - 2)


class FailingAfter:
    """An MLflow client whose server goes away after ``n`` writes (as requests reports it)."""

    def __init__(self, client, n):
        self.client, self.n = client, n

    def __getattr__(self, name):
        attr = getattr(self.client, name)
        if name not in ("log_batch", "log_text", "set_terminated", "set_tag"):
            return attr

        def call(*args, **kwargs):
            if self.n <= 0:
                raise ConnectionError("Max retries exceeded with url: /api/2.0/mlflow/runs "
                                      "(Connection refused)")
            self.n -= 1
            return attr(*args, **kwargs)

        return call


def isoflop_frame(p=CHINCHILLA, budgets=(1e18, 1e19, 1e20, 1e21), k=4.0, sizes=9, noise=0.01,
                  seed=0, drift=(1.0, 1.0)):
    """A synthetic IsoFLOP study of the law ``p``: one row per (budget, size), D = C / (6N).

    At each budget the sizes are ``sizes`` log-spaced over [c N_opt / k, c N_opt k], the
    centre factor c moving log-linearly from ``drift[0]`` at the first budget to ``drift[1]`` at
    the last; losses carry log-normal noise of ``noise`` (seeded numpy RNG). Columns as a
    points frame: ``trial`` (row number), ``n_params``, ``n_tokens``, ``budget_flops``,
    ``loss``.
    """
    import numpy as np
    import pandas as pd

    a, b = p["alpha"], p["beta"]
    g = (a * p["A"] / (b * p["B"])) ** (1 / (a + b))
    centres = np.geomspace(drift[0], drift[1], len(budgets))
    rows = [(c, n) for c, s in zip(budgets, centres, strict=True)
            for n in s * g * (c / 6) ** (b / (a + b)) * np.geomspace(1 / k, k, sizes)]
    c = np.array([r[0] for r in rows])
    n = np.array([r[1] for r in rows])
    d = c / (6 * n)
    loss = law(n, d, p) * np.exp(np.random.default_rng(seed).normal(0.0, noise, c.size))
    frame = pd.DataFrame({"trial": np.arange(c.size), "n_params": n, "n_tokens": d,
                          "budget_flops": c, "loss": loss})
    frame.attrs.update(source="synthetic", excluded={}, n_params_convention="total")
    return frame


def n_opt(c, p=CHINCHILLA):
    """The law's compute-optimal N at ``c`` FLOPs (Hoffmann et al. 2022 eq. 4, C = 6ND)."""
    a, b = p["alpha"], p["beta"]
    return (a * p["A"] / (b * p["B"])) ** (1 / (a + b)) * (c / 6) ** (b / (a + b))


def fault_study_spec(tmp_path, name, *, n_trials=6, **sections):
    """Write ``spec.yaml``: a 6-trial random search of tiny models, each trial 50,000 tokens.

    Long enough trials for a fault to land mid-trial; ``sections`` update the spec's top-level
    sections (``search={...}`` is merged into the search section, others replace theirs).
    """
    import yaml

    spec = {
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=200000",
        "model": {"vocab_size": 16, "seq_len": 32, "n_layers": 1, "n_heads": 2,
                  "d_model": {"int": [32, 64], "step": 8}},
        "train": {"tokens": 50000, "batch_size": 8, "lr": {"float": [1e-3, 1e-2], "log": True},
                  "eval_tokens": 1024, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none",
                   "n_trials": n_trials, "seed": 0, **sections.pop("search", {})},
        **sections,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def journal_trials(out_dir, name):
    """The Optuna trials of study ``name`` in ``out_dir``'s journal; [] before it exists."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    journal = out_dir / "optuna.journal"
    if not journal.is_file():
        return []
    storage = JournalStorage(JournalFileBackend(str(journal)))
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials()
    except KeyError:
        return []


def tiny_spec(name, **sections):
    """The smallest valid study spec (one 2-step trial of a 1-layer model on synthetic data), as
    a dict; each of ``sections`` is merged into the base's section (dicts) or replaces it."""
    spec = {
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8, "device": "cpu"},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 1},
    }
    for key, value in sections.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return spec


def cli_probe(heavy):
    """A ``python -c`` script: run ``sweep ARGS...`` in-process, then print one JSON line with
    the exit code and which of the modules ``heavy`` got imported (``seen``: every module the
    command imported). Its exit handler keeps a refusal from ending the process before it
    prints (`sweep.cli.end_refusal`)."""
    return f"""
import atexit, runpy, sys
atexit.register(lambda: None)
sys.argv = ["sweep", *sys.argv[1:]]
code = None
try:
    runpy.run_module("sweep.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
seen = set(sys.modules)  # what the command imported (not json, imported below to print)
loaded = sorted(m for m in {tuple(heavy)!r} if m in seen)
import json
print(json.dumps({{"code": code, "loaded": loaded}}))
"""


def start_study(tmp_path, spec, *flags):
    """``sweep run SPEC --out tmp_path/out --quiet FLAGS`` as a child process (pipes, text), with
    this checkout on its path and one OpenMP thread."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "sweep.cli", "run", str(spec), "--out", str(tmp_path / "out"),
         "--quiet", *flags], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
