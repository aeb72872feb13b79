"""The ``scaling`` study kind: an IsoFLOP grid (Hoffmann et al. 2022, section 3.2).

For each FLOP budget of ``scaling.budgets``, smallest first, the study trains a range of shapes
from its size rule or ladder, each for the tokens the budget buys it, centred on the expected
optimum (`sweep.kinds.scaling.layout`), then re-centred on what the earlier budgets found
(`sweep.kinds.scaling.driver`). Every trial is one grid point, named by the one axis the kind
adds (``scaling.point``, `sweep.kinds.scaling.shapes`); ``sweep analyze scaling`` fits the
scaling laws to the trained points. With ``scaling.branches`` a shape's run at a larger budget
continues the stable phase of its run at the one before (`sweep.train.branches`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sweep.kinds.base import Described, KindRun, Prepared
from sweep.kinds.common import GridKind
from sweep.kinds.scaling.rules import SCALING_OWNED_MODEL, scaling_problems, scaling_section
from sweep.kinds.scaling.section import ScalingSpec
from sweep.spec.domains import ChoiceDomain
from sweep.spec.schema import StudySpec

if TYPE_CHECKING:
    from sweep.study.trial import OpenTrial, StudyContext
    from sweep.train.peaks import NamedGpu
    from sweep_models.config import ModelConfig

__all__ = ["KIND", "ScalingKind"]


class ScalingKind(GridKind):
    """IsoFLOP scaling: `sweep.kinds.scaling` (module docstring).

    An IsoFLOP curve needs every size trained to its budget (`GridKind`: no early stopping
    unless the spec asks for it; then sweep validate warns).
    """

    name = "scaling"
    section_model = ScalingSpec
    trials_from = "its grid points (scaling.budgets x scaling.sizes_per_budget)"
    owned_model_fields = SCALING_OWNED_MODEL
    analysis = "sweep.kinds.scaling.analyze"
    plannable = True

    def problems(self, spec: StudySpec) -> Iterable[str]:
        return scaling_problems(spec)

    def budget(self, spec: StudySpec) -> tuple[str, Any]:
        return "flops", ChoiceDomain(choice=list(scaling_section(spec).budgets))

    def trial_count(self, spec: StudySpec) -> str:
        return "adaptive" if scaling_section(spec).adaptive is not None else "grid"

    def sample(self, trial: Any, spec: StudySpec) -> dict[str, Any]:
        from sweep.kinds.scaling import shapes as sh

        if scaling_section(spec).adaptive is not None:
            return sh.adaptive_values(spec, {
                sh.ADAPTIVE_BUDGET: trial.suggest_float(sh.ADAPTIVE_BUDGET,
                                                        *sh.budget_bounds(spec), log=True),
                sh.ADAPTIVE_SHAPE: trial.suggest_categorical(
                    sh.ADAPTIVE_SHAPE, [s.label for s in sh.shapes(spec)]),
                sh.ADAPTIVE_REPLICATE: trial.suggest_int(sh.ADAPTIVE_REPLICATE, 0,
                                                         sh.MAX_REPLICATES)})
        return sh.point_values(spec, trial.suggest_categorical(sh.SCALING_POINT,
                                                               sh.all_labels(spec)))

    def resolve(self, spec: StudySpec, params: dict[str, Any]) -> dict[str, Any]:
        from sweep.kinds.scaling import shapes as sh
        from sweep.kinds.scaling.shapes import SCALING_POINT, point_values
        from sweep.space import InvalidConfig

        if scaling_section(spec).adaptive is not None:
            axes = {k: params.pop(k) for k in sh.ADAPTIVE_AXES if k in params}
            params.pop(SCALING_POINT, None)
            if len(axes) < len(sh.ADAPTIVE_AXES):
                raise InvalidConfig(f"{', '.join(sh.ADAPTIVE_AXES)}: missing (every trial of "
                                    "an adaptive scaling study is a point of its rounds)", params)
            try:
                return sh.adaptive_values(spec, axes)
            except (ValueError, TypeError) as exc:
                raise InvalidConfig(str(exc), params) from None
        label = params.pop(SCALING_POINT, None)
        if label is None:
            raise InvalidConfig(f"{SCALING_POINT}: missing (every trial of a scaling study is a "
                                "grid point)", params)
        try:
            return point_values(spec, label)
        except ValueError as exc:
            raise InvalidConfig(str(exc), params) from None

    def corner(self, spec: StudySpec, end: int) -> dict[str, Any]:
        from sweep.kinds.scaling import shapes as sh

        if scaling_section(spec).adaptive is not None:
            return sh.adaptive_point(sh.budget_bounds(spec)[end], sh.shapes(spec)[end], 0)
        return {sh.SCALING_POINT: sh.all_labels(spec)[end]}

    def trial_records(self, spec: StudySpec, model: ModelConfig, train: Any,
                      cost: Mapping[str, float]) -> tuple[dict[str, float], dict[str, Any]]:
        """Metrics ``budget_flops`` (C), ``n_tokens`` (D), ``tokens_per_param`` (D/N).

        Params: the size rule's settings (``scaling.<setting>``) and the point's label
        (``scaling.point``).
        """
        from sweep.kinds.scaling.shapes import SCALING_POINT, Shape, base_seed, point_label
        from sweep.schema import (
            METRIC_BUDGET_FLOPS,
            METRIC_N_PARAMS,
            METRIC_N_TOKENS,
            METRIC_TOKENS_PER_PARAM,
        )
        from sweep.train.config import resolve_budget
        from sweep_models.errors import required

        # D is whole optimizer steps of C / FLOPs per token (`resolve_budget`).
        tokens = required("total_tokens", resolve_budget(train, model).total_tokens)
        metrics = {METRIC_BUDGET_FLOPS: float(train.flops), METRIC_N_TOKENS: float(tokens),
                   METRIC_TOKENS_PER_PARAM: tokens / cost[METRIC_N_PARAMS]}
        section = scaling_section(spec)
        rule = section.rule.parameters() if section.rule is not None else \
            {"ladder": len(required("scaling.ladder", section.ladder))}
        shape = Shape(model.d_model, model.n_layers, model.n_heads, required("d_ff", model.d_ff))
        replicate = train.seed - base_seed(spec) if section.adaptive is not None else 0
        params = {f"scaling.{k}": v for k, v in rule.items()} | \
            {SCALING_POINT: point_label(train.flops, shape, replicate)}
        return metrics, params

    def train(self, ctx: StudyContext, trial: OpenTrial, run: Any, reporter: Any) -> Any:
        if not scaling_section(ctx.spec).branches:
            return None
        from sweep.kinds.scaling.branching import train_branch_point

        return train_branch_point(ctx, trial, run, reporter)

    def prepare(self, spec: StudySpec, *, corpus_train_tokens: int | None,
                device: str | None) -> Prepared:
        from sweep.kinds.scaling.layout import layout, layout_problems

        if scaling_section(spec).adaptive is not None:
            from sweep.kinds.scaling.adaptive_driver import first_layouts

            prior = first_layouts(spec, corpus_train_tokens=corpus_train_tokens, device=device)
            # The progress total is the first round's: later rounds are placed as it runs.
            return Prepared(problems=layout_problems(prior),
                            total=sum(len(b.points) for b in prior), plan=corpus_train_tokens)
        prior = layout(spec, corpus_train_tokens=corpus_train_tokens, device=device)
        # The progress total as the prior lays it out (re-centring may change it a little).
        return Prepared(problems=layout_problems(prior), total=sum(len(b.points) for b in prior),
                        plan=corpus_train_tokens)

    def run(self, job: KindRun) -> tuple[Any, list[str]]:
        from sweep.kinds.scaling.driver import layout_notes, plan_notes, run_budgets

        if scaling_section(job.ctx.spec).adaptive is not None:
            from sweep.kinds.scaling.adaptive_driver import run_adaptive

            study, layouts, stop = run_adaptive(job, job.prepared.plan)
            analyze = f"next: sweep analyze scaling {job.ctx.out_dir} (the verdict and its notes)"
            if job.say is not None:
                job.say(analyze)
            return study, [*layout_notes(layouts), stop, analyze]
        study, layouts = run_budgets(job, job.prepared.plan)
        # The run's end points to the analysis: the verdict, its notes and the shapes.
        analyze = f"next: sweep analyze scaling {job.ctx.out_dir} (the verdict and its notes)"
        if job.say is not None:
            job.say(analyze)
        return study, [*layout_notes(layouts), *plan_notes(job.ctx.spec, layouts), analyze]

    def point_key(self, spec: StudySpec, params: Mapping[str, Any]) -> Hashable:
        from sweep.kinds.scaling.shapes import SCALING_POINT, adaptive_label

        return adaptive_label(params) or str(params.get(SCALING_POINT))

    def disk_needs(self, spec: StudySpec, largest_n_params: float) -> dict[str, float]:
        if not scaling_section(spec).branches:
            return {}
        from sweep.kinds.scaling.shapes import candidates
        from sweep.study.preflight import checkpoint_bytes

        shapes = candidates(spec)
        return {f"{len(shapes)} WSD trunk checkpoints":
                sum(checkpoint_bytes(c.n_params) for c in shapes)}

    def describe(self, spec: StudySpec, say: Any, *, device: str | None, as_json: bool,
                 gpu: NamedGpu) -> Described:
        from sweep.kinds.scaling.validate import describe_grid

        return describe_grid(spec, say, device=device, as_json=as_json, gpu=gpu)



KIND = ScalingKind()
