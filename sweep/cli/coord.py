"""``sweep coord-check``: microsoft/mup's coordinate check of a preset or a study's model.

Flags, the spec or preset and the widths are checked before torch is imported, so bad input
exits 2 at once. The work is `sweep.train.coord_check`; this module resolves the model,
prints the table and slopes, and writes the figure and the records.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sweep.cli import common
from sweep.cli.common import app, as_bad_input, bad_input, parse_sets
from sweep.folder import RUNS, StudyFolder, out_problem

if TYPE_CHECKING:
    import torch

    from sweep.spec import StudySpec
    from sweep.train.config import TrainConfig
    from sweep_models import ModelConfig

_DEFAULT_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)
_DEFAULT_LR = 1e-2  # microsoft/mup's examples check at a learning rate near the optimum's top
_PARAMETRIZATIONS = ("sp", "mup", "completep")
_WIDTH_OWNED = ("d_model", "n_heads", "n_kv_heads", "d_ff", "d_head", "d_ff_ratio",
                "parametrization", "base_d_model")


def _parse_widths(raw: str | None, default: tuple[int, ...]) -> list[int]:
    if raw is None:
        return list(default)
    widths = []
    for part in raw.split(","):
        try:
            widths.append(int(part))
        except ValueError:
            bad_input(f"--widths {raw!r}: {part.strip()!r} is not a whole number")
    if len(set(widths)) < 2 or any(w <= 0 for w in widths):
        bad_input(f"--widths {raw!r}: give at least two distinct positive widths, e.g. "
                  "64,128,256")
    return sorted(set(widths))


def _from_spec(path: str, sets: dict[str, Any],
               ) -> tuple[dict[str, Any], dict[str, Any], list[str], StudySpec]:
    """(model fields, train fields, parametrizations, spec) of a study spec's fixed values.

    The width fields and the parametrization may be searched (the check replaces the first
    and compares each choice of the second); any other searched field exits 2 unless ``--set``
    fixes it.
    """
    from sweep.spec import ChoiceDomain, load_spec

    spec = load_spec(path)
    model: dict[str, Any] = {}
    train: dict[str, Any] = {}
    pars: list[str] = []
    loose = []
    for p in spec.params():
        fields = model if p.section == "model" else train
        if p.domain is None:
            fields[p.name] = p.value
        elif p.path == "model.parametrization" and isinstance(p.domain, ChoiceDomain):
            pars = list(p.domain.options)
        elif not (p.section == "model" and p.name in _WIDTH_OWNED) and p.path not in sets \
                and p.path != "train.lr":
            loose.append(p.path)
    if loose:
        bad_input(f"{path}: {', '.join(loose)} searched; fix each with --set KEY=VALUE for the "
                  "coordinate check")
    if "parametrization" in model:
        pars = [model.pop("parametrization")]
    return model, train, pars, spec


def _resolve(spec_or_preset: str, sets: dict[str, Any], widths_raw: str | None,
             pars_raw: str | None, lr: float | None,
             ) -> tuple[ModelConfig, TrainConfig, list[int], list[str], str, StudySpec | None]:
    """Model and train configs, widths, parametrizations, corpus URI and spec (if any).

    Exits 2 on bad input.
    """
    from sweep.train.config import TrainConfig
    from sweep_models import ConfigError, ModelConfig
    from sweep_models.presets import PRESETS, preset_dict

    for key in sets:
        if not key.startswith(("model.", "train.")):
            bad_input(f"--set {key}: give model.FIELD=VALUE or train.FIELD=VALUE")
    spec = None
    train: dict[str, Any]
    pars: list[str]
    if spec_or_preset in PRESETS:
        model, train, pars = preset_dict(spec_or_preset), {}, []
        uri, vocab, widths_default = "builtin:python-stdlib", None, _DEFAULT_WIDTHS
    elif spec_or_preset.endswith((".yaml", ".yml")) or Path(spec_or_preset).exists():
        model, train, pars, spec = _from_spec(spec_or_preset, sets)
        if "preset" in model:
            model = {**preset_dict(model.pop("preset")), **model}
        uri, vocab = spec.data.uri, spec.data.vocab_size
        compared = spec.kind.widths(spec)  # a transfer study's widths and their shape fields
        widths_default = tuple(compared[0]) if compared else _DEFAULT_WIDTHS
        if compared:
            model.update(compared[1])
    else:
        bad_input(f"{spec_or_preset!r}: neither a spec file nor a preset "
                  f"({', '.join(PRESETS)})")
    for key, value in sets.items():
        section, name = key.split(".", 1)
        (model if section == "model" else train)[name] = value
    widths = _parse_widths(widths_raw, widths_default)
    if pars_raw is not None:
        pars = [p.strip() for p in pars_raw.split(",")]
        bad = [p for p in pars if p not in _PARAMETRIZATIONS]
        if bad or not pars:
            bad_input(f"--parametrization {pars_raw!r}: choose from "
                      f"{', '.join(_PARAMETRIZATIONS)}, joined by commas")
    pars = pars or [model.pop("parametrization", None) or "sp", "mup"]
    pars = list(dict.fromkeys(pars))
    model.pop("parametrization", None)
    d_head, ratio = model.pop("d_head", None), model.pop("d_ff_ratio", None)
    if vocab and "vocab_size" not in model:
        model["vocab_size"] = vocab
    model.setdefault("vocab_size", 256)
    if lr is not None:
        train["lr"] = lr
    elif not isinstance(train.get("lr"), (int, float)):
        train["lr"] = _DEFAULT_LR
    width = widths[0]
    model["d_model"] = width
    if d_head is not None:
        model["n_heads"] = max(1, width // d_head)
        model.pop("n_kv_heads", None)
    if ratio is not None:
        model["d_ff"] = max(1, round(ratio * width))
    model.setdefault("base_d_model", width)
    train = {k: v for k, v in train.items() if k not in ("tokens", "flops", "steps", "seconds")}
    with as_bad_input("model or train", ConfigError):
        config = ModelConfig.from_dict(model)
        train_config = TrainConfig.from_dict({**train, "steps": 1})
    return config, train_config, widths, pars, uri, spec


def _print(frame: Any, slopes: dict[int, dict[str, float]], widths: list[int]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from sweep.train.coord_check import log_width_slopes

    table = Table("parametrization", "module", "t", *(str(w) for w in widths),
                  "slope", title="mean |activation| by width (slope: d log / d log width)")
    pivot = frame.pivot_table(index=["parametrization", "module", "t"], columns="width",
                              values="l1", sort=False)
    for (par, module, t), row in pivot.iterrows():
        slope = log_width_slopes(frame, module=module, t=int(t)).get(par, math.nan)
        table.add_row(escape(str(par)), escape(str(module)), str(t),
                      *(f"{row.get(w, math.nan):.4g}" for w in widths), f"{slope:+.2f}")
    common.console.print(table)
    for t, by_par in slopes.items():
        common.console.print(f"logits at t={t}: slope " + ", ".join(
            f"{par} {s:+.2f}" for par, s in by_par.items())
            + " (muP: near 0, flat in width; SP: > 0, growing)", highlight=False)


@app.command("coord-check")
def coord_check(
    spec_or_preset: str = typer.Argument(..., metavar="SPEC_OR_PRESET",
                                         help="A study spec YAML or a model preset."),
    widths: str = typer.Option(None, "--widths", metavar="W1,W2,...",
                               help="d_model values (default: the spec's transfer.widths, "
                                    "else 64,128,256,512)."),
    steps: int = typer.Option(5, "--steps", min=1, max=1000,
                              help="Forward passes recorded (step 1 is the initialisation)."),
    parametrization: str = typer.Option(None, "--parametrization", metavar="P1,P2",
                                        help="sp, mup, completep joined by commas (default: "
                                             "the spec's, else sp,mup)."),
    lr: float = typer.Option(None, "--lr", help="Learning rate (default: the spec's fixed "
                                                "train.lr, else 0.01)."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                   help="model.FIELD=VALUE or train.FIELD=VALUE (repeatable)."),
    batch_size: int = typer.Option(None, "--batch-size", min=1,
                                   help="Sequences in the fixed batch (default: the train "
                                        "config's)."),
    out: str = typer.Option(None, "--out", metavar="DIR",
                            help="Folder for coord_check.png, coord_check.csv and the "
                                 "prepared corpus (default: runs/<study>/coord-check with the "
                                 "study's corpus cache, or runs/coord-check); never the "
                                 "root, a home or system folder, nor a non-empty folder of "
                                 "other files."),
    force_out: bool = typer.Option(False, "--force-out", help="Write into a non-empty --out "
                                   "folder of other files (among files of yours)."),
    device: str = typer.Option("cpu", help="Torch device."),
    as_json: bool = typer.Option(False, "--json", help="Print the records and slopes as JSON."),
) -> None:
    """Coordinate check (Yang et al. 2022; microsoft/mup): activation size against width.

    Trains the model at each width for a few steps on one fixed batch of the corpus and
    prints the mean absolute activation of the embedding, each block and the logits at every
    step, with the slope of its log against log width: about 0 (flat) under muP, positive
    (growing) under SP. Writes the figure (one panel per step) and the records. Exits 2 for
    bad input.
    """
    from sweep.study.preflight import check_device

    check_device("--device", device)
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        bad_input(f"--lr {lr}: must be a finite number > 0")
    config, train, width_list, pars, uri, spec = _resolve(
        spec_or_preset, parse_sets(sets), widths, parametrization, lr)
    # the study's folder (its corpus cache too), else runs/coord-check
    study = StudyFolder(spec.default_output_dir() if spec else RUNS / "coord-check")
    folder = Path(out) if out else (study.root / "coord-check" if spec else study.root)
    problem = out_problem("--out", folder, force=force_out) if out else None
    if problem is not None:
        bad_input(problem)
    from sweep.train.coord_check import width_config
    from sweep_models import ConfigError

    with as_bad_input("--widths", ConfigError):
        for w in width_list:
            for par in pars:
                width_config(config, w, par)
    with as_bad_input(f"--out {folder}", OSError):
        folder.mkdir(parents=True, exist_ok=True)
    # the study's own corpus cache by default; with --out, everything under that folder
    batch = _batch(uri, StudyFolder(folder).data if out else study.data, spec, config, train,
                   batch_size)
    from sweep.train.coord_check import LOGITS, coord_data, coord_figure, log_width_slopes

    frame = coord_data(config, train, batch, width_list, steps, parametrizations=pars,
                       device=device)
    slopes = {steps: log_width_slopes(frame, module=LOGITS, t=steps)}
    with as_bad_input(f"--out {folder}", OSError):
        frame.to_csv(folder / "coord_check.csv", index=False)
        coord_figure(frame, folder / "coord_check.png")
    if as_json:
        print(json.dumps({"widths": width_list, "steps": steps, "lr": train.lr,
                          "parametrizations": pars, "logit_slopes": slopes[steps],
                          "records": frame.to_dict(orient="records")}))
    else:
        _print(frame, slopes, width_list)
    (common.err_console if as_json else common.console).print(
        f"wrote {folder / 'coord_check.png'} and {folder / 'coord_check.csv'}", highlight=False)


def _batch(uri: str, cache: Path, spec: StudySpec | None, config: ModelConfig,
           train: TrainConfig, batch_size: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed batch every width trains on: the corpus's first training batch.

    Its corpus is prepared under ``cache`` (exits 2, naming ``uri``, when it cannot be used).
    """
    import torch

    from sweep.data import DataError, load_corpus

    with as_bad_input(f"data.uri {uri}", DataError):
        corpus = load_corpus(uri, cache, vocab_size=spec.data.vocab_size if spec else None)
        corpus.require(config.seq_len)
    x, y = corpus.train_batch(train.seed, 0, batch_size or train.batch_size, config.seq_len)
    return torch.from_numpy(x), torch.from_numpy(y)
