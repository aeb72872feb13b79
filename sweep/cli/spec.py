"""Commands on a spec: ``sweep schema`` (its JSON Schema or field reference), ``validate``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from sweep.cli import common
from sweep.cli.common import app, as_bad_input, bad_input
from sweep.cli.inputs import check_study_inputs
from sweep.schema import METRIC_BASELINE
from sweep.train.peaks import DEFAULT_GPU, DEFAULT_MFU, PEAK_FLOPS, named_gpu

if TYPE_CHECKING:
    from sweep.data import Corpus
    from sweep.spec import StudySpec


@app.command()
def schema(
    markdown: bool = typer.Option(False, "--markdown",
                                  help="Print the field reference (docs/spec-reference.md) "
                                       "instead."),
) -> None:
    """Print the JSON Schema of a study spec (fields, types, defaults, ranges).

    Point a YAML language server at it (``# yaml-language-server: $schema=FILE`` as a spec's
    first line) and an editor checks a spec as it is typed; ``sweep validate`` also checks the
    rules across fields.
    """
    import json

    from sweep.spec.reference import json_schema, reference_markdown

    if markdown:
        typer.echo(reference_markdown(), nl=False)
    else:
        typer.echo(json.dumps(json_schema(), indent=2))


@app.command()
def validate(
    spec_path: str = typer.Argument(..., metavar="SPEC", help="Study spec YAML."),
    samples: int = typer.Option(256, min=1, help="Random configs to price with the cost model."),
    device: str = typer.Option(None, help="Device whose memory bounds max_memory_gb (default: "
                               "the spec's train.device)."),
    gpu: str = typer.Option(DEFAULT_GPU, help="GPU a study's compute is timed on (its datasheet "
                            f"peak): one of {', '.join(PEAK_FLOPS)}."),
    mfu: float = typer.Option(DEFAULT_MFU, help="Fraction of the GPU's peak a run reaches (model "
                              "FLOPs utilisation), in (0, 1]."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Check a spec; print its corpus, search space and cost range without training anything.

    A scaling study adds its grid, its training FLOPs and their wall time on this device and
    on ``--gpu`` at ``--mfu``, and warns (exit 0; ``warnings`` in ``--json``) of a plan that
    cannot give its answer. A ``train.lr: {from_study}`` study shows the law it takes (the
    source, eta_opt = a C^b with the interval of b, the estimator) and the learning rates at
    its smallest and largest budget, and warns of a budget 100x beyond the fitted ones.
    Exits 2 for an invalid spec, a ``from_study`` source without a law, a corpus that cannot be used
    (``data.uri``), an unknown ``--gpu``, or a space in which no sampled config is valid and
    feasible.
    """
    from sweep.spec import load_spec

    at = named_gpu(gpu, mfu)
    spec = load_spec(spec_path)
    import json  # what a valid spec needs, imported only for one

    from sweep.kinds import Described
    from sweep.spec import spec_hash
    from sweep.spec.from_study import resolve_lr

    # As sweep run would: the law a started study keeps (its default folder), else the source's.
    spec, law_notes = resolve_lr(spec, spec.default_output_dir())
    check_study_inputs(spec, device=device)
    corpus = _inspect_corpus(spec)
    from sweep import space

    summary = space.summarize(spec, n_samples=samples, device=device).to_dict()
    n_ok = summary["n_configs"] - summary["n_invalid"] - summary["n_infeasible"]
    if not as_json:
        _print_summary(spec, corpus, summary, n_ok)
    law_lines, law_warnings, law = _lr_law(spec)
    for line in [] if as_json else law_lines:
        _say(line)
    described = spec.kind.describe(spec, _say, device=device, as_json=as_json, gpu=at) \
        if n_ok else Described()
    described.warnings[:0] = law_notes + law_warnings
    if as_json:
        common.console.print_json(json.dumps({"name": spec.name, "spec_hash": spec_hash(spec),
                                              "search": spec.search.model_dump(mode="json"),
                                              "simulate": None if spec.simulate is None else
                                              spec.simulate.model_dump(mode="json"),
                                              "corpus": _corpus_record(spec, corpus),
                                              "lr_law": law or None,
                                              **summary, **described.record,
                                              "warnings": described.warnings}))
    else:
        for line in described.warnings:
            _warn(f"warning: {line}")
    if n_ok == 0:
        bad_input(f"{spec_path}: none of {summary['n_configs']} sampled configs is valid and "
                  "within the constraints; the study could never train a trial")
    if described.problems:
        bad_input("; ".join(described.problems))


def _lr_law(spec: StudySpec) -> tuple[list[str], list[str], dict[str, Any]]:
    """`sweep.space.lr_law.describe_law` over the space's corners and 64 random configs."""
    from sweep import space
    from sweep.space.lr_law import describe_law
    from sweep.spec.from_study import lr_domain

    if lr_domain(spec) is None:
        return [], [], {}
    configs = []
    for params in space.corner_params(spec) + space.sample_params(spec, 64):
        try:
            configs.append(space.configs_from_params(spec, params))
        except space.InvalidConfig:
            continue
    return describe_law(spec, configs)


def _print_summary(spec: StudySpec, corpus: Corpus | None, summary: dict[str, Any],
                   n_ok: int) -> None:
    """The study's search, its corpus, its parameters and its cost range, as tables."""
    from rich.table import Table

    from sweep.spec import spec_hash

    s = spec.search
    common.console.print(f"[bold]{spec.name}[/] ({spec_hash(spec)}): executor {s.executor}, "
                         f"sampler {s.sampler}, pruner {s.pruner}, scheduler {s.scheduler}, "
                         f"{spec.kind.trial_count(spec)} trials, objectives "
                         f"{', '.join(f'{o} ({d})' for o, d in spec.objective_directions())}")
    if spec.simulate is not None:
        from sweep.simulate.source import simulated_tag

        _say(f"SIMULATED: every trial's loss is drawn from a law ({simulated_tag(spec)}); no "
             "model trains")
    table = Table("parameter", "kind", "domain", "when")
    for row in summary["params"]:
        table.add_row(row["path"], row["kind"], row["domain"], row["when"])
    for line in _corpus_lines(spec, corpus):
        _say(line)
    common.console.print(table)
    cost = Table("cost", "min", "max")
    for name, rng in summary["cost"].items():
        cost.add_row(name, *(f"{v:,.0f}" for v in rng) if rng else ("-", "-"))
    common.console.print(cost)
    common.console.print(f"{summary['n_configs']} configs priced (corners + random): {n_ok} ok, "
                         f"{summary['n_invalid']} invalid, {summary['n_infeasible']} over the "
                         "constraints", highlight=False)
    for kind in ("invalid", "infeasible"):
        for example in summary[f"{kind}_examples"]:
            _say(f"  {kind}: {example}")


def _say(line: Any) -> None:
    common.console.print(line, highlight=False, soft_wrap=True)


def _warn(line: str) -> None:
    common.err_console.print(line, highlight=False, soft_wrap=True)


def _inspect_corpus(spec: StudySpec) -> Corpus | None:
    """The spec's corpus, read with `sweep.data.inspect_corpus` (nothing written).

    Exits 2 with a message naming ``data.uri`` when the corpus cannot be used; None for a
    ``text:`` folder over `sweep.data.INSPECT_MAX_BYTES`. Reads the prepared copy under the
    study's default output folder when ``sweep run`` left one there, otherwise the corpus
    itself (for ``text:``, every file and the near-duplicate search of its split: about a
    second per 15 MB on one core).
    """
    from sweep.data import DataError, inspect_corpus
    from sweep.folder import StudyFolder

    with as_bad_input("data.uri", DataError):
        return inspect_corpus(spec.data.uri, vocab_size=spec.data.vocab_size,
                              cache_dir=StudyFolder(spec.default_output_dir()).data)


def _corpus_lines(spec: StudySpec, corpus: Corpus | None) -> list[str]:
    if corpus is not None:
        return corpus.describe()
    from sweep.data import INSPECT_MAX_BYTES

    return [f"corpus {spec.data.uri}: over {INSPECT_MAX_BYTES / 2**20:.0f} MiB of files, so "
            "validate does not read it; sweep run reads and splits it once, when it prepares "
            "the corpus"]


def _corpus_record(spec: StudySpec, corpus: Corpus | None) -> dict[str, Any]:
    if corpus is None:
        return {"uri": spec.data.uri, "read": False}
    return {"uri": corpus.uri, "read": True, "vocab_size": corpus.vocab_size,
            "byte_level": corpus.byte_level, "n_train": len(corpus.train),
            "n_val": len(corpus.val), METRIC_BASELINE: corpus.baseline_unigram_loss,
            "entropy_rate": corpus.entropy_rate, "content_hash": corpus.content_hash,
            **corpus.summary}
