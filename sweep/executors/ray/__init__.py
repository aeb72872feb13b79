"""The Ray Tune executor.

A `Tuner` with `OptunaSearch` and a scheduler; trials in Ray actors on this machine or a
cluster. `fit` runs any Tune experiment of a study (a kind with its own, PBT, gives its plan).
"""

from sweep.executors.ray.connection import UnreachableClusterError, check_address, init_ray
from sweep.executors.ray.executor import run
from sweep.executors.ray.reporting import TuneReporter
from sweep.executors.ray.schedulers import make_scheduler
from sweep.executors.ray.tuning import Held, TunePlan, fit

__all__ = ["Held", "TunePlan", "TuneReporter", "UnreachableClusterError", "check_address", "fit",
           "init_ray", "make_scheduler", "run"]
