"""``sweep plan``: how good a scaling study's design is, simulated before anything trains."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sweep.cli import common
from sweep.cli.common import app, bad_input
from sweep.schema import METRIC_MFU, METRIC_N_PARAMS, METRIC_N_TOKENS
from sweep.train.peaks import DEFAULT_GPU, DEFAULT_MFU, PEAK_FLOPS, named_gpu

if TYPE_CHECKING:
    from sweep.simulate.law import SimulatedLaw
    from sweep.simulate.plan import Plan
    from sweep.spec import StudySpec

#: ``--repeats`` and ``--noise`` ranges.
REPEATS_RANGE = (2, 10_000)
NOISE_RANGE = (0.0, 0.5)
DESIGNS = ("fixed", "adaptive")


def _read_law(value: str) -> tuple[SimulatedLaw | None, str | None]:
    """``--law`` as a law (a name or a file), or ``(None, study)`` to fit it from a study.

    Exits 2 naming ``--law`` for anything else.
    """
    import yaml

    from sweep.folder import find_store
    from sweep.simulate.law import LAWS, law_from_data

    if value in LAWS:
        return LAWS[value], None
    path = Path(value)
    if path.is_file():
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            bad_input(f"--law {value}: not a readable YAML file ({type(exc).__name__})")
        if isinstance(data, dict) and isinstance(data.get("simulate"), dict):
            data = data["simulate"]
        if isinstance(data, dict) and "law" in data:
            data = data["law"]
        try:
            return law_from_data(data, f"--law {value}"), None
        except ValueError as exc:
            bad_input(str(exc))
    if find_store(value) is not None:
        return None, value
    bad_input(f"--law {value}: not a law name ({', '.join(LAWS)}), a law file "
              "({E, A, B, alpha, beta}) nor a study with a store")


def _study_law(study: str) -> SimulatedLaw:
    """The law a study's trials fit (VPNLS, the verdict's first estimator)."""
    from sweep.scaling import FitError, fit_vpnls, load_runs
    from sweep.scaling.runs import LOSS, column
    from sweep.simulate.law import SimulatedLaw

    points = load_runs(study)
    try:
        fit = fit_vpnls(column(points, METRIC_N_PARAMS), column(points, METRIC_N_TOKENS),
                        column(points, LOSS))
    except FitError as exc:
        bad_input(f"--law {study}: its trials give no law ({exc})")
    p = {k: float(v) for k, v in fit.params.items()}
    return SimulatedLaw(p["E"], p["A"], p["B"], p["alpha"], p["beta"])


@app.command("plan")
def plan_cmd(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="A scaling study's spec YAML."),
    law: str = typer.Option("chinchilla", "--law", help="The law losses are drawn from: a name "
                            "(chinchilla, asymmetric, chinchilla-lr), a YAML file of {E, A, B, "
                            "alpha, beta} or a study whose trials it is fitted to (VPNLS)."),
    repeats: int = typer.Option(100, "--repeats", help="Simulated studies, "
                                f"{REPEATS_RANGE[0]} to {REPEATS_RANGE[1]}."),
    noise: float = typer.Option(0.01, "--noise", help="Sigma of the log-normal seed noise on "
                                f"each loss, {NOISE_RANGE[0]:g} to {NOISE_RANGE[1]:g}."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first simulated study's noise."),
    target: float = typer.Option(None, "--target", help="A target budget C, FLOPs (default: "
                                 "100 x the largest of scaling.budgets)."),
    gpu: str = typer.Option(DEFAULT_GPU, help="GPU the design's compute is timed on (its "
                            f"datasheet peak): one of {', '.join(PEAK_FLOPS)}."),
    mfu: float = typer.Option(DEFAULT_MFU, help="Fraction of the GPU's peak a run reaches, in "
                              "(0, 1]."),
    design: str = typer.Option("fixed", "--design", help="fixed: the spec's grid; adaptive: "
                               "rounds placed by the fits (sweep.simulate.adaptive) with the "
                               "spec's scaling.adaptive settings, else the fixed grid's FLOPs "
                               "as allowance, for the largest target."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Simulate a scaling study's design many times and report what its fits can tell.

    Each simulated study lays out the spec's grid as ``sweep run`` would (the same budgets,
    shapes, re-centring and the cost model's N and D), draws each loss from the law with
    seed noise, and fits approaches 2, 3 and VPNLS as ``sweep analyze scaling`` does. Per
    estimator and target budget: the median N_opt and D_opt, their 5-95% spread over the
    repeats as a ratio (the interval a study of this design can expect) and the bias against
    the law's own value; the exponents likewise; and the FLOPs the design trains. Nothing
    trains and nothing is written.
    """
    if not REPEATS_RANGE[0] <= repeats <= REPEATS_RANGE[1]:
        bad_input(f"--repeats {repeats}: must be {REPEATS_RANGE[0]} to {REPEATS_RANGE[1]}")
    if not (math.isfinite(noise) and NOISE_RANGE[0] <= noise <= NOISE_RANGE[1]):
        bad_input(f"--noise {noise}: must be {NOISE_RANGE[0]:g} to {NOISE_RANGE[1]:g}")
    if target is not None and not (math.isfinite(target) and target > 0):
        bad_input(f"--target {target}: must be a finite number of FLOPs > 0")
    if design not in DESIGNS:
        bad_input(f"--design {design}: must be one of {', '.join(DESIGNS)}")
    at = named_gpu(gpu, mfu)
    from sweep.spec import load_spec

    spec = load_spec(spec_path)
    if not spec.kind.plannable:
        bad_input(f"{spec_path}: a {spec.kind.name} study; sweep plan simulates a scaling "
                  "study's grid (a spec with a scaling section)")
    chosen, study = _read_law(law)
    from sweep.simulate.plan import plan_targets, run_plan

    chosen = chosen or _study_law(str(study))
    settings = _spec_settings(spec, target) if design != "fixed" else None
    targets = plan_targets(spec, settings.target_flops if settings is not None else target)
    plan = run_plan(spec, chosen, repeats=repeats, noise=noise, seed=seed, targets=targets,
                    simulate=_adaptive(spec, chosen, noise, targets[-1], settings)
                    if design != "fixed" else None)
    timed = {"gpu": at.name, METRIC_MFU: at.mfu, "gpu_seconds": at.seconds(plan.design_flops)}
    if as_json:
        typer.echo(json.dumps({**plan.as_json(), "design": design, **timed}))
        return
    _print_plan(plan, law, design)
    common.console.print(f"the design trains {plan.design_flops:.3g} FLOPs: about "
                         f"{timed['gpu_seconds']:.3g} s on one {at.name} at MFU {at.mfu:g}",
                         highlight=False)


def _num(value: float, fmt: str = ".4g") -> str:
    return "-" if not math.isfinite(value) else format(value, fmt)


def _spec_settings(spec: StudySpec, target: float | None) -> Any:
    """The spec's ``scaling.adaptive`` settings (``--target`` over its target), or None."""
    from sweep.kinds.scaling.rules import scaling_section

    if scaling_section(spec).adaptive is None:
        return None
    import dataclasses

    from sweep.kinds.scaling.adaptive import settings_of

    settings = settings_of(spec)
    return settings if target is None else dataclasses.replace(settings, target_flops=target)


def _adaptive(spec: StudySpec, law: SimulatedLaw, noise: float, target: float,
              settings: Any) -> Any:
    """One simulated adaptive study with ``settings`` (the spec's ``scaling.adaptive``).

    Without them: the defaults, with the fixed grid's FLOPs (noise-free) as allowance.
    """
    import random

    from sweep.simulate.adaptive import AdaptiveSettings, simulate_adaptive
    from sweep.simulate.design import Design, simulate_grid

    if settings is None:
        allowance = simulate_grid(Design.of(spec, law, 0.0), random.Random(0)).total_flops
        settings = AdaptiveSettings(target_flops=target, allowance_flops=allowance)
    return lambda d, rng: simulate_adaptive(d, rng, settings)


def _print_plan(plan: Plan, law_name: str, design: str) -> None:
    from rich.table import Table

    say = common.console.print
    say(f"{plan.study} ({design} design): {plan.repeats} simulated studies under law {law_name} "
        f"(E={plan.law['E']:.4g}, A={plan.law['A']:.4g}, B={plan.law['B']:.4g}, "
        f"alpha={plan.law['alpha']:.4g}, beta={plan.law['beta']:.4g}), noise sigma "
        f"{plan.noise:g}; each trains {plan.n_points:.0f} points, {plan.design_flops:.3g} FLOPs",
        highlight=False)
    sizes = Table("approach", "C", "true N_opt", "median", "width", "bias N", "bias D", "fits",
                  title="compute-optimal N and D")
    for s in plan.spreads:
        if s.quantity != METRIC_N_PARAMS:
            continue
        d = plan.spread(s.estimator, METRIC_N_TOKENS, s.budget_flops)
        sizes.add_row(s.estimator, f"{s.budget_flops:.3g}", _num(s.truth), _num(s.median),
                      f"x{_num(s.width, '.3g')}", _num(100 * s.bias, "+.1f") + "%",
                      _num(100 * d.bias, "+.1f") + "%", f"{s.n_ok}/{plan.repeats}")
    say(sizes)
    exps = Table("approach", "exponent", "true", "median", "5-95%", "width", "bias",
                 title="exponents")
    for s in plan.spreads:
        if s.budget_flops is None:
            exps.add_row(s.estimator, s.quantity, _num(s.truth), _num(s.median),
                         f"{_num(s.q05, '.3g')}-{_num(s.q95, '.3g')}", _num(s.width, ".3g"),
                         _num(s.bias, "+.3f"))
    say(exps)
    say("width: the 5-95% spread of the estimates over the simulated studies (q95 / q05 for "
        "N_opt, q95 - q05 for exponents); bias: the median against the law's value (C = 6ND, "
        "Hoffmann et al. 2022 eq. 4; approach 2's C is the study's budget, counted by the cost "
        "model); a: N_opt ~ C^a, b: D_opt ~ C^b", highlight=False, markup=False)
