"""The Optuna executor's worker processes: ``search.parallel`` of them share the study's storage.

Worker processes die with the driver (``PR_SET_PDEATHSIG`` on Linux, and a parent check); a
worker that dies is replaced (its trial reconciled, `sweep.executors.optuna.recovery`) until
more than `MAX_WORKER_DEATHS` have died; Ctrl-C or SIGTERM stops every worker, each ending its
trial ``INTERRUPTED``.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any

import optuna

from sweep.executors.optuna.objective import create_study, optimize, trial_state
from sweep.executors.optuna.recovery import reconcile
from sweep.schema import ATTR_OWNER
from sweep.streams import guard_std_streams
from sweep.study.resume import StudyInterrupted
from sweep.study.trial import StudyContext
from sweep.tracking.faults import InfrastructureError
from sweep.tracking.owner import owner_pid

__all__ = ["MAX_WORKER_DEATHS", "supervise"]

#: Worker processes that may die (killed, out of memory) and be replaced before the study stops.
MAX_WORKER_DEATHS = 3


def _die_with_parent(parent_pid: int) -> None:
    """Exit when the driver ``parent_pid`` dies.

    On Linux the kernel sends SIGKILL (``prctl(PR_SET_PDEATHSIG)``); elsewhere, and as a
    fallback, a thread checks the parent every second.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # it died before the prctl took effect
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _sigterm_as_interrupt(signum: int, frame: Any) -> None:
    """A worker's SIGTERM (from the driver) or SIGINT: stop once, ignore any that follow."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _quiet_interrupts(unraisable: Any) -> None:
    """Drop an interrupt raised inside a finaliser, which Python can only print and ignore.

    The driver kills a worker that did not stop, and reconciles its trial.
    """
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _worker_main(ctx: StudyContext, n_trials: int, seed_offset: int, parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    guard_std_streams()  # the driver's stdout may be a pipe whose reader goes away
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    signal.signal(signal.SIGINT, _sigterm_as_interrupt)
    sys.unraisablehook = _quiet_interrupts
    try:
        optimize(create_study(ctx, seed_offset=seed_offset), ctx, n_trials)
    except KeyboardInterrupt:
        sys.exit(130)  # the trial is recorded INTERRUPTED; no traceback
    except InfrastructureError as err:
        print(f"worker {os.getpid()}: {err}", file=sys.stderr)
        sys.exit(3)



def _finished_by(study: optuna.Study, pid: int) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False)
               if owner_pid(t.user_attrs.get(ATTR_OWNER)) == pid and trial_state(t).finished)


def supervise(study: optuna.Study, ctx: StudyContext, n_trials: int, parallel: int, *,
               seed_base: int) -> None:
    """Run ``n_trials`` in ``parallel`` worker processes, replacing workers that die.

    A worker that exits with a non-zero code is reconciled (its trial ``INTERRUPTED`` and
    queued again) and replaced by one that runs what it had left. Ctrl-C or SIGTERM stops the
    workers (they end their trials ``INTERRUPTED``) and is raised again.

    Raises:
        StudyInterrupted: More than `MAX_WORKER_DEATHS` workers died.
    """
    mp = multiprocessing.get_context("spawn")  # no forked torch/MLflow state
    procs: dict[Any, int] = {}
    started = 0

    def launch(share: int) -> None:
        nonlocal started
        offset = seed_base + 100_003 * (started + 1)  # each worker its own draws
        proc = mp.Process(target=_worker_main,
                          args=(ctx, share, offset, os.getpid()), daemon=False)
        proc.start()
        procs[proc] = share
        started += 1

    for i in range(parallel):
        launch(n_trials // parallel + (1 if i < n_trials % parallel else 0))
    deaths: list[int] = []
    try:
        while procs:
            for proc in list(procs):
                proc.join(timeout=0.2)
                if proc.is_alive():
                    continue
                share = procs.pop(proc)
                if proc.exitcode == 0:
                    continue
                if proc.exitcode == 3:  # it stopped on an infrastructure fault, said on stderr
                    raise InfrastructureError(
                        "a worker process stopped on an infrastructure fault",
                        RuntimeError(f"worker {proc.pid} exited with code 3"))
                deaths.append(proc.exitcode)
                reconcile(ctx, study)
                left = share - _finished_by(study, proc.pid)
                if left <= 0:
                    continue
                if len(deaths) > MAX_WORKER_DEATHS:
                    raise StudyInterrupted(
                        f"{len(deaths)} worker processes died (exit codes {deaths}); the "
                        "study stopped with their trials interrupted; check memory and the "
                        "logs, then run the same command again to resume")
                launch(left)
    except BaseException:
        _stop_workers(procs)
        raise


def _stop_workers(procs: dict[Any, int], grace_s: float = 15.0) -> None:
    """SIGTERM every live worker (it ends its trial ``INTERRUPTED``), then SIGKILL stragglers."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()
