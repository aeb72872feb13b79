"""``train.lr: {from_study: NAME_OR_FOLDER, width: 2}``: a learning rate from an hparams fit.

A later study (search, PBT, scaling) takes its learning-rate domain from the law
eta_opt(C) = a C^b an hparams study's analysis fitted (`sweep.scaling.hparam_laws`, after
DeepSeek LLM, Bi et al. 2024, sec. 3.1):

- the source is the hparams study's folder (``runs/NAME`` or a folder path, relative to the
  working directory) and its ``analysis/hparams.json``, which ``sweep analyze hparams`` writes;
  nothing is recomputed from MLflow (without the file the spec is refused: run the analysis
  first). The estimator is ``train.lr.estimator``, else the analysis's verdict
  (``verdict.lr``), else ``band``;
- a trial's budget C is the convention the fit used, C = 6 N D (the hparams grid's budget,
  `sweep.kinds.hparams.grid`): N the trial's parameters as the cost model counts them
  (`sweep_models.cost.param_count`), D the tokens it trains (`sweep.train.resolve_budget`);
- the trial's learning rate is eta_opt(C) x factor: the factor is the sampler's axis
  ``lr.factor`` (`LR_FACTOR`), log-uniform in [1/width, width], so TPE and the pruners see one
  stationary axis at every budget; a grid kind's points (scaling), trained once each, take
  factor 1, eta_opt(C) itself. The logged ``train.lr`` is the rate trained with
  (`sweep.space.lr_law`);
- the resolved law (a, b, estimator, source path, the file's SHA-256) is written into the
  spec (`FromStudyDomain.law`, so the parent run's ``spec.yaml`` holds it) and, when the study
  starts, into its folder (``lr-law.json``, `record_law`). A resume uses that stored law even
  if the source was analysed again since, and says so when the source's file changed.

Light: the standard library and the spec's models only, so ``sweep validate`` reads the law
without torch, MLflow or Optuna.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sweep.errors import InputError
from sweep.folder import StudyFolder, find_store
from sweep.spec.domains import FromStudyDomain, LrLaw

__all__ = ["ANALYSIS_FILE", "LR_FACTOR", "FromStudyError", "from_study_problems", "lr_domain",
           "read_law", "record_law", "resolve_lr", "source_folder", "stored_law"]

#: The analysis file ``sweep analyze hparams`` writes in the study's ``analysis/`` folder.
ANALYSIS_FILE = "hparams.json"
#: The sampler's axis of a ``from_study`` learning rate: the factor on eta_opt(C).
LR_FACTOR = "lr.factor"


class FromStudyError(InputError, ValueError):
    """A ``from_study`` learning rate that cannot be resolved; the message names the field."""


def lr_domain(spec: Any) -> FromStudyDomain | None:
    """The spec's ``train.lr`` when it is ``{from_study: ...}``, else None."""
    value = spec.train.get("lr")
    return value if isinstance(value, FromStudyDomain) else None


def from_study_problems(spec: Any) -> Iterator[str]:
    """The rules of a ``from_study`` value that the spec alone decides, one line each."""
    for section in ("model", "train"):
        for name, value in getattr(spec, section).items():
            if isinstance(value, FromStudyDomain) and (section, name) != ("train", "lr"):
                yield (f"{section}.{name}: from_study gives a learning rate only; use it for "
                       "train.lr")
    if lr_domain(spec) is None:
        return
    if "seconds" in spec.train:
        yield ("train.seconds: train.lr: {from_study} needs each trial's tokens before it "
               "trains (its budget C = 6 N D); give the budget in tokens, steps or flops")
    if spec.kind.samples_lr_factor and spec.search.sampler == "grid":
        yield ("search.sampler: the grid sampler needs finite axes, and train.lr: {from_study} "
               "samples a continuous factor in [1/width, width]; use tpe or random")


def source_folder(name_or_folder: str) -> Path:
    """The source study's folder: ``name_or_folder`` when a folder, else ``runs/<name>``."""
    path = Path(name_or_folder).expanduser()
    return path if path.is_dir() else StudyFolder.default(name_or_folder).root


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _not_hparams(folder: Path) -> bool:
    """Whether the folder's stored specs (``spec.yaml`` artifacts) all lack an hparams section."""
    root = StudyFolder(folder).artifacts  # <run id>/artifacts/, or under an experiment's id
    specs = [*root.glob("*/artifacts/spec.yaml"), *root.glob("*/*/artifacts/spec.yaml")]
    return bool(specs) and not any(re.search(r"^hparams:", p.read_text(errors="replace"),
                                             re.MULTILINE) for p in specs)


def _analysis_file(given: str) -> Path:
    """The source's analysis file, or the reason there is none.

    Raises:
        FromStudyError: No such folder, not a study's, not an hparams study, not analysed.
    """
    folder = source_folder(given)
    field = "train.lr.from_study"
    if not folder.is_dir():
        raise FromStudyError(f"{field}: no study {given!r}: neither {given} nor {folder} is a "
                             "folder")
    path = StudyFolder(folder).analysis / ANALYSIS_FILE
    if path.is_file():
        return path.resolve()
    if find_store(folder) is None and not StudyFolder(folder).journal.exists():
        raise FromStudyError(f"{field}: {folder} is not a study's folder (no mlflow.db nor "
                             "optuna.journal in it)")
    if _not_hparams(folder):
        raise FromStudyError(f"{field}: {folder} is not an hparams study (its spec has no "
                             "hparams section), so it has no learning-rate law to give")
    raise FromStudyError(f"{field}: {folder} has no analysis/{ANALYSIS_FILE}; run `sweep "
                         f"analyze hparams {given}` first")


def read_law(domain: FromStudyDomain) -> LrLaw:
    """The law ``domain`` names, read from its source's analysis file (module docstring).

    Raises:
        FromStudyError: The source cannot give one (`_analysis_file`); a file that is not an
            hparams analysis; no learning-rate law by the estimator asked for.
    """
    path = _analysis_file(domain.from_study)
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise FromStudyError(f"train.lr.from_study: {path} cannot be read as JSON "
                             f"({type(exc).__name__})") from None
    if not (isinstance(data, dict) and data.get("kind") == "hparams"
            and isinstance(data.get("fits"), list)):
        raise FromStudyError(f"train.lr.from_study: {path} is not an hparams analysis (no "
                             "kind: hparams and fits); run `sweep analyze hparams` again")
    fits = {f.get("method"): f for f in data["fits"]
            if isinstance(f, dict) and f.get("hparam") == "lr"}
    if not fits:
        raise FromStudyError(f"train.lr.from_study: the analysis {path} holds no "
                             "learning-rate law")
    verdict = (data.get("verdict") or {}).get("lr") if isinstance(data.get("verdict"),
                                                                  dict) else None
    estimator = domain.estimator or verdict or "band"
    if estimator not in fits:
        field = "train.lr.estimator" if domain.estimator else "train.lr.from_study"
        raise FromStudyError(f"{field}: the analysis {path} has no learning-rate law by "
                             f"{estimator} (it has {', '.join(sorted(map(str, fits)))})")
    fit = fits[estimator]
    interval = (fit.get("intervals") or {}).get("exponent")
    budgets = data.get("budgets") or [c for c, _ in fit.get("points") or []]
    try:
        return LrLaw(coef=fit["coef"], exponent=fit["exponent"], estimator=estimator,
                     exponent_interval=tuple(interval) if interval else None,
                     budgets=(min(budgets), max(budgets)), source=str(path),
                     sha256=hashlib.sha256(raw).hexdigest(), study=str(data.get("study", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise FromStudyError(f"train.lr.from_study: the learning-rate law in {path} is "
                             f"incomplete or not numbers ({type(exc).__name__})") from None


def stored_law(out: Path | str) -> tuple[str, LrLaw] | None:
    """The ``(from_study, law)`` a study folder recorded when it started, or None."""
    path = StudyFolder(Path(out)).lr_law
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data["from_study"], LrLaw.model_validate(data["law"])


def record_law(spec: Any, out: Path | str) -> None:
    """Write the spec's resolved law into the study folder once (``lr-law.json``)."""
    domain = lr_domain(spec)
    path = StudyFolder(Path(out)).lr_law
    if domain is None or domain.law is None or path.exists():
        return
    path.write_text(json.dumps({"from_study": domain.from_study,
                                "law": domain.law.model_dump(mode="json")}, indent=1))


def _with_law(spec: Any, domain: FromStudyDomain, law: LrLaw) -> Any:
    """A copy of the (validated) spec whose ``train.lr`` holds ``law``."""
    train = {**spec.train, "lr": domain.model_copy(update={"law": law})}
    return spec.model_copy(update={"train": train})


def _changed(law: LrLaw) -> str | None:
    """Why the law's source no longer is what was read, or None."""
    path = Path(law.source)
    if not path.is_file():
        return f"its source {law.source} is gone"
    now = _sha256(path)
    if now != law.sha256:
        return (f"its source {law.source} changed since this study started (sha256 "
                f"{law.sha256[:12]} -> {now[:12]})")
    return None


def resolve_lr(spec: Any, out: Path | str | None = None) -> tuple[Any, list[str]]:
    """The spec with its ``from_study`` law resolved, and notes to print.

    The law is, in order: the one the study folder ``out`` recorded (a resume), the one the
    spec holds, the source's analysis (`read_law`). Specs without ``from_study`` come back
    unchanged.

    Raises:
        FromStudyError: The source cannot give a law, or the study folder recorded one from
            another source or estimator than the spec names.
    """
    domain = lr_domain(spec)
    if domain is None:
        return spec, []
    stored = stored_law(out) if out is not None else None
    notes = []
    if stored is not None:
        source, law = stored
        if source != domain.from_study or domain.estimator not in (None, law.estimator):
            raise FromStudyError(
                f"train.lr.from_study: this study started with the law of {source!r} by "
                f"{law.estimator} ({StudyFolder(Path(out or '')).lr_law}); it cannot resume with "
                f"{domain.from_study!r}{f' by {domain.estimator}' if domain.estimator else ''}"
                "; start a new study (another name or folder)")
        why = _changed(law)
        if why is not None:
            notes.append(f"train.lr.from_study: {why}; this study keeps the law it started "
                         f"with: eta_opt = {law.coef:.4g} C^{law.exponent:+.4f} "
                         f"({law.estimator})")
    else:
        law = domain.law or read_law(domain)
    return (spec if domain.law == law else _with_law(spec, domain, law)), notes
