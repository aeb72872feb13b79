"""The descriptions MLflow's UI shows above a study's experiment and its parent run (markdown).

MLflow keeps a description in tag ``mlflow.note.content`` (`sweep.schema.TAG_NOTE`) of the
experiment or the run. The experiment's says what the study is and how it was made; the
parent run's holds what a researcher looks for first: the best trial and its loss against the
unigram baseline, the trials per state, the corpus and the search. A trial run's says its state
and why in one line, which the runs table shows in its Description column beside the run's
name (where MLflow's status icon shows PRUNED and COMPLETE alike as finished). Pure functions
of what the tracker knows, so the text is tested without a store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from sweep.schema import TrialState, run_name


def _code(text: str) -> str:
    """``text`` as inline markdown code (backticks inside become quotes)."""
    return "`" + text.replace("`", "'") + "`"


def experiment_note(study: str, spec_hash: str, command: str | None,
                    resumed_by: str | None = None) -> str:
    """The experiment's description: the study, its spec hash and the command that made it.

    Args:
        study: The study's name.
        spec_hash: Tag ``sweep.spec_hash`` of its latest start.
        command: The command that created the study (None: made through the Python API).
        resumed_by: The command of its latest start when that was a resume with another command.
    """
    lines = [f"transformer-sweep study **{study}**, spec hash {_code(spec_hash)}, made by "
             + (_code(command) if command else "the Python API (`sweep.study.run_study`)")
             + "."]
    if resumed_by and resumed_by != command:
        lines.append(f"Last resumed by {_code(resumed_by)}.")
    lines.append("")
    lines.append(f"The run **{study}** holds the study's summary (best trial, trials per state, "
                 "`trials.csv`, `best_config.yaml`, `plots/`); its nested `trial-<n>` runs are "
                 "the trials, one each, their state and its reason in their description.")
    return "\n".join(lines)


def parent_note(study: str, *, state: TrialState, counts: Mapping[str, int],
                best_trial: int | None = None, best_run_url: str | None = None,
                best_val_loss: float = math.nan, baseline: float = math.nan,
                corpus: Sequence[str] = (), executor: str | None = None,
                algorithm: str | None = None, reason: str | None = None) -> str:
    """The parent run's description: the summary of the study so far, most wanted first.

    Args:
        study: The study's name.
        state: The parent's state: ``RUNNING`` while trials train, then its end state.
        counts: Trials per state (states with none are left out).
        best_trial: The best completed trial's number, if any.
        best_run_url: A link to its run (``#/experiments/<id>/runs/<run_id>``).
        best_val_loss: Its best val loss, nats/token.
        baseline: The corpus's unigram baseline on val, nats/token (nan if unknown).
        corpus: Lines describing the corpus (`sweep.data.Corpus.describe`), one bullet each.
        executor: ``optuna`` or ``ray``.
        algorithm: The sampler and pruner or scheduler (tag ``sweep.algorithm``).
        reason: Why the study stopped early (an ``INTERRUPTED`` or ``FAILED`` parent).
    """
    if state is TrialState.RUNNING:
        head = f"**{study}** is running; this summary is written when it ends."
    else:
        head = f"**{study}**: {state.value}."
        if reason:
            head += f" Stopped: {reason}"
    lines = [head, ""]
    if best_trial is not None and math.isfinite(best_val_loss):
        name = run_name(best_trial)
        best = f"[{name}]({best_run_url})" if best_run_url else name
        line = f"- best trial: **{best}**, best val loss **{best_val_loss:.4f}** nats/token"
        if math.isfinite(baseline) and baseline > 0:
            line += (f", **{best_val_loss / baseline:.3f}** x the unigram baseline "
                     f"({baseline:.4f}; below 1 is better than any model that ignores context)")
        lines.append(line)
    elif state is not TrialState.RUNNING:
        lines.append("- best trial: none completed")
    shown = [f"{n} {s}" for s, n in counts.items() if n]
    if shown:
        lines.append(f"- trials: {', '.join(shown)}")
    lines += [f"- {line}" for line in corpus]
    if executor or algorithm:
        lines.append(f"- search: {' '.join(x for x in (executor, algorithm) if x)}")
    return "\n".join(lines)


def trial_note(state: TrialState, *, tokens: int = -1, reason: str | None = None) -> str:
    """A trial run's description: its state, where it stopped, and why (one line).

    Args:
        state: The trial's final state.
        tokens: Tokens trained at its last evaluation (-1: none), shown for a trial that
            stopped before its budget (every state but ``COMPLETE``).
        reason: Why it ended so (tag ``sweep.fail_reason``), if any.
    """
    line = state.value
    if tokens >= 0 and state is not TrialState.COMPLETE:
        line += f" at {tokens:,} tokens"
    if reason:
        line += f": {reason}"
    return line
