"""A grid point trained from its shape's stable-phase trunk (``scaling.branches``, WSD).

With a warmup-stable-decay schedule, a shape's run at a larger budget continues the stable
phase its run at the previous budget left in a checkpoint, and cools down on its own branch
(`sweep.train.branches`, Hagele et al. 2024): the same final loss as a run from step 0, for a
fraction of the tokens. The trunks live in the study folder's ``branches/``.
"""

from __future__ import annotations

from typing import Any

from sweep.folder import StudyFolder
from sweep.schema import METRIC_BRANCH_TOKENS, TAG_BRANCH_FROM, TAG_BRANCH_NOTE
from sweep.study.trial import OpenTrial, StudyContext
from sweep.train import Trainer
from sweep.train.branches import train_branch

__all__ = ["train_branch_point"]


def train_branch_point(ctx: StudyContext, trial: OpenTrial, run: Any, reporter: Any) -> Any:
    """Train ``trial`` from its shape's trunk, if one is left; returns its `TrialResult`.

    Logs ``branch_tokens`` (tokens continued from the trunk), tags ``sweep.branch_from`` (the
    run that left it) and ``sweep.branch_note`` (why a trunk was not used or not saved).
    """
    result, info = train_branch(
        lambda: Trainer(trial.model, trial.train, ctx.corpus(), device=ctx.device), reporter,
        StudyFolder(ctx.out_dir).branches, meta={"run_id": run.run_id, "trial": trial.number})
    run.log_metrics({METRIC_BRANCH_TOKENS: info.reused_tokens})
    tags = {TAG_BRANCH_FROM: info.source["run_id"]} if "run_id" in info.source else {}
    if info.notes:
        tags[TAG_BRANCH_NOTE] = "; ".join(info.notes)
    run.set_tags(tags)
    return result
