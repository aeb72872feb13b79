"""The Ray Tune executor.

A `Tuner` with `OptunaSearch` and a scheduler, or population-based training; trials in Ray actors on
this machine or a cluster.
"""

from sweep.executors.ray.connection import UnreachableClusterError, check_address, init_ray
from sweep.executors.ray.executor import run
from sweep.executors.ray.pbt import member_index
from sweep.executors.ray.reporting import TuneReporter
from sweep.executors.ray.schedulers import make_scheduler

__all__ = ["TuneReporter", "UnreachableClusterError", "check_address",
           "init_ray", "make_scheduler", "member_index", "run"]
