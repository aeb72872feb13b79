"""Commands on one config.

``sweep train`` (one training run: from a preset, a config file or a study's trial; tracked in
MLflow, its weights saved with ``--save``), ``sweep sample`` (text from a saved byte-level
model) and ``sweep estimate`` (the cost model).
"""

from __future__ import annotations

import json
import math

import typer
from rich.table import Table

from sweep.cli import common
from sweep.cli.common import SET_FORMS, app, bad_input, parse_sets, split_sets
from sweep.folder import RUNS
from sweep.schema import TrialState


def _check_save_dir(save: str | None) -> None:
    """Refuse a ``--save`` path that is a file or a folder holding something else."""
    from pathlib import Path

    from sweep.train.saved import CONFIG_FILE

    if save is None:
        return
    path = Path(save)
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
                                       "with --from-study the study's folder)."),
    save: str = typer.Option(None, "--save", metavar="DIR",
                             help="Save the final weights and config.json here."),
    track: bool = typer.Option(True, "--track/--no-track",
                               help="Log the run to MLflow (default: on)."),
    tracking_uri: str = typer.Option(None, "--tracking-uri", metavar="URI",
                                     help="MLflow store: with --from-study the study's (a "
                                          "server); else where the run goes (default "
                                          "MLFLOW_TRACKING_URI, else OUT/mlflow.db)."),
    device: str = typer.Option(None, help="Training device (default: CUDA when present)."),
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
    from sweep_models.errors import ConfigError

    overrides = split_sets(parse_sets(sets))
    _check_save_dir(save)
    try:
        base, study_trial = _source(preset, from_study, trial, config, tracking_uri)
    except ConfigError as exc:
        bad_input(str(exc))
    _train(base, study_trial, overrides, data=data, budget_tokens=budget_tokens, out=out,
           save=save, track=track, tracking_uri=tracking_uri, device=device, as_json=as_json)


def _train(base, study_trial, overrides, *, data, budget_tokens, out, save, track,
           tracking_uri, device, as_json) -> None:
    """`train` once its flags are read: check, train, track, save, print."""
    import os

    from sweep.data import DataError
    from sweep.train.command import PrintReporter, TrainRequest, result_json
    from sweep_models.errors import ConfigError

    if out is None:
        out = study_trial.folder if study_trial is not None and study_trial.folder \
            else RUNS / "train"
    try:
        request = TrainRequest(base, overrides["model"], overrides["train"], data,
                               budget_tokens, out)
        request.check_fits(device)
        corpus = request.load()
        trainer = request.trainer(corpus, device)
    except (ConfigError, DataError, ValueError) as exc:
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
    try:
        save_model(save, trainer.model, saved)
    except OSError as exc:
        bad_input(f"--save {save}: {exc.strerror or exc}")
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
    device: str = typer.Option("cpu", help="Device to run the model on."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Generate text from a saved byte-level model: the prompt, then what the model adds.

    Only models trained on a byte-level corpus (``builtin:``, ``text:``) read and write text;
    a model of token ids (``tokens:``, ``synthetic:``) is refused, as is an encoder-decoder
    model (it maps a source to a target, it does not continue text). The same seed gives the
    same text. Exits 2 for bad input.
    """
    from sweep.train.saved import read_saved_config
    from sweep_models.errors import ConfigError

    if not math.isfinite(temperature):
        bad_input(f"--temperature {temperature}: must be a finite number >= 0")
    if not prompt:
        bad_input("--prompt: give at least one character to continue")
    try:
        saved = read_saved_config(model_dir)
    except ConfigError as exc:
        bad_input(str(exc))
    if not saved.byte_level:
        bad_input(f"MODEL_DIR {model_dir}: trained on {saved.data or 'an unknown corpus'}, "
                  "whose tokens are ids, not bytes; sweep sample reads and writes text only "
                  "for byte-level models (corpora builtin: and text:)")
    if saved.model.arch != "decoder_only":
        bad_input(f"MODEL_DIR {model_dir}: an {saved.model.arch} model maps a source window to "
                  "a target; sweep sample continues text with a decoder_only model")
    from sweep.train.generate import BYTE_VOCAB, decode_bytes, encode_text, generate

    ids = encode_text(prompt)
    try:
        from sweep.train.hardware import pick_device
        from sweep.train.saved import load_saved

        module, saved = load_saved(model_dir, device=str(pick_device(device)))
    except (ConfigError, ValueError) as exc:
        bad_input(str(exc))
    out = generate(module, ids, tokens, temperature=temperature, seed=seed,
                   vocab_limit=min(BYTE_VOCAB, saved.model.vocab_size), top_k=top_k)
    text = decode_bytes(out)
    if as_json:
        print(json.dumps({"prompt": prompt, "text": text, "tokens": len(out),
                          "temperature": temperature, "seed": seed, "model_dir": model_dir}))
        return
    typer.echo(prompt + text)


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n} B"


def _parametrization_rows(table: Table, config) -> None:
    """The parametrization and, for muP and CompleteP, its base shape (no cost depends on it)."""
    from sweep_models import parametrization

    name = config.parametrization
    if name == "completep":
        name += f", alpha {config.completep_alpha:g}"
    table.add_row("parametrization (costs as sp)", name)
    if config.parametrization != "sp":
        table.add_row("base d_model / width_mult",
                      f"{config.base_d_model} / {parametrization.width_mult(config):g}")
    if config.parametrization == "completep":
        table.add_row("base n_layers / depth_mult",
                      f"{config.base_n_layers} / {parametrization.depth_mult(config):g}")


def _encoder_decoder_rows(table: Table, config, attn: dict, seq_len: int) -> None:
    """The two stacks, the window's split and the pairs of each attention."""
    src = config.src_len
    table.add_row("layers: encoder + decoder",
                  f"{config.n_encoder_layers} + {config.n_decoder_layers}")
    table.add_row("tokens: source + target", f"{src} + {seq_len - src}")
    table.add_row("pairs: encoder / decoder / cross",
                  f"{attn['encoder_pairs']:,} / {attn['decoder_pairs']:,} / "
                  f"{attn['cross_pairs']:,}")


@app.command("estimate")
def estimate_cmd(
    preset: str = typer.Option("gpt2", help="Model preset to start from."),
    sets: list[str] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                   help="Override a model field (repeatable): FIELD=VALUE or "
                                        "model.FIELD=VALUE."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Sequences per step."),
    seq_len: int = typer.Option(None, "--seq-len", help="Tokens per sequence (<= the "
                                "config's seq_len; change that with --set seq_len=N)."),
    dtype: str = typer.Option("fp32", help="fp32, or bf16 (autocast, fp32 weights)."),
    optimizer: str = typer.Option("adamw", help="adamw, or sgd (with momentum)."),
    attn_backend: str = typer.Option(None, "--attn-backend",
                                     help="auto, sdpa, flex or math (default: the config's)."),
    device: str = typer.Option("cuda", help="cuda or cpu: which kernels the estimate assumes."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Parameters, FLOPs per token and training memory of a model, without building it."""
    from sweep_models import ConfigError, ModelConfig
    from sweep_models import cost as cost_model

    overrides = split_sets(parse_sets(sets), ("model",))["model"]
    try:
        config = ModelConfig.from_preset(preset, **overrides)
        est = cost_model.estimate(config, batch_size=batch_size, seq_len=seq_len, dtype=dtype,
                                  optimizer=optimizer, attn_backend=attn_backend, device=device)
    except ConfigError as exc:
        bad_input(str(exc))
    if as_json:
        typer.echo(json.dumps({"preset": preset, "config": config.to_dict(), **est.to_dict()}))
        return
    title = " ".join([preset, *(f"{k}={v}" for k, v in overrides.items())])
    table = Table("quantity", "value", title=title)
    table.add_row("parameters", f"{est.n_params:,}")
    table.add_row("non-embedding parameters", f"{est.n_params_non_embedding:,}")
    table.add_row("FLOPs/token forward (kept pairs)", f"{est.flops_per_token_fwd:,.0f}")
    table.add_row("FLOPs/token train (kept pairs)", f"{est.flops_per_token_train:,.0f}")
    dense = "all pairs" if config.arch == "encoder_decoder" else "6N + 12LHqT"
    table.add_row(f"FLOPs/token train (dense, {dense})",
                  f"{est.flops_per_token_dense_train:,.0f}")
    heads = f"{config.n_heads} / {config.n_kv_heads}"
    if config.n_kv_heads != config.n_heads:
        heads += " (multi-query)" if config.n_kv_heads == 1 else " (grouped-query)"
    table.add_row("heads: query / key-value", heads)
    _parametrization_rows(table, config)
    attn = est.attn_layout
    if config.arch == "encoder_decoder":
        _encoder_decoder_rows(table, config, attn, est.seq_len)
    size = ", ".join(f"{k}={attn[k]}" for k in ("window", "stride", "block_size",
                                                 "n_window_blocks", "n_global_blocks",
                                                 "n_random_blocks") if k in attn)
    table.add_row("attention", f"{attn['pattern']} {size}".strip())
    table.add_row("attention sparsity (achieved / asked)",
                  f"{attn['sparsity']:.4f} / {attn['requested_sparsity']:.4f}")
    table.add_section()
    for name, value in est.memory.to_dict().items():
        table.add_row(f"memory: {name}", _format_bytes(value))
    common.console.print(table)
    common.console.print(f"B={est.batch_size}, T={est.seq_len}, {est.dtype}, {est.optimizer}, "
                  f"attention backend {est.attn_backend} on {est.device}; memory total is the "
                  "peak of a steady-state training step"
                  + ("; a token is any token of the window, source or target"
                     if config.arch == "encoder_decoder" else ""), highlight=False)
