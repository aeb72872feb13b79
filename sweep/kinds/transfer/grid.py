"""The grid of a transfer study: every width x the shared learning-rate grid x every choice.

A transfer study (spec section ``transfer``) trains the same learning-rate search at each
width so that the best learning rate can be compared across widths (Yang et al. 2022, "Tensor
Programs V", Figure 1: under SP it shifts as the model widens, under muP it stays). The search
is a grid, the simplest search that makes "the optimum moves by k grid steps" well defined:
the product of ``transfer.widths``, ``train.lr``'s choices and the choices of any other
searched field (e.g. ``model.parametrization: {choice: [sp, mup]}`` for SP and muP side by
side). Each point is a flat parameter dict with the spec's own parameter names and the width
as ``model.d_model`` (`WIDTH`); the driver hands the points to the executor as
``StudyContext.points``, which queues and runs exactly those (as a scaling study's points).

A point's key (`point_key`) is the encoded values of the width and the grid's fields, read
back from a trial's logged params, so a resumed study skips the points already trained.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from sweep.kinds.transfer.section import TransferSpec
from sweep.params import choice_labels, decode_param, encode_param
from sweep.spec import ChoiceDomain, StudySpec

__all__ = ["WIDTH", "grid_fields", "point_key", "points", "transfer_section", "width_values"]

#: The parameter that carries a point's width (the Optuna parameter and the logged param).
WIDTH = "model.d_model"


def transfer_section(spec: StudySpec) -> TransferSpec:
    """The ``transfer`` section of a transfer study's spec."""
    return spec.section("transfer")


def grid_fields(spec: StudySpec) -> list[str]:
    """The searched fields (dotted paths) of the grid besides the width, in define-by-run order.

    Every one is a choice domain (`sweep.spec.rules` refuses other domains in a transfer study).
    """
    return [p.path for p in spec.searched()]


def width_values(spec: StudySpec, width: int) -> dict[str, Any]:
    """The model fields one width sets: ``d_model`` and the derived ``d_head``, ``d_ff_ratio``.

    `sweep.space.sampling.build_configs` turns them into ``n_heads = d_model / d_head`` and
    ``d_ff = round(d_ff_ratio * d_model)``.
    """
    tr = transfer_section(spec)
    return {WIDTH: width, "model.d_head": tr.d_head, "model.d_ff_ratio": tr.d_ff_ratio}


def points(spec: StudySpec) -> tuple[dict[str, Any], ...]:
    """Every grid point as flat params, widths outermost (smallest first), then each field.

    Returns:
        ``len(widths) * prod(len(choices))`` dicts ``{"model.d_model": w, "train.lr": lr,
        ...}`` whose values are the spec's choices (Optuna's categorical values, as
        `sweep.params.choice_labels` passes them).
    """
    fields = grid_fields(spec)  # the searched fields, in the order of spec.searched()
    axes = [choice_labels(p.domain.options) for p in spec.searched()
            if isinstance(p.domain, ChoiceDomain)]
    return tuple({WIDTH: w, **dict(zip(fields, combo, strict=True))}
                 for w in transfer_section(spec).widths for combo in itertools.product(*axes))


def point_key(spec: StudySpec, params: Mapping[str, Any]) -> tuple[str, ...]:
    """The point a trial trained: its width's and grid fields' values, encoded as logged.

    Args:
        spec: The transfer study.
        params: A point (`points`) or a trial's logged params (`sweep.tracking.read_trials`,
            decoded).

    Returns:
        One text per field (the width first), equal for a point and the params of the trial
        that trained it.
    """
    return tuple(encode_param(decode_param(encode_param(params.get(name))))
                 for name in [WIDTH, *grid_fields(spec)])
