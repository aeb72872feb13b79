"""From sweep to model: the starting configs of ``sweep train`` that a study made.

`from_study` reads a study's trial back from MLflow (default: the best completed trial) with
the study's corpus (its stored ``spec.yaml``); `from_config_file` reads a config file with
``model``, ``train`` and ``data`` sections, the layout of the study's ``best_config.yaml``.
Either becomes a `sweep.train.command.TrainBase`, on which ``--set`` overrides (a longer
budget: ``--set train.tokens=2e6``) are applied. The params a trial logged are its whole
resolved config, so a retrain without overrides trains exactly the trial again (the same
seed, the same losses on the same device). A population-based-training member is retrained
from its initial hyperparameters: its mutations and the weights it copied from other members
are not a config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweep.folder import StudyFolder, find_store
from sweep.params import config_params, unflatten_params
from sweep.schema import METRIC_BEST_VAL_LOSS, METRIC_TOKENS, TrialState
from sweep.train.command import TrainBase
from sweep_models.errors import ConfigError

__all__ = ["StudyTrial", "check_study_folder", "from_config_file", "from_study"]

#: The sections a config file (``best_config.yaml``) may hold.
CONFIG_SECTIONS = ("data", "model", "train")
#: The largest config file read, in bytes (a best_config.yaml is under 2 KB).
MAX_CONFIG_BYTES = 1_000_000


@dataclass
class StudyTrial:
    """A study's trial to train again.

    Attributes:
        base: Its config as a starting point (``source``: study, trial, run id).
        tracking_uri: The study's MLflow store.
        study: The study (experiment) name.
        experiment_id: Its experiment.
        trial: The trial number.
        run_id: The trial's run.
        state: The trial's final state.
        best_val_loss: Its best val loss, nats/token (nan if none).
        tokens: Training tokens it trained.
        folder: The study's folder (its prepared corpora are reused), or None for a study on
            a tracking server.
    """

    base: TrainBase
    tracking_uri: str
    study: str
    experiment_id: str
    trial: int
    run_id: str
    state: TrialState
    best_val_loss: float
    tokens: float
    folder: Path | None


def _data_section(value: Any, where: str) -> tuple[str, int | None]:
    """``(uri, vocab_size)`` of a ``data`` section (a URI, or ``{uri, vocab_size}``)."""
    from pydantic import ValidationError

    from sweep.spec.schema import DataSpec

    try:
        data = DataSpec.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{where}: data{'.' + loc if loc else ''}: "
                          f"{first['msg'].removeprefix('Value error, ')}") from None
    return data.uri, data.vocab_size


def from_config_file(path: Path | str) -> TrainBase:
    """A starting config from a YAML file: ``model`` and ``train`` fields, ``data`` (a URI).

    The study's ``best_config.yaml`` has this layout; ``data`` may be left out (then
    ``--data`` or the default corpus). Read with the spec loader's safe YAML reader (no
    aliases, object tags or duplicate keys).

    Raises:
        ConfigError: The file is missing, too large, not YAML, or holds other sections or
            sections that are not mappings (the message names ``--config FILE``).
    """
    import yaml

    from sweep.spec.yaml_safe import read_yaml

    path = Path(path)
    where = f"--config {path}"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the file: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: over {MAX_CONFIG_BYTES:,} bytes; a config file is a page "
                          "of YAML")
    try:
        data = read_yaml(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
        first = " ".join(str(exc).split())[:200]
        raise ConfigError(f"{where}: not a YAML config ({first})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping with sections "
                          f"{', '.join(CONFIG_SECTIONS)}")
    unknown = sorted(str(k) for k in data if k not in CONFIG_SECTIONS)
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {', '.join(unknown)}; a config file "
                          f"holds {', '.join(CONFIG_SECTIONS)}")
    for section in ("model", "train"):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"{where}: {section} must be a mapping of {section} fields")
    if not data.get("model"):
        raise ConfigError(f"{where}: no model section (the model's fields)")
    base = TrainBase(model=dict(data["model"]), train=dict(data.get("train") or {}),
                     source={"config": str(path.resolve())})
    if "data" in data:
        base.data, base.data_vocab_size = _data_section(data["data"], where)
    return base


def check_study_folder(study_dir: str, tracking_uri: str | None) -> None:
    """Refuse a ``--from-study`` folder that holds no study store, without loading MLflow.

    Raises:
        ConfigError: Neither ``STUDY_DIR/mlflow.db`` nor ``runs/STUDY_DIR/mlflow.db`` exists
            (and no ``--tracking-uri`` names a store).
    """
    if tracking_uri is not None:
        return
    if find_store(study_dir) is None:
        raise ConfigError(f"--from-study {study_dir}: no study there (no "
                          f"{StudyFolder(Path(study_dir)).mlflow_db}); give the folder `sweep "
                          "run` wrote, or --tracking-uri for a study on a tracking server")


def from_study(study_dir: str, trial: int | None = None,
               tracking_uri: str | None = None) -> StudyTrial:
    """A study's trial as a starting config: its resolved params and the study's corpus.

    Args:
        study_dir: The study's folder (holding ``mlflow.db``), its ``mlflow.db``, or its name
            (``./runs/<name>``, or the experiment on ``tracking_uri``).
        trial: The trial number; None: the best COMPLETE trial by ``best_val_loss``.
        tracking_uri: The study's tracking server, when it is not a folder's SQLite store.

    Raises:
        ConfigError: No such study, no such trial (naming the trials there), no completed
            trial to pick, or a trial without a config (an infeasible draw).
    """
    from sweep.results import StudyNotFoundError, resolve_study
    from sweep.tracking import (
        StoredSpecError,
        UnreachableStoreError,
        find_study,
        read_stored_spec,
        read_trials,
    )

    check_study_folder(study_dir, tracking_uri)
    where = f"--from-study {study_dir}"
    try:
        uri, name = resolve_study(study_dir, tracking_uri)
    except (StudyNotFoundError, UnreachableStoreError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    found = find_study(uri, name)
    if found is None:
        raise ConfigError(f"{where}: the store holds no study {name!r}")
    experiment_id, parent_run_id = found
    trials = read_trials(uri, experiment_id, parent_run_id)
    if trial is None:
        ranked = [t for t in trials if t["state"] is TrialState.COMPLETE
                  and math.isfinite(t["metrics"].get(METRIC_BEST_VAL_LOSS, math.nan))]
        if not ranked:
            raise ConfigError(f"{where}: study {name} has no COMPLETE trial with a val loss "
                              "to pick as the best; name one with --trial N")
        chosen = min(ranked, key=lambda t: t["metrics"][METRIC_BEST_VAL_LOSS])
    else:
        matching = [t for t in trials if t["trial"] == trial]
        if not matching:
            numbers = sorted({t["trial"] for t in trials})
            raise ConfigError(f"--trial {trial}: study {name} has no trial {trial} (its "
                              f"trials: {', '.join(map(str, numbers)) or 'none'})")
        chosen = matching[-1]
    config = unflatten_params(config_params(chosen["params"]))
    if not isinstance(config.get("model"), dict) or not isinstance(config.get("train"), dict):
        raise ConfigError(f"--trial {chosen['trial']}: trial {chosen['trial']} of {name} "
                          f"({chosen['state']}) logged no resolved config to train again")
    try:
        spec = read_stored_spec(uri, parent_run_id)
    except StoredSpecError as exc:
        raise ConfigError(f"{where}: the study's spec.yaml cannot be read: {exc}") from None
    data, vocab = _data_section(spec.get("data"), f"{where} (its spec.yaml)")
    from sweep.tracking.uris import sqlite_path

    db = sqlite_path(uri)
    base = TrainBase(model=config["model"], train=config["train"], data=data,
                     data_vocab_size=vocab,
                     source={"study": name, "trial": chosen["trial"], "run_id": chosen["run_id"]})
    return StudyTrial(base=base, tracking_uri=uri, study=name, experiment_id=experiment_id,
                      trial=chosen["trial"], run_id=chosen["run_id"], state=chosen["state"],
                      best_val_loss=chosen["metrics"].get(METRIC_BEST_VAL_LOSS, math.nan),
                      tokens=chosen["metrics"].get(METRIC_TOKENS, math.nan),
                      folder=db.parent if db is not None else None)
