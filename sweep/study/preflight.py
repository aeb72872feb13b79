"""What a study needs, checked before it writes anything.

Device, stores, cluster, output folder, a space with configs that can train, and a corpus that fits
them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sweep import space, tracking
from sweep.data import Corpus, DataError, load_corpus
from sweep.space import SpaceSummary
from sweep.spec import StudySpec
from sweep.train.hardware import pick_device

__all__ = ["PreflightError", "preflight"]


class PreflightError(ValueError):
    """The study cannot start or could never train a trial; found before anything is written."""


def preflight(spec: StudySpec, out: Path, *, device: str | None = None,
              ray_address: str | None = None,
              n_samples: int = 64) -> tuple[Corpus, SpaceSummary]:
    """Check what a study needs before it writes anything, and prepare its corpus.

    Checks the training device; that an MLflow server named by the spec answers
    (`sweep.tracking.check_reachable`); that an RDB ``search.storage`` accepts a connection
    (`sweep.executors.optuna.check_storage`); for a ``ray`` study, that a Ray cluster
    address (``ray_address``, else ``RAY_ADDRESS``) answers
    (`sweep.executors.ray.check_address`); that some configs of the space are valid and
    within the constraints (its corners and ``n_samples`` random draws priced by the cost model,
    as ``sweep validate`` does); the output folder; and that the corpus holds one sequence of the
    shortest ``seq_len`` and fits the largest ``vocab_size`` of the space. If a check fails, a
    new output folder is removed again.

    Returns:
        The prepared corpus (cached under ``<out>/data``) and the priced space, which the
        executors reuse (the Ray schedulers' budgets).

    Raises:
        PreflightError: Naming the flag, field or file and the rule.
    """
    try:
        pick_device(device or "auto")
    except ValueError as exc:
        raise PreflightError(f"--device: {exc}") from None
    summary = space.summarize(spec, n_samples=n_samples, device=device)
    if summary.n_ok == 0:
        examples = summary.invalid_examples + summary.infeasible_examples
        raise PreflightError(
            f"study {spec.name}: none of {summary.n_configs} sampled configs is valid and "
            "within the constraints, so no trial could train; for example: "
            + "; ".join(examples[:2]))
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
    if out.exists() and not out.is_dir():
        raise PreflightError(f"--out {out}: is a file, not a folder")
    if str(out) in ("", "."):
        raise PreflightError("--out: give the study its own folder, not the current one")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        corpus = load_corpus(spec.data.uri, out / "data", vocab_size=spec.data.vocab_size)
        if summary.min_seq_len is None:
            reasons = summary.untrainable_examples + summary.invalid_examples
            raise PreflightError(f"study {spec.name}: no sampled config can train: "
                                 f"{reasons[0]}")
        # Only a study in which no config fits is refused; a misfit trial ends FAILED.
        corpus.require(summary.min_seq_len)
        vocab = summary.max_vocab_size
        if vocab < corpus.vocab_size:
            raise PreflightError(f"model.vocab_size={vocab} is smaller than the vocabulary of "
                                 f"{spec.data.uri!r} ({corpus.vocab_size} token ids)")
    except (OSError, DataError, PreflightError) as exc:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        if isinstance(exc, OSError):
            raise PreflightError(f"--out {out}: {exc.strerror or exc}") from None
        raise
    return corpus, summary
