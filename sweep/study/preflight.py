"""What a study needs, checked before it writes anything.

Two light stages run first, before torch, MLflow or Optuna is loaded, so that bad input is
refused in well under a second (``bench/reject.py``):

- `check_inputs`: the training device, the tracking URI's scheme, the output folder's path and
  the corpus URI (scheme, parameters, paths; `sweep.data.check_corpus`), from the spec and the
  flags alone;
- `check_space`: that some configs of the space are valid and within the constraints, priced by
  the cost model (torch is loaded only once a config validates, for its device).

``sweep run`` and ``sweep worker`` call both right after reading the spec; `preflight` calls
them again (milliseconds), then checks the stores, the cluster and the corpus's content.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep.data import DataError, check_corpus
from sweep.folder import StudyFolder, out_problem
from sweep.schema import METRIC_N_PARAMS
from sweep.spec import ChoiceDomain, StudySpec
from sweep.study.light_checks import (
    TRACKING_SCHEMES,
    PreflightError,
    check_tracking_uri,
    check_vocab,
    largest_vocab,
)
from sweep.study.stores import store_problem
from sweep.train.cuda_probe import no_cuda_driver

if TYPE_CHECKING:
    from sweep.data import Corpus
    from sweep.space import SpaceSummary

__all__ = ["DEVICE_FORMS", "TRACKING_SCHEMES", "PreflightError", "check_device", "check_gpus",
           "check_inputs", "check_space", "check_stores", "check_vocab", "local_gpus_missing",
           "preflight"]

def _spec_devices(spec: StudySpec) -> list[str]:
    """The device strings ``train.device`` may take (a fixed value or a choice's options)."""
    value = spec.train.get("device", "auto")
    options = value.options if isinstance(value, ChoiceDomain) else [value]
    return [v for v in options if isinstance(v, str)]


#: The devices a study trains on: the cost model prices CPU and CUDA memory only
#: (`sweep_models.cost.memory`), so ``mps``, ``xpu`` and the like are refused before torch loads.
DEVICE_FORMS = "auto, cpu, cuda or cuda:N"


def check_device(source: str, value: str) -> None:
    """Refuse a device no study trains on (`DEVICE_FORMS`), or a CUDA device this machine lacks.

    Torch is loaded only for ``cuda`` where a CUDA driver is present.

    Raises:
        PreflightError: Naming ``source`` (``--device``, ``train.device``) and the rule.
    """
    if value in ("auto", "cpu"):
        return
    cuda = re.fullmatch(r"cuda(:\d+)?", value) is not None
    if not cuda and re.fullmatch(r"cpu(:\d+)?", value) is None:
        raise PreflightError(f"{source}={value!r}: not a device a study trains on; use "
                             f"{DEVICE_FORMS}")
    if cuda and no_cuda_driver():
        raise PreflightError(f"{source}={value!r}: no CUDA device is available on this machine "
                             "(no NVIDIA or ROCm driver found); use cpu or auto")
    import torch  # only for a device name that torch must judge

    from sweep.train.hardware import pick_device

    if cuda and not torch.cuda.is_available():
        raise PreflightError(f"{source}={value!r}: no CUDA device is available on this machine "
                             "(torch finds none); use cpu or auto")
    try:
        pick_device(value)
    except ValueError as exc:
        raise PreflightError(f"{source}: {exc}") from None


def check_stores(spec: StudySpec, out: Path | None = None) -> None:
    """Refuse store files that exist and are not what the study would write there.

    `sweep.study.stores.store_problem` says what is wrong; files are only read.

    Raises:
        PreflightError: Naming ``search.storage`` or the tracking URI's source, the file and
            what it is.
    """
    problem = store_problem(spec, out)
    if problem is not None:
        raise PreflightError(problem)


def _local_ray(ray_address: str | None) -> bool:
    """Whether the study starts a Ray of its own on this machine (no cluster address)."""
    address = ray_address or os.environ.get("RAY_ADDRESS")
    return not address or address == "local"


def _no_local_gpu() -> str | None:
    """Why a Ray started here would find no GPU, found without torch; None if it may find one."""
    if no_cuda_driver():
        return "this machine has no GPU (no NVIDIA or ROCm driver found)"
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return "this machine shows Ray no GPU (CUDA_VISIBLE_DEVICES is empty)"
    return None


def local_gpus_missing(spec: StudySpec, ray_address: str | None = None) -> str | None:
    """Why a Ray study's ``resources.gpus_per_trial`` cannot be met here, or None.

    Decided only for a local Ray (no ``ray_address`` and no ``RAY_ADDRESS``, or ``local``):
    its GPUs are this machine's, and a machine with no CUDA driver
    (`sweep.train.cuda_probe.no_cuda_driver`, no torch needed) or an empty
    ``CUDA_VISIBLE_DEVICES`` has none. A remote cluster's GPUs are known only once Ray connects
    (``sweep.executors.ray.trial_resources``); a machine with a driver is left to Ray too.

    Returns:
        The reason (for a message), or None when the study asks for no GPU, is not a Ray
        study, runs on a cluster, or may find a GPU here.
    """
    if spec.search.executor != "ray" or not spec.resources.gpus_per_trial:
        return None
    if not _local_ray(ray_address):
        return None
    return _no_local_gpu()


def check_gpus(spec: StudySpec, ray_address: str | None = None) -> None:
    """Refuse a Ray study that asks for GPUs per trial on a local Ray with no GPU.

    See `local_gpus_missing` for what is decided here; ``sweep run --allow-cpu`` sets
    ``resources.gpus_per_trial`` to 0 instead (trials on CPU).

    Raises:
        PreflightError: Naming ``resources.gpus_per_trial`` and why this machine has no GPU.
    """
    reason = local_gpus_missing(spec, ray_address)
    if reason is not None:
        raise PreflightError(
            f"resources.gpus_per_trial={spec.resources.gpus_per_trial:g}: {reason}, and the "
            "study would run on a local Ray; add --allow-cpu to run the trials on CPU, or give "
            "--address (or RAY_ADDRESS) of a Ray cluster with GPUs")


def check_inputs(spec: StudySpec, out: Path | None = None, *, device: str | None = None,
                 ray_address: str | None = None, force_out: bool = False) -> None:
    """Check what the spec and flags name, without loading torch, MLflow or Optuna.

    The training device (``device``, the ``--device`` flag, else each value ``train.device``
    may take) is one a study trains on (`DEVICE_FORMS`; ``mps``, ``xpu``... are refused) and
    exists: a CUDA device on a machine with no CUDA driver is refused at once; only ``cuda``
    where a driver is present loads torch to decide.
    The tracking URI (``tracking.uri``, else ``MLFLOW_TRACKING_URI``) has a scheme of
    `TRACKING_SCHEMES`. The output folder ``out`` (when given) is not a file, the current folder,
    the root, a home or system folder, nor (unless ``force_out``, ``--force-out``) a non-empty
    folder that is not a study's (`sweep.folder.out_problem`). The store files named by the
    spec or in ``out`` are ones the study may write to (`check_stores`). For a study about to
    run here (``out`` given; ``sweep validate`` judges the spec alone), a Ray study's
    ``resources.gpus_per_trial`` on a local Ray with no GPU (`check_gpus`; ``ray_address`` is
    ``--address``). The corpus URI's scheme, parameters and
    paths (`sweep.data.check_corpus`).

    Raises:
        PreflightError: Naming the flag or field (``--device``, ``train.device``,
            ``tracking.uri``, ``MLFLOW_TRACKING_URI``, ``--out``, ``search.storage``,
            ``resources.gpus_per_trial``) and the rule.
        sweep.data.DataError: For the corpus, naming its URI.
    """
    if device is not None:
        check_device("--device", device)
    else:
        for value in _spec_devices(spec):
            check_device("train.device", value)
    check_tracking_uri(spec)
    if out is not None:
        if str(out) in ("", "."):
            raise PreflightError("--out: give the study its own folder, not the current one")
        problem = out_problem("--out", out, force=force_out)
        if problem is not None:
            raise PreflightError(problem)
        check_gpus(spec, ray_address)
    check_stores(spec, out)
    check_vocab(spec, check_corpus(spec.data.uri, vocab_size=spec.data.vocab_size),
                largest_vocab(spec))


def check_space(spec: StudySpec, *, device: str | None = None,
                n_samples: int = 64) -> SpaceSummary:
    """Price the space's corners and ``n_samples`` random configs (`sweep.space.summarize`).

    Returns:
        The priced space.

    Raises:
        PreflightError: When none of them is valid and within the constraints, with examples.
    """
    from sweep import space

    summary = space.summarize(spec, n_samples=n_samples, device=device)
    if summary.n_ok == 0:
        examples = summary.invalid_examples + summary.infeasible_examples
        raise PreflightError(
            f"study {spec.name}: none of {summary.n_configs} sampled configs is valid and "
            "within the constraints, so no trial could train; for example: "
            + "; ".join(examples[:2]))
    return summary


def preflight(spec: StudySpec, out: Path, *, device: str | None = None,
              ray_address: str | None = None,
              n_samples: int = 64) -> tuple[Corpus, SpaceSummary]:
    """Check what a study needs before it writes anything, and prepare its corpus.

    `check_inputs` and `check_space` (``n_samples`` random draws and the corners, as ``sweep
    validate`` does), then: that an MLflow server named by the spec answers
    (`sweep.tracking.check_reachable`); that an RDB ``search.storage`` accepts a connection
    (`sweep.executors.optuna.check_storage`); for a ``ray`` study, that a Ray cluster
    address (``ray_address``, else ``RAY_ADDRESS``) answers
    (`sweep.executors.ray.check_address`); and that the corpus holds one sequence of the
    shortest ``seq_len`` and fits the largest ``vocab_size`` of the space. If a check fails,
    every folder it created (``out``, and its parents that did not exist) is removed again.

    Returns:
        The prepared corpus (cached under ``<out>/data``) and the priced space, which the
        executors reuse (the Ray schedulers' budgets).

    Raises:
        PreflightError: Naming the flag, field or file and the rule.
        sweep.data.DataError: The corpus cannot be used, naming its URI.
    """
    from sweep import tracking
    from sweep.data import load_corpus

    # The command line judged the folder's contents (--force-out); nothing is written before
    # this point, so only the system-folder rule is checked again here.
    check_inputs(spec, out, device=device, ray_address=ray_address, force_out=True)
    summary = check_space(spec, device=device, n_samples=n_samples)
    try:
        tracking.check_reachable(spec.tracking_uri(out), spec.tracking_uri_source())
    except tracking.UnreachableStoreError as exc:
        raise PreflightError(str(exc)) from None
    if spec.search.executor == "optuna":
        from sweep.executors.optuna import StorageError, check_storage

        try:
            check_storage(spec.storage_url(out))
        except StorageError as exc:
            raise PreflightError(str(exc)) from None
    if spec.search.executor == "ray":
        from sweep.executors.ray import UnreachableClusterError, check_address

        source = "--address" if ray_address else "RAY_ADDRESS"
        try:
            check_address(ray_address or os.environ.get("RAY_ADDRESS"), source)
        except UnreachableClusterError as exc:
            raise PreflightError(str(exc)) from None
    # The outermost folder created here (runs/ itself on a first study), removed on failure.
    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)
    try:
        out.mkdir(parents=True, exist_ok=True)
        corpus = load_corpus(spec.data.uri, StudyFolder(out).data,
                             vocab_size=spec.data.vocab_size)
        if summary.min_seq_len is None:
            reasons = summary.untrainable_examples + summary.invalid_examples
            raise PreflightError(f"study {spec.name}: no sampled config can train: "
                                 f"{reasons[0]}")
        # Only a study in which no config fits is refused; a misfit trial ends FAILED.
        corpus.require(summary.min_seq_len)
        # max_vocab_size is set with min_seq_len: some config can train
        check_vocab(spec, corpus.vocab_size, summary.max_vocab_size)
        check_disk(spec, out, summary)
    except (OSError, DataError, PreflightError) as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        if isinstance(exc, OSError):
            if exc.errno == errno.ENOSPC:
                raise PreflightError(f"--out {out}: the disk is full ({_free_text(out)}); free "
                                     "space there or give another --out") from None
            raise PreflightError(f"--out {out}: {exc.strerror or exc}") from None
        raise
    return corpus, summary


#: Room a study needs under ``--out`` besides checkpoints: the MLflow store, the Optuna
#: journal, artifacts and plots (bytes).
STORE_RESERVE_BYTES = 64 * 2**20


def _existing(path: Path) -> Path:
    return next(p for p in [path, *path.parents] if p.exists())


def _free_text(out: Path) -> str:
    try:
        return f"{shutil.disk_usage(_existing(out)).free / 2**20:,.1f} MiB free"
    except OSError:
        return "free space unknown"


def checkpoint_bytes(n_params: float) -> float:
    """Bytes of one training checkpoint of a model of ``n_params`` parameters.

    fp32 weights and AdamW's two fp32 moments: 12 bytes a parameter (`sweep.train.checkpoint`).
    """
    return 12.0 * n_params


def check_disk(spec: StudySpec, out: Path, summary: Any) -> None:
    """Refuse a study whose output folder's disk cannot hold what it will write.

    The need is `STORE_RESERVE_BYTES` plus the checkpoints the study keeps at once, from the
    cost model's largest parameter count (`checkpoint_bytes`): the kind's own
    (`sweep.kinds.StudyKind.disk_needs`: two per PBT member, one per shape of a scaling study
    with ``scaling.branches``), and with ``search.checkpoint_interval`` two per trial running
    at once (``search.parallel``; the file and its replacement while it is written), plus one
    an interrupted trial leaves for its retry.

    Raises:
        PreflightError: The disk under ``out`` has less free space, naming both figures.
    """
    largest = (summary.cost or {}).get(METRIC_N_PARAMS) or [0, 0]
    parts = {"store and artifacts": float(STORE_RESERVE_BYTES)}
    parts.update(spec.kind.disk_needs(spec, largest[1]))
    if spec.search.checkpoint_interval:
        n = 2 * spec.search.parallel + 1
        parts[f"{n} trial checkpoints"] = n * checkpoint_bytes(largest[1])
    need = sum(parts.values())
    free = shutil.disk_usage(_existing(out)).free
    if free < need:
        detail = ", ".join(f"{k} {v / 2**20:,.1f} MiB" for k, v in parts.items())
        raise PreflightError(f"--out {out}: the disk is full for this study: "
                             f"{free / 2**20:,.1f} MiB free, about {need / 2**20:,.1f} MiB "
                             f"needed ({detail}); free space there or give another --out")
