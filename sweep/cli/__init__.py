"""The ``sweep`` command line: one module per command group, registered on one Typer app.

Bad input (a spec, a flag, a file) exits with status 2 and one message naming what is wrong,
before anything is written. Each command's work lives in its package; these modules only parse
flags and print, importing the heavy packages (torch, MLflow, Optuna) inside the command that
needs them so that ``sweep validate`` answers fast.

The command line runs without pydantic plugins unless ``PYDANTIC_DISABLE_PLUGINS`` is set:
finding them reads the entry points of every installed distribution, about 15 ms of a refusal's
CPU time in an environment with MLflow, Ray and torch installed.
"""

import os

os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from sweep.cli import analyze, cluster, coord, estimate, plan, results, spec, study, train
from sweep.cli.common import app

__all__ = ["analyze", "app", "cluster", "coord", "estimate", "plan", "results", "spec", "study",
           "train"]
