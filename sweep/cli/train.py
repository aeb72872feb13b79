"""Commands on one config.

``sweep train`` (one training run: from a preset, a config file or a study's trial; tracked in
MLflow, its weights saved with ``--save``), ``sweep sample`` (text from a saved byte-level
model) and ``sweep estimate`` (the cost model).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from sweep.cli import common
from sweep.cli.common import SET_FORMS, app, as_bad_input, bad_input, parse_sets, split_sets
from sweep.folder import RUNS, StudyFolder, out_problem, system_folder
from sweep.schema import TrialState

if TYPE_CHECKING:
    from sweep_models.config import ModelConfig


def _check_save_dir(save: str | None) -> None:
    """Refuse a ``--save`` path that is a file or a folder holding something else."""
    from sweep.train.saved import CONFIG_FILE

    if save is None:
        return
    path = Path(save)
    reason = system_folder(path)
    if reason is not None:
        bad_input(f"--save {save}: {reason}")
    if path.exists() and not path.is_dir():
        bad_input(f"--save {save}: exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not (path / CONFIG_FILE).is_file():
        bad_input(f"--save {save}: a folder that holds files but no saved model's "
                  f"{CONFIG_FILE}; give a new or empty folder, or an earlier --save folder")


def _source(preset, from_study, trial, config, tracking_uri):
    """The starting config: a preset, a config file or a study's trial (and that trial)."""
    from sweep.study.retrain import check_study_folder, from_config_file
    from sweep.study.retrain import from_study as read
    from sweep.train.command import DEFAULT_PRESET, TrainBase

    given = [flag for flag, value in (("--preset", preset), ("--from-study", from_study),
                                      ("--config", config)) if value is not None]
    if len(given) > 1:
        bad_input(f"{' and '.join(given)}: give one starting config")
    if trial is not None and from_study is None:
        bad_input("--trial N needs --from-study STUDY_DIR")
    if config is not None:
        return from_config_file(config), None
    if from_study is not None:
        check_study_folder(from_study, tracking_uri)
        found = read(from_study, trial, tracking_uri)
        return found.base, found
    return TrainBase.from_preset(preset or DEFAULT_PRESET), None


@app.command()
def train(
    preset: str = typer.Option(None, help="Model preset (sweep_models.presets); default tiny."),
    from_study: str = typer.Option(None, "--from-study", metavar="STUDY_DIR",
                                   help="Start from a study's trial: its folder (or name)."),
    trial: int = typer.Option(None, "--trial", metavar="N", min=0,
                              help="With --from-study: the trial (default: the best one)."),
    config: str = typer.Option(None, "--config", metavar="FILE",
                               help="Start from a config file: a study's best_config.yaml."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                   help=f"Override a field (repeatable): {SET_FORMS}."),
    data: str = typer.Option(None, help="Corpus URI (default: the study's or config file's, "
                                        "else builtin:python-stdlib)."),
    budget_tokens: float = typer.Option(None, help="Token budget (default: the study's or "
                                                   "config's, else 2e5)."),
    out: str = typer.Option(None, help="Output folder: prepared corpora and (unless tracked "
                                       "in a study) the MLflow store (default runs/train; "
                                       "with --from-study the study's folder); never the "
                                       "root, a home or system folder, nor a non-empty folder "
                                       "that is not a study's."),
    force_out: bool = typer.Option(False, "--force-out", help="Write into a non-empty --out "
                                   "folder that is not a study's (among files of yours)."),
    save: str = typer.Option(None, "--save", metavar="DIR",
                             help="Save the final weights and config.json here."),
    track: bool = typer.Option(True, "--track/--no-track",
                               help="Log the run to MLflow (default: on)."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", metavar="URI",
                                     help="MLflow store: with --from-study the study's (a "
                                          "server); else where the run goes (default "
                                          "MLFLOW_TRACKING_URI, else OUT/mlflow.db)."),
    device: str = typer.Option(None, help="Training device: auto (CUDA when present, else CPU), "
                               "cpu, cuda or cuda:N (default: the config's train.device, "
                               "auto unless it says otherwise)."),
    as_json: bool = typer.Option(False, "--json", help="End with the result as one JSON line."),
) -> None:
    """Train one model and print its evaluations and result.

    Starts from a preset (default), a config file (``--config``, a study's
    ``best_config.yaml``) or a study's trial (``--from-study``, default its best), with
    ``--set`` overrides on top: ``--from-study runs/quickstart --set train.tokens=2e6`` trains
    the study's best config longer. The run is logged to MLflow: a retrain into the study's
    experiment as ``retrain-trial-N``, any other into experiment ``sweep-train``.

    Exits 0 when training completes, 1 when it diverges, 2 for bad input.
    """
    overrides = split_sets(parse_sets(sets))
    _check_device_flag(device)
    problem = out_problem("--out", out, force=force_out) if out is not None else None
    if problem is not None:
        bad_input(problem)
    _check_save_dir(save)
    base, study_trial = _source(preset, from_study, trial, config, tracking_uri)
    _train(base, study_trial, overrides, data=data, budget_tokens=budget_tokens, out=out,
           save=save, track=track, tracking_uri=tracking_uri, device=device, as_json=as_json)


def _check_store_file(uri: str) -> None:
    """Exit 2 before anything is written when the run's SQLite store is a file of another kind.

    The rule every command applies (`sweep.store_files.mlflow_store_problem`); the file is left
    as it is.
    """
    from sweep.store_files import mlflow_store_problem, sqlite_file

    db = sqlite_file(uri)
    if db is not None and db.exists():
        problem = mlflow_store_problem(db, new_ok=True)
        if problem is not None:
            bad_input(f"the run's tracking store {uri}: {problem}; it is left as it is")


def _train(base, study_trial, overrides, *, data, budget_tokens, out, save, track,
           tracking_uri, device, as_json) -> None:
    """`train` once its flags are read: check, train, track, save, print."""
    import os

    from sweep.train.command import PrintReporter, TrainRequest, result_json

    if out is None:
        out = study_trial.folder if study_trial is not None and study_trial.folder \
            else RUNS / "train"
    if track and study_trial is None:
        _check_store_file(tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
                          or StudyFolder(Path(out)).tracking_uri())
    try:
        request = TrainRequest(base, overrides["model"], overrides["train"], data,
                               budget_tokens, out)
        request.check_fits(device)
        corpus = request.load()
        trainer = request.trainer(corpus, device)
    except ValueError as exc:  # an unknown or unavailable device (sweep.train.hardware)
        bad_input(str(exc))
    lines = common.err_console if as_json else common.console

    def say(line: str) -> None:
        lines.print(line, highlight=False, soft_wrap=True, markup=False)

    if study_trial is not None:
        say(f"retraining trial {study_trial.trial} of study {study_trial.study} "
            f"({study_trial.state}, best val_loss {study_trial.best_val_loss:.4f} after "
            f"{study_trial.tokens:,.0f} tokens) for {request.budget_text()}")
    say(f"{request.model_config.n_layers} layers, d_model {request.model_config.d_model}, "
        f"{trainer.n_params:,} params on {trainer.device}; {corpus.uri}: unigram baseline "
        f"{corpus.baseline_unigram_loss:.4f} nats/token"
        + (f", entropy rate {corpus.entropy_rate:.4f}" if corpus.entropy_rate else ""))
    run = None
    if track:
        from sweep.tracking import default_tracking_uri
        from sweep.tracking.train_run import RetrainOf, start_train_run

        if study_trial is not None:
            uri = study_trial.tracking_uri
            retrain_of = RetrainOf(study_trial.experiment_id, study_trial.trial,
                                   study_trial.run_id)
        else:
            uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") \
                or default_tracking_uri(out)
            retrain_of = None
        params = {"model": request.model_config.to_dict(),
                  "train": request.train_config.to_dict(), "data": {"uri": corpus.uri}}
        run = start_train_run(uri, params, retrain_of)
        run.log_costs(request.cost_estimate(device))
    result = _train_tracked(trainer, run, PrintReporter(say, also=run))
    summary = result_json(result, request, trainer)
    if run is not None:
        summary["run_id"] = run.run_id
    if save is not None and result.state == TrialState.COMPLETE:
        summary["saved_to"] = str(_save(save, trainer, request, corpus, result, run))
    if as_json:
        print(json.dumps(summary))
    else:
        common.console.print(
            f"{result.state}: best val_loss {result.best_val_loss:.4f}, final "
            f"{result.final_val_loss:.4f} (unigram {result.baseline_unigram_loss:.4f}) after "
            f"{result.tokens:,} tokens, {result.steps} steps, {result.wall_s:.1f} s"
            + (f", MFU {result.mfu:.1%}" if result.mfu is not None else ""),
            highlight=False, soft_wrap=True)
        if run is not None:
            say(f"MLflow run {run.run_id}" + (f" ({_run_name(study_trial)})"))
        if "saved_to" in summary:
            say(f"saved to {summary['saved_to']}")
    if result.state != TrialState.COMPLETE:
        common.err_console.print(f"[bold red]trial {result.state}[/]: {result.fail_reason}",
                                 highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


def _run_name(study_trial) -> str:
    from sweep.schema import TRAIN_EXPERIMENT, TRAIN_RUN_NAME, retrain_run_name

    if study_trial is None:
        return f"{TRAIN_RUN_NAME} in experiment {TRAIN_EXPERIMENT}"
    return f"{retrain_run_name(study_trial.trial)} in experiment {study_trial.study}"


def _train_tracked(trainer, run, reporter):
    """Train; a tracked run ends in the result's state (INTERRUPTED on Ctrl-C)."""
    if run is None:
        return trainer.train(reporter)
    with run:
        result = trainer.train(reporter)
        run.log_result(result)
    return result


def _save(save, trainer, request, corpus, result, run):
    """Write the weights and config.json; record where on the run."""
    from pathlib import Path

    from sweep.schema import (
        METRIC_BASELINE,
        METRIC_BEST_VAL_LOSS,
        METRIC_FINAL_VAL_LOSS,
        METRIC_TOKENS,
        SAVED_CONFIG_ARTIFACT,
        TAG_SAVED_TO,
    )
    from sweep.train.saved import CONFIG_FILE, SavedModel, save_model

    source = dict(request.base.source)
    if run is not None:
        source["train_run_id"] = run.run_id
    saved = SavedModel(model=trainer.model.config, train=request.train_config.to_dict(),
                       data=corpus.uri, byte_level=corpus.byte_level, source=source,
                       result={k: v for k, v in result.to_dict().items()
                               if k in (METRIC_BEST_VAL_LOSS, METRIC_FINAL_VAL_LOSS,
                                        METRIC_TOKENS, "steps", METRIC_BASELINE)})
    with as_bad_input(f"--save {save}", OSError):
        save_model(save, trainer.model, saved)
    folder = Path(save).resolve()
    if run is not None:
        run.client.set_tag(run.run_id, TAG_SAVED_TO, str(folder))
        run.client.log_artifact(run.run_id, str(folder / CONFIG_FILE),
                                SAVED_CONFIG_ARTIFACT.rsplit("/", 1)[0])
    return folder


@app.command()
def sample(
    model_dir: str = typer.Argument(..., metavar="MODEL_DIR",
                                    help="A folder `sweep train --save` wrote."),
    prompt: str = typer.Option(..., "--prompt", metavar="TEXT", help="The text to continue."),
    tokens: int = typer.Option(200, "--tokens", metavar="N", min=0,
                               help="Tokens (bytes) to generate."),
    temperature: float = typer.Option(0.8, "--temperature", metavar="T", min=0.0,
                                      help="Softmax temperature; 0 takes the likeliest byte."),
    top_k: int = typer.Option(None, "--top-k", metavar="K", min=1,
                              help="Draw only from the K likeliest bytes (default: all)."),
    seed: int = typer.Option(0, "--seed", metavar="S", help="Sampling seed."),
    device: str = typer.Option("auto", help="Device to run the model on: auto (CUDA when "
                               "present, else CPU), cpu, cuda or cuda:N."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Generate text from a saved byte-level model: the prompt, then what the model adds.

    Only models trained on a byte-level corpus (``builtin:``, ``text:``) read and write text;
    a model of token ids (``tokens:``, ``synthetic:``) is refused, as is an encoder-decoder
    model (it maps a source to a target, it does not continue text), as is a ``config.json``
    whose weights would not fit the device's memory (checked before anything is allocated).
    The same seed gives the same text on the same device. Exits 2 for bad input.
    """
    from sweep.train.saved import read_saved_config

    _check_device_flag(device)
    if not math.isfinite(temperature):
        bad_input(f"--temperature {temperature}: must be a finite number >= 0")
    if not prompt:
        bad_input("--prompt: give at least one character to continue")
    saved = read_saved_config(model_dir)
    if not saved.byte_level:
        bad_input(f"MODEL_DIR {model_dir}: trained on {saved.data or 'an unknown corpus'}, "
                  "whose tokens are ids, not bytes; sweep sample reads and writes text only "
                  "for byte-level models (corpora builtin: and text:)")
    if saved.model.arch != "decoder_only":
        bad_input(f"MODEL_DIR {model_dir}: an {saved.model.arch} model maps a source window to "
                  "a target; sweep sample continues text with a decoder_only model")
    _check_model_fits(model_dir, saved.model, device)
    from sweep.train.generate import BYTE_VOCAB, decode_bytes, encode_text, generate

    ids = encode_text(prompt)
    try:
        from sweep.train.hardware import pick_device
        from sweep.train.saved import load_saved

        module, saved = load_saved(model_dir, device=str(pick_device(device)))
    except ValueError as exc:  # an unknown or unavailable device (sweep.train.hardware)
        bad_input(str(exc))
    out = generate(module, ids, tokens, temperature=temperature, seed=seed,
                   vocab_limit=min(BYTE_VOCAB, saved.model.vocab_size), top_k=top_k)
    text = decode_bytes(out)
    if as_json:
        print(json.dumps({"prompt": prompt, "text": text, "tokens": len(out),
                          "temperature": temperature, "seed": seed, "model_dir": model_dir}))
        return
    typer.echo(prompt + text)


def _check_device_flag(device: str | None) -> None:
    """``--device``, when given, is one a model trains on (`sweep.study.preflight.check_device`)."""
    from sweep.study.preflight import check_device

    if device is not None:
        check_device("--device", device)


def _check_model_fits(model_dir: str, model: ModelConfig, device: str) -> None:
    """Exit 2 unless the fp32 weights of ``model`` (a folder's ``config.json``) fit ``device``.

    Checked from the config before torch allocates anything: the cost model's exact parameter
    count (`sweep_models.cost.params.param_count`) times 4 bytes, against the memory
    `sweep.space.device_memory_bytes` gives the device (as ``sweep train`` checks a config).
    """
    from sweep.space import device_memory_bytes
    from sweep.train.saved import CONFIG_FILE
    from sweep_models.cost.params import param_count

    try:
        have = device_memory_bytes(device)
    except ValueError as exc:  # an unknown or unavailable device (sweep.train.hardware)
        bad_input(f"--device: {exc}")
    n_params = param_count(model)
    if 4.0 * n_params > have:
        bad_input(f"MODEL_DIR {model_dir}: {CONFIG_FILE} model.d_model={model.d_model}, "
                  f"model.n_layers={model.n_layers}, model.vocab_size={model.vocab_size}: "
                  f"{n_params:.3g} parameters need {4.0 * n_params / 1e9:.3g} GB as fp32 "
                  f"weights, over the {have / 1e9:.3g} GB of {common.auto_device(device)}")
