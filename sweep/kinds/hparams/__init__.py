"""The ``hparams`` study kind: learning-rate and batch-size laws (DeepSeek LLM, sec. 3.1).

At each budget of ``hparams.budgets`` the study trains the compute-optimal shape over the grid
``hparams.lr`` x ``hparams.batch_size`` (`sweep.kinds.hparams.grid`), each point once, to the
end, for D = C / (6 N) tokens. ``sweep analyze hparams`` fits eta_opt(C) = a C^b and
B_opt(C) = a C^b to the final losses (`sweep.scaling.hparam_laws`); a later study takes its
learning-rate domain from the fit with ``train.lr: {from_study: NAME}``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sweep.kinds.base import Described, KindRun, Prepared
from sweep.kinds.common import GridKind, run_points
from sweep.kinds.hparams import grid
from sweep.kinds.hparams.rules import HPARAMS_OWNED_MODEL, hparams_problems
from sweep.kinds.hparams.section import HparamsSpec
from sweep.spec.domains import ChoiceDomain
from sweep.spec.schema import StudySpec

if TYPE_CHECKING:
    from sweep.train.peaks import NamedGpu
    from sweep_models.config import ModelConfig

__all__ = ["KIND", "HparamsKind"]


class HparamsKind(GridKind):
    """Learning-rate and batch-size laws: `sweep.kinds.hparams` (module docstring)."""

    name = "hparams"
    section_model = HparamsSpec
    trials_from = "its grid points (hparams.budgets x hparams.lr x hparams.batch_size)"
    owned_model_fields = HPARAMS_OWNED_MODEL
    analysis = "sweep.kinds.hparams.analyze"

    def problems(self, spec: StudySpec) -> Iterable[str]:
        return hparams_problems(spec)

    def budget(self, spec: StudySpec) -> tuple[str, Any]:
        tokens = sorted({p.n_tokens for p in grid.points(spec)})
        return "tokens", ChoiceDomain(choice=list(tokens))

    def trial_count(self, spec: StudySpec) -> str:
        return f"{len(grid.all_labels(spec))} (hparams grid)"

    def sample(self, trial: Any, spec: StudySpec) -> dict[str, Any]:
        return grid.point_values(spec, trial.suggest_categorical(grid.POINT,
                                                                 grid.all_labels(spec)))

    def resolve(self, spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
        from sweep.space import InvalidConfig

        label = params.pop(grid.POINT, None)
        try:
            return grid.point_values(spec, str(label))
        except ValueError as exc:
            raise InvalidConfig(str(exc), params) from None

    def corner(self, spec: StudySpec, end: int) -> dict[str, Any]:
        return {grid.POINT: grid.all_labels(spec)[end]}

    def trial_records(self, spec: StudySpec, model: ModelConfig, train: Any,
                      cost: Mapping[str, float]) -> tuple[dict[str, float], dict[str, Any]]:
        """Metrics ``budget_flops`` (C), ``n_tokens`` (D), ``tokens_per_param``; param the point.

        The point's learning rate and batch are the config's ``train.lr`` and
        ``train.batch_tokens``, logged with it.
        """
        from sweep.schema import (
            METRIC_BUDGET_FLOPS,
            METRIC_N_PARAMS,
            METRIC_N_TOKENS,
            METRIC_TOKENS_PER_PARAM,
        )

        shape = (model.d_model, model.n_layers, model.n_heads, model.d_ff)
        point = next((p for p in grid.points(spec)
                     if (p.candidate.shape.d_model, p.candidate.shape.n_layers,
                         p.candidate.shape.n_heads, p.candidate.shape.d_ff) == shape
                     and p.n_tokens == train.tokens and p.lr == train.lr
                     and p.batch_tokens in (None, train.batch_tokens)), None)
        if point is None:  # a config no point of the grid trains (an edited spec)
            return {}, {}
        metrics = {METRIC_BUDGET_FLOPS: point.budget_flops, METRIC_N_TOKENS: float(train.tokens),
                   METRIC_TOKENS_PER_PARAM: train.tokens / cost[METRIC_N_PARAMS]}
        return metrics, {grid.POINT: point.label}

    def prepare(self, spec: StudySpec, *, corpus_train_tokens: int | None,
                device: str | None) -> Prepared:
        return Prepared(total=len(grid.all_labels(spec)))

    def run(self, job: KindRun) -> tuple[Any, list[str]]:
        every = grid.points(job.ctx.spec)
        if job.say is not None:
            job.say(f"hparams grid: {len(grid.hparams_section(job.ctx.spec).budgets)} budgets "
                    f"x {len(every)} points in all")
        study = run_points(job, [{grid.POINT: p.label} for p in every])
        analyze = f"next: sweep analyze hparams {job.ctx.out_dir} (eta_opt(C) and B_opt(C))"
        if job.say is not None:
            job.say(analyze)
        return study, [analyze]

    def point_key(self, spec: StudySpec, params: Mapping[str, Any]) -> Hashable:
        return str(params.get(grid.POINT))

    def describe(self, spec: StudySpec, say: Any, *, device: str | None, as_json: bool,
                 gpu: NamedGpu) -> Described:
        from sweep.kinds.hparams.validate import describe_grid

        return describe_grid(spec, say, as_json=as_json)


KIND = HparamsKind()
