"""Search quality at equal compute: random search, TPE and TPE with pruners on real training.

Each arm searches the same space for a FLOPs budget (``n`` full trials of the space's mean cost,
`sweep_models.cost.flops_per_token` x the trial's tokens); a pruned trial costs only the tokens
it trained. Per arm and study size ``n`` (the spec's ``search.n_trials``, which sets the
sampler's and the pruner's start-up counts), over ``--seeds`` seeds: the best ``best_val_loss``
of a completed trial (what the study recommends) once 25%, 50% and 100% of the budget is spent,
as the mean and a 90% bootstrap percentile interval across seeds, and the mean paired difference
to plain TPE of the same seed (TPE arms share their start-up draws). Before any trial completes
a study's best is the corpus's unigram baseline, the loss of a model that learnt nothing.

The space is the quickstart's shape and learning-rate axes, smaller (``SPACE``), on the
``builtin:python-stdlib`` byte-level corpus; each trial is sampled by the service's own space
translation (`sweep.space.suggest`) and sampler (`sweep.space.make_sampler`) and trained by the
real `sweep.train.Trainer` (directly, not through an executor: MLflow would only add time). The
sampler draws ``train.lr`` as a float; the trial trains at the nearest of ``LR_GRID`` (log
steps of 1.63x), so the objective is piecewise constant in ``lr`` and a config's whole
validation curve is trained once and kept in a cache (``--cache``, JSON) that every arm and seed
reads. Training is deterministic (fixed seed, one CPU thread), so a pruned trial's evaluations
are the first ones of its full curve: the pruner sees, step by step (evaluation index, as
`sweep.executors.optuna.OptunaReporter` reports), what it would see live, and the trial is
charged the tokens up to the evaluation where it was pruned.

The arms: ``random`` and ``tpe`` (`sweep.space.make_sampler`) without pruning; TPE with the
pruners as they were before issue 23 (``median-old``: start-up max(1, min(5, n / 4)) trials,
judging from the first evaluation; ``hyperband-old``, then the default: min_resource 1);
candidates with a warm-up (``median-w3``/``-w5``: no prune before evaluation 3/5, start-up
a third of n in [3, 10]; ``hyperband-w3``: min_resource 3); and ``default``, the service's
pruner as `sweep.space.make_pruner` builds it from the spec.

Prints a table per size and one JSON line. Targets: the default ends no worse than plain TPE
(mean paired difference at 100% of the budget at most +0.005 nats) and better than the old
median rule (lower mean) at every size, and never prunes at a trial's first evaluation.

    python bench/search_quality.py            # about 20 minutes on a loaded 2-core CPU
    python bench/search_quality.py --quick    # a smoke test, under a minute
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
from scipy import stats

from sweep import space
from sweep.data import Corpus, load_corpus
from sweep.spec import StudySpec, parse_spec
from sweep.train import Trainer
from sweep_models.cost import flops_per_token

SPACE: dict[str, Any] = {
    "model": {"seq_len": 64, "n_layers": {"int": [1, 2]},
              "d_model": {"int": [32, 96], "step": 32}, "d_head": 16,
              "d_ff_ratio": {"choice": [2, 4]}},
    "train": {"batch_size": 16, "lr": {"float": [1.0e-3, 3.0e-2], "log": True},
              "warmup": 0.05, "eval_tokens": 4096},
}
LR_GRID = tuple(float(v) for v in np.geomspace(1.0e-3, 3.0e-2, 8))
CHECKPOINTS = (0.25, 0.5, 1.0)


def snap_lr(lr: float) -> float:
    return min(LR_GRID, key=lambda g: abs(math.log(g / lr)))


def bench_spec(tokens: float, n: int, seed: int, **search: Any) -> StudySpec:
    data = {"name": "search-quality", "data": "builtin:python-stdlib",
            "model": dict(SPACE["model"]), "train": {**SPACE["train"], "tokens": tokens},
            "search": {"n_trials": n, "seed": seed, **search}}
    return parse_spec(data)


# ----------------------------------------------------------------------------- the arms
def _median_old(n: int) -> Any:
    # make_pruner's median before issue 23: start-up max(1, min(5, n // 4)), from evaluation 1.
    return optuna.pruners.MedianPruner(n_startup_trials=max(1, min(5, n // 4)), n_warmup_steps=1)


def _hyperband_old(n: int) -> Any:
    # The default pruner before issue 23: its first rung at evaluation 1.
    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource="auto", reduction_factor=3)


def _median_warm(warmup: int) -> Callable[[int], Any]:
    def make(n: int) -> Any:
        return optuna.pruners.MedianPruner(n_startup_trials=max(3, min(10, n // 3)),
                                           n_warmup_steps=warmup)
    return make


def _hyperband_warm(min_resource: int) -> Callable[[int], Any]:
    def make(n: int) -> Any:
        return optuna.pruners.HyperbandPruner(min_resource=min_resource, max_resource="auto",
                                              reduction_factor=3)
    return make


# name -> (sampler, pruner for a study of n trials; None: none, "default": the service's)
ARMS: dict[str, tuple[str, Any]] = {
    "random": ("random", None),
    "tpe": ("tpe", None),
    "tpe+median-old": ("tpe", _median_old),
    "tpe+hyperband-old": ("tpe", _hyperband_old),
    "tpe+median-w3": ("tpe", _median_warm(3)),
    "tpe+median-w5": ("tpe", _median_warm(5)),
    "tpe+hyperband-w3": ("tpe", _hyperband_warm(3)),
    "default": ("tpe", "default"),
}


# ---------------------------------------------------------------------- the curve cache
class CurveBank:
    """Full validation curves of snapped configs, trained on first use and kept as JSON."""

    def __init__(self, path: Path, corpus: Corpus) -> None:
        self.path, self.corpus = path, corpus
        self.curves: dict[str, dict[str, Any]] = (
            json.loads(path.read_text()) if path.exists() else {})
        self.trained, self.train_s = 0, 0.0

    def curve(self, key: str, model: Any, train: Any) -> dict[str, Any]:
        if key not in self.curves:
            t0 = time.perf_counter()
            result = Trainer(model, train, self.corpus, device="cpu").train()
            self.train_s += time.perf_counter() - t0
            self.trained += 1
            self.curves[key] = {
                "evals": [[int(h["tokens"]), float(h["val_loss"])] for h in result.history],
                "tokens": result.tokens, "state": result.state.value,
                "flops_per_token": flops_per_token(model, train=True)}
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.curves))
            tmp.replace(self.path)
        return self.curves[key]


# ------------------------------------------------------------------------- one study
def _replay(trial: optuna.Trial, entry: dict[str, Any]) -> tuple[int, int | None]:
    """Report the curve as the live trial would; the tokens trained and the pruned step."""
    for step, (tokens, loss) in enumerate(entry["evals"], 1):
        trial.report(loss, step)
        if trial.should_prune():
            return tokens, step
    return entry["tokens"], None


def run_study(arm: str, spec: StudySpec, budget: float, bank: CurveBank,
              baseline: float) -> dict[str, Any]:
    """One arm's study until ``budget`` FLOPs are spent: its (FLOPs, best) trace and counts."""
    sampler_name, pruner = ARMS[arm]
    spec = spec.model_copy(update={"search": spec.search.model_copy(
        update={"sampler": sampler_name})})
    if pruner is None:
        made = optuna.pruners.NopPruner()
    elif pruner == "default":
        made = space.make_pruner(spec)
    else:
        made = pruner(spec.search.n_trials)
    # A fixed name: Hyperband puts a trial in a bracket by a hash of the study name and number.
    name = f"{arm}-n{spec.search.n_trials}-seed{spec.search.seed}"
    study = optuna.create_study(study_name=name, sampler=space.make_sampler(spec), pruner=made)
    spent, best = 0.0, baseline
    trace: list[tuple[float, float]] = []
    counts = {"trials": 0, "pruned": 0, "pruned_first": 0}
    while spent < budget:
        trial = study.ask()
        model, train = space.suggest(trial, spec)
        train = train.replace(lr=snap_lr(train.lr), device="cpu")
        key = json.dumps({**trial.params, "train.lr": train.lr}, sort_keys=True)
        entry = bank.curve(key, model, train)
        tokens, pruned_at = _replay(trial, entry)
        spent += tokens * entry["flops_per_token"]
        counts["trials"] += 1
        if pruned_at is not None:
            counts["pruned"] += 1
            counts["pruned_first"] += pruned_at == 1
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif entry["state"] != "COMPLETE":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            value = min(loss for _, loss in entry["evals"])
            study.tell(trial, value)
            best = min(best, value)
        trace.append((spent, best))
    return {"trace": trace, **counts}


def best_at(trace: list[tuple[float, float]], flops: float, baseline: float) -> float:
    done = [best for spent, best in trace if spent <= flops]
    return done[-1] if done else baseline


# ----------------------------------------------------------------------------- figures
def interval(values: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean and 90% bootstrap percentile interval (2000 resamples) of ``values``."""
    data = np.asarray(values, dtype=float)
    means = data[rng.integers(0, len(data), (2000, len(data)))].mean(axis=1)
    return float(data.mean()), float(np.quantile(means, 0.05)), float(np.quantile(means, 0.95))


def summarize(runs: dict[str, list[dict[str, Any]]], budget: float,
              baseline: float) -> dict[str, Any]:
    """Per arm: the best loss at each checkpoint, the paired difference to TPE, the counts."""
    rng = np.random.default_rng(0)
    reference = runs.get("tpe")
    rows: dict[str, Any] = {}
    for arm, studies in runs.items():
        row: dict[str, Any] = {}
        for frac in CHECKPOINTS:
            bests = [best_at(s["trace"], frac * budget, baseline) for s in studies]
            row[f"best@{frac:g}"] = interval(bests, rng)
            if reference is not None:
                diffs = [b - best_at(r["trace"], frac * budget, baseline)
                         for b, r in zip(bests, reference, strict=True)]
                row[f"vs_tpe@{frac:g}"] = interval(diffs, rng)
        trials = sum(s["trials"] for s in studies)
        row["trials_per_study"] = trials / len(studies)
        row["pruned_frac"] = sum(s["pruned"] for s in studies) / trials
        row["pruned_first_frac"] = sum(s["pruned_first"] for s in studies) / trials
        rows[arm] = row
    return rows


def early_ranks(bank: CurveBank) -> list[dict[str, float]]:
    """Per evaluation: its share of the budget, the rank correlation of its val_loss with the
    config's best (Spearman, over every cached complete curve), and with ``lr``.
    """
    curves = [(json.loads(k)["train.lr"], e["evals"]) for k, e in bank.curves.items()
              if e["state"] == "COMPLETE"]
    lengths = {len(evals) for _, evals in curves}
    if len(curves) < 3 or len(lengths) != 1:
        return []
    rho = stats.spearmanr  # tied values get their mean rank
    best = [min(v for _, v in evals) for _, evals in curves]
    lrs = [lr for lr, _ in curves]
    total = curves[0][1][-1][0]
    out = []
    for k in range(lengths.pop()):
        losses = [evals[k][1] for _, evals in curves]
        out.append({"evaluation": k + 1, "budget_frac": curves[0][1][k][0] / total,
                    "rho_best": float(rho(losses, best)[0]),
                    "rho_lr": float(rho(losses, lrs)[0])})
    return out


def rank_table(rows: list[dict[str, float]]) -> str:
    lines = ["Spearman rank correlation of each evaluation's val_loss with the config's best, "
             "and with lr (every cached curve)", "| evaluation | budget | with best | with lr |",
             "|---|---|---|---|"]
    lines += [f"| {r['evaluation']} | {r['budget_frac']:.0%} | {r['rho_best']:+.2f} | "
              f"{r['rho_lr']:+.2f} |" for r in rows]
    return "\n".join(lines)


def table(n: int, rows: dict[str, Any]) -> str:
    head = (f"n_trials={n}: best val_loss (nats/token), mean [90% CI] over seeds\n"
            f"| arm | 25% of FLOPs | 50% | 100% | 100% minus tpe | trials | pruned | "
            f"at 1st eval |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for arm, row in rows.items():
        cells = [f"{m:.4f} [{lo:.4f}, {hi:.4f}]"
                 for m, lo, hi in (row[f"best@{f:g}"] for f in CHECKPOINTS)]
        m, lo, hi = row.get("vs_tpe@1", (math.nan,) * 3)
        cells.append(f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}]")
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {row['trials_per_study']:.1f} | "
                     f"{row['pruned_frac']:.0%} | {row['pruned_first_frac']:.0%} |")
    return "\n".join(lines)


def targets(summaries: dict[int, dict[str, Any]]) -> dict[str, bool]:
    rows = summaries.values()
    return {
        "default_no_worse_than_tpe": all(r["default"]["vs_tpe@1"][0] <= 0.005 for r in rows),
        "default_beats_median_old": all(
            r["default"]["best@1"][0] < r["tpe+median-old"]["best@1"][0] for r in rows),
        "default_never_prunes_at_first_eval": all(
            r["default"]["pruned_first_frac"] == 0 for r in rows)}


# ------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke test: tiny budget")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per arm (default 20)")
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="study sizes n_trials (default 4 8 20)")
    parser.add_argument("--tokens", type=float, default=None, help="tokens per full trial")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--cache", type=Path, default=None, help="the curve cache (JSON)")
    args = parser.parse_args()
    seeds = args.seeds or (2 if args.quick else 20)
    sizes = args.sizes or ([4] if args.quick else [4, 8, 20])
    tokens = args.tokens or (1.0e4 if args.quick else 6.0e4)
    torch.set_num_threads(1)  # deterministic curves, and the fast case on a shared CPU
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tag = hashlib.sha256(json.dumps([SPACE, LR_GRID, tokens]).encode()).hexdigest()[:10]
    cache = args.cache or Path(tempfile.gettempdir()) / f"search-quality-{tag}.json"
    corpus = load_corpus("builtin:python-stdlib", cache.parent / "search-quality-corpus")
    bank, baseline = CurveBank(cache, corpus), corpus.baseline_unigram_loss
    t0 = time.perf_counter()
    summaries: dict[int, dict[str, Any]] = {}
    for n in sizes:
        grid = bench_spec(tokens, n, 0)
        mean_flops = float(np.mean([
            tokens * flops_per_token(space.configs_from_params(grid, p)[0], train=True)
            for p in space.sample_params(grid, 1000, seed=0)]))
        budget = n * mean_flops
        runs = {arm: [run_study(arm, bench_spec(tokens, n, seed), budget, bank, baseline)
                      for seed in range(seeds)] for arm in args.arms}
        summaries[n] = summarize(runs, budget, baseline)
        print(table(n, summaries[n]), flush=True)
    ranks = early_ranks(bank)
    print(rank_table(ranks))
    line = {"bench": "search_quality", "tokens_per_trial": tokens, "seeds": seeds,
            "sizes": sizes, "baseline_unigram_loss": baseline, "cache": str(cache),
            "configs_trained": bank.trained, "train_s": round(bank.train_s, 1),
            "wall_s": round(time.perf_counter() - t0, 1),
            "best_in_cache": min(min(v for _, v in e["evals"]) for e in bank.curves.values()
                                 if e["state"] == "COMPLETE"),
            "early_ranks": ranks, "results": {str(n): s for n, s in summaries.items()}}
    if {"default", "tpe", "tpe+median-old"} <= set(args.arms):
        line["targets"] = targets(summaries)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
