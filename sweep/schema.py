"""The names a study shares across its parts: trial states, MLflow names, attribute keys, params.

The one module that spells them. The trainer, both executors, the tracking writer and reader,
the progress view and the results table import these names; none writes the strings itself
(a test greps ``sweep/`` for that). Standard library only, so every layer can import it.

MLflow layout (see ``docs/architecture.md``):

- experiment = study name, its description in `TAG_NOTE`, its saved view `TAG_VIEW_PREFIX`;
  one parent run per study, tags `TAG_KIND` = `KIND_STUDY`, `TAG_SPEC_HASH`, `TAG_EXECUTOR`,
  `TAG_ALGORITHM`, `TAG_CORPUS`, `TAG_COMMAND`, `TAG_SEARCHED`, `TAG_STATE`, `TAG_NOTE`; metrics
  `METRIC_BASELINE`, `METRIC_BEST_VAL_LOSS`, `METRIC_BEST_OVER_BASELINE`, ``trials_<state>``
  (`count_metric`); artifacts `SPEC_ARTIFACT`, `TRIALS_ARTIFACT`, `BEST_CONFIG_ARTIFACT`,
  ``plots/<name>.png``;
- one child run per trial, named `run_name` (``trial-<n>``), params = the resolved config and
  the searched params as written (`sweep.params`), `COST_METRICS` at step 0, evaluation
  metrics with step = tokens seen (`METRIC_TOKENS` beside each, its value the step, so charts
  can draw against tokens), `RESULT_METRICS` and `METRIC_BEST_VAL_LOSS` at the end; tags
  `TAG_STATE`, `TAG_FAIL_REASON`, `TAG_TRIAL_NUMBER`, `TAG_TORCH_THREADS`;
  population-based training's changes as metrics and tags ``pbt.<key>`` (`mutation_key`);
- ``sweep train``: one run, `TAG_KIND` = `KIND_TRAIN`, with a trial's params, metrics and
  tags; in the study's experiment (not nested under its parent, so it is no trial of the
  study) named `retrain_run_name` and tagged `TAG_RETRAIN_OF` / `TAG_RETRAIN_OF_RUN` when it
  retrains a trial, else named `TRAIN_RUN_NAME` in experiment `TRAIN_EXPERIMENT`; tag
  `TAG_SAVED_TO` and artifact `SAVED_CONFIG_ARTIFACT` when the weights were saved.

Executor bookkeeping (Optuna user attributes, Ray Tune report and config keys) uses the
``ATTR_*`` and ``CONFIG_*`` names, the same for both executors.
"""

from __future__ import annotations

import enum
import math
from typing import Any

__all__ = [
    "ATTR_BEST_VAL_LOSS", "ATTR_CONSTRAINTS", "ATTR_HEARTBEAT", "ATTR_MLFLOW_RUN",
    "ATTR_OWNER", "ATTR_PROGRESS", "ATTR_REASON", "ATTR_RETRY_OF", "ATTR_RUN_ID", "ATTR_STATE",
    "BEST_CONFIG_ARTIFACT", "METRIC_ADAPTIVE_SPENT_FLOPS", "TAG_ADAPTIVE_STOP",
    "TAG_ADAPTIVE_WHY", "CONFIG_KEYS", "CONFIG_MEMBER", "CONFIG_RETRY_OF",
    "CONFIG_TRIAL_NUMBER", "COST_METRICS", "EVAL_METRICS", "FAIL_REASON_ARTIFACT",
    "HPARAMS_ANALYSIS_ARTIFACT", "HPARAMS_PLOTS_ARTIFACT_DIR", "JOB_CODE",
    "JOB_EXPERIMENT", "JOB_OUT", "JOB_SPEC", "JOB_STUDY", "JOB_TRACKING_URI",
    "KIND_MODEL_TRAINING", "KIND_PROBE", "KIND_STUDY", "KIND_TRAIN", "LOSS_METRICS",
    "METRIC_BASELINE", "METRIC_BEST_OVER_BASELINE", "METRIC_BEST_VAL_LOSS",
    "METRIC_BRANCH_TOKENS", "METRIC_RESUMED_TOKENS", "METRIC_BUDGET_FLOPS",
    "METRIC_FINAL_VAL_LOSS", "METRIC_FLOPS_PER_TOKEN", "METRIC_FLOPS_PER_TOKEN_DENSE",
    "METRIC_FLOPS_PER_TOKEN_TRAIN", "METRIC_LR", "METRIC_MEM_ESTIMATE", "METRIC_MFU",
    "METRIC_N_PARAMS", "METRIC_N_PARAMS_NON_EMBEDDING", "METRIC_N_TOKENS", "METRIC_TOKENS",
    "METRIC_TOKENS_PER_PARAM", "METRIC_TOKENS_PER_S", "METRIC_TRAIN_FLOPS",
    "METRIC_TRAIN_LOSS", "METRIC_TRIALS_RETRIED", "METRIC_VAL_BPB", "METRIC_VAL_LOSS",
    "METRIC_WALL_S", "RESULT_METRICS", "SAVED_CONFIG_ARTIFACT", "SCALING_GRID_ARTIFACT",
    "SPEC_ARTIFACT", "TAG_ALGORITHM", "TAG_BEST_RUN_ID", "TAG_BEST_TRIAL", "TAG_BRANCH_FROM",
    "TAG_BRANCH_NOTE", "TAG_CHECKPOINT_NOTE", "TAG_COMMAND", "TAG_CORPUS",
    "TAG_CUDA_VISIBLE_DEVICES", "TAG_DEVICE", "TAG_EXECUTOR", "TAG_EXPERIMENT_KIND",
    "TAG_FAIL_REASON", "TAG_HEARTBEAT", "TAG_KIND", "TAG_NOTE", "TAG_OWNER",
    "TAG_RESUMED_FROM", "TAG_RETRAIN_OF", "TAG_RETRAIN_OF_RUN", "TAG_RETRY_OF", "TAG_SAVED_TO",
    "TAG_SEARCHED", "TAG_VIEW_PREFIX", "TAG_SPEC_HASH", "TAG_STATE", "TAG_TRIAL_NUMBER",
    "TAG_SIMULATED", "TAG_TORCH_THREADS", "TAG_TRUNCATED", "TRAIN_EXPERIMENT", "TRAIN_RUN_NAME",
    "TRANSFER_ANALYSIS_ARTIFACT", "TRANSFER_PLOTS_ARTIFACT_DIR", "TRIALS_ARTIFACT",
    "UI_MODEL_TRAINING", "VIEW_KEY", "TrialState", "cost_metrics", "count_metric",
    "mutation_key", "retrain_run_name", "run_name",
]


class TrialState(str, enum.Enum):
    """The state of a trial, the same in the trainer, both executors, MLflow and the tables.

    A `str` enum: members compare equal to their names (``TrialState.COMPLETE == "COMPLETE"``)
    and are stored as them (tag `TAG_STATE`, the state to read back: the run status says less).
    Only a trial's own fault is ``FAILED``; ``PRUNED`` and ``INFEASIBLE`` trials ended as the
    search meant them to, so their runs are ``FINISHED`` (`run_status`): MLflow's UI draws
    ``KILLED`` with the same red mark as ``FAILED``.
    """

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    DIVERGED = "DIVERGED"
    FAILED = "FAILED"
    INFEASIBLE = "INFEASIBLE"
    #: Stopped by something outside the trial (its process killed, Ctrl-C, SIGTERM, a store or
    #: disk that failed): it does not count toward ``n_trials`` and is retried on resume.
    INTERRUPTED = "INTERRUPTED"

    def __str__(self) -> str:
        return self.value

    @property
    def is_final(self) -> bool:
        """Whether the trial has ended (every state but ``RUNNING``)."""
        return self is not TrialState.RUNNING

    @property
    def finished(self) -> bool:
        """Whether the trial counts toward ``n_trials`` (ended, and not ``INTERRUPTED``)."""
        return self.is_final and self is not TrialState.INTERRUPTED

    @property
    def trained(self) -> bool:
        """Whether the trial trained at all (infeasible ones never did)."""
        return self in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)

    @property
    def run_status(self) -> str:
        """The MLflow run status of a trial that ended in this state.

        Raises:
            ValueError: For ``RUNNING`` (a run ends in a final state).
        """
        if not self.is_final:
            raise ValueError("a trial run ends in a final state, not RUNNING")
        return _RUN_STATUS[self]

    @classmethod
    def final(cls) -> tuple[TrialState, ...]:
        """The final states, in display order."""
        return tuple(s for s in cls if s.is_final)


#: MLflow has no run status between success and failure that its UI draws apart: 3.17 marks
#: ``KILLED`` and ``FAILED`` alike (a red cross), ``FINISHED`` with a green tick. So a trial the
#: search stopped or refused on purpose is ``FINISHED`` and tag `TAG_STATE` tells which; only a
#: trial stopped from outside (``INTERRUPTED``, retried on resume) is ``KILLED``.
_RUN_STATUS = {
    TrialState.COMPLETE: "FINISHED",
    TrialState.PRUNED: "FINISHED",
    TrialState.INFEASIBLE: "FINISHED",
    TrialState.INTERRUPTED: "KILLED",
    TrialState.DIVERGED: "FAILED",
    TrialState.FAILED: "FAILED",
}

# ------------------------------------------------------------------------------------ tags
TAG_KIND = "sweep.kind"
KIND_STUDY = "study"
TAG_STATE = "sweep.state"
TAG_FAIL_REASON = "sweep.fail_reason"
TAG_TRIAL_NUMBER = "sweep.trial_number"
TAG_SPEC_HASH = "sweep.spec_hash"
TAG_EXECUTOR = "sweep.executor"
TAG_ALGORITHM = "sweep.algorithm"
TAG_TRUNCATED = "sweep.truncated_params"
TAG_BEST_TRIAL = "sweep.best_trial_number"
TAG_BEST_RUN_ID = "sweep.best_run_id"
#: The parent run: the study's corpus (its data URI) and the command that last started it.
TAG_CORPUS = "sweep.corpus"
TAG_COMMAND = "sweep.command"
#: MLflow's own tag for the description of an experiment or a run (markdown), shown above it.
TAG_NOTE = "mlflow.note.content"
#: The query of an MLflow 3 UI page that keeps it in the "Model training" views (runs, metrics);
#: without it an experiment opens on the GenAI overview, which shows no runs.
UI_MODEL_TRAINING = "workflowType=machine_learning"
#: The parent run: the searched params, as the spec names them; the experiment: its kind in
#: MLflow 3 (its pages' layout) and the saved view ``sweep ui`` opens (`sweep.tracking.view`).
TAG_SEARCHED = "sweep.searched"
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
KIND_MODEL_TRAINING = "custom_model_development"
TAG_VIEW_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "sweep-trials"
#: Crash recovery (`sweep.study.resume`): the process running a trial (`sweep.tracking.owner`),
#: its last heartbeat (Unix seconds), and on a retried trial the number of the one it retries.
TAG_OWNER = "sweep.owner"
TAG_HEARTBEAT = "sweep.heartbeat"
TAG_RETRY_OF = "sweep.retry_of"
#: Where a trial trained: the torch device (``cpu``, ``cuda:0``), and the GPUs its process was
#: shown (``CUDA_VISIBLE_DEVICES``, as Ray sets it for a trial holding GPUs), when set.
TAG_DEVICE = "sweep.device"
TAG_CUDA_VISIBLE_DEVICES = "sweep.cuda_visible_devices"
#: The torch intra-op threads a trial trained with (``resources.torch_threads``, else its share
#: of the cores: `sweep.train.hardware.default_threads`); not a searched param.
TAG_TORCH_THREADS = "sweep.torch_threads"
#: WSD branches (``scaling.branches``): the run whose stable-phase trunk a trial continued, and
#: why a trunk was not used or not saved.
TAG_BRANCH_FROM = "sweep.branch_from"
TAG_BRANCH_NOTE = "sweep.branch_note"
#: Trial checkpoints (``search.checkpoint_interval``): the interrupted trial whose checkpoint a
#: retry continued, and why a checkpoint was not used or not saved.
TAG_RESUMED_FROM = "sweep.resumed_from"
TAG_CHECKPOINT_NOTE = "sweep.checkpoint_note"
#: ``sweep train``: its runs' kind; the trial number and run id a retrain trains again; the
#: folder its weights were saved to (``--save``).
KIND_TRAIN = "train"
TAG_RETRAIN_OF = "sweep.retrain_of"
TAG_RETRAIN_OF_RUN = "sweep.retrain_of_run"
TAG_SAVED_TO = "sweep.saved_to"
#: On a simulated study's parent run and each trial run: the law its losses were drawn from
#: (`sweep.simulate`), so a simulated study is never taken for a measured one.
TAG_SIMULATED = "sweep.simulated"
#: An adaptive scaling study (``scaling.adaptive``): on each trial run, why its point was
#: chosen; on the parent run, why the study stopped and the training FLOPs its rounds spent.
TAG_ADAPTIVE_WHY = "sweep.adaptive.why"
TAG_ADAPTIVE_STOP = "sweep.adaptive.stop"
METRIC_ADAPTIVE_SPENT_FLOPS = "adaptive_spent_flops"
#: The experiment and run name of a ``sweep train`` that retrains no study's trial.
TRAIN_EXPERIMENT = "sweep-train"
TRAIN_RUN_NAME = "train"

# ------------------------------------------------------------------------ Ray job metadata
#: A job `sweep submit` hands to a Ray cluster carries `TAG_KIND` (`KIND_STUDY`, or
#: `KIND_PROBE` for the short job that asks what the cluster has), `TAG_SPEC_HASH`,
#: `TAG_EXECUTOR` and these: the study's name, its MLflow store (password masked) and
#: experiment, the spec file's name, the study folder on the cluster, and whether the code was
#: the cluster's own (``installed``) or came with the job (``shipped``).
KIND_PROBE = "probe"
JOB_STUDY = "sweep.study"
JOB_TRACKING_URI = "sweep.tracking_uri"
JOB_EXPERIMENT = "sweep.experiment"
JOB_SPEC = "sweep.spec"
JOB_OUT = "sweep.out"
JOB_CODE = "sweep.code"

# --------------------------------------------------------------------------------- metrics
METRIC_VAL_LOSS = "val_loss"
METRIC_TRAIN_LOSS = "train_loss"
METRIC_BEST_VAL_LOSS = "best_val_loss"
METRIC_TOKENS = "tokens"
METRIC_BASELINE = "baseline_unigram_loss"
METRIC_TOKENS_PER_S = "tokens_per_s"
#: The schedule's learning rate at an evaluation (param ``train.lr`` is the peak); was ``lr``.
METRIC_LR = "lr_now"
METRIC_VAL_BPB = "val_bpb"
METRIC_FINAL_VAL_LOSS = "final_val_loss"
METRIC_TRAIN_FLOPS = "train_flops"
METRIC_WALL_S = "wall_s"
METRIC_MFU = "mfu"
METRIC_N_PARAMS = "n_params"
METRIC_N_PARAMS_NON_EMBEDDING = "n_params_non_embedding"
METRIC_FLOPS_PER_TOKEN = "flops_per_token"
METRIC_FLOPS_PER_TOKEN_DENSE = "flops_per_token_dense"
METRIC_FLOPS_PER_TOKEN_TRAIN = "flops_per_token_train"
METRIC_MEM_ESTIMATE = "mem_estimate_bytes"
#: Scaling studies: a trial's FLOP budget, training tokens and tokens per parameter.
METRIC_BUDGET_FLOPS = "budget_flops"
METRIC_N_TOKENS = "n_tokens"
METRIC_TOKENS_PER_PARAM = "tokens_per_param"
#: WSD branches: training tokens a trial took from an earlier trial's stable-phase trunk.
METRIC_BRANCH_TOKENS = "branch_tokens"
#: Trial checkpoints: training tokens a retry took from the interrupted trial's checkpoint.
METRIC_RESUMED_TOKENS = "resumed_tokens"
#: The parent run: how many trials were retried after an interruption.
METRIC_TRIALS_RETRIED = "trials_retried"
#: The parent run: the best val loss over the unigram baseline (below 1: better than any model
#: that ignores context).
METRIC_BEST_OVER_BASELINE = "best_loss_over_baseline"
#: Cost-model metrics of every trial, logged at step 0 (`cost_metrics`).
COST_METRICS = (
    METRIC_N_PARAMS,
    METRIC_N_PARAMS_NON_EMBEDDING,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_FLOPS_PER_TOKEN_DENSE,
    METRIC_FLOPS_PER_TOKEN_TRAIN,
    METRIC_MEM_ESTIMATE,
)
#: What each evaluation reports, with step = tokens seen.
EVAL_METRICS = (METRIC_VAL_LOSS, METRIC_TRAIN_LOSS, METRIC_TOKENS_PER_S, METRIC_LR, METRIC_VAL_BPB)
#: The evaluation metrics that are losses: a DIVERGED trial's end in one nan (see TrialRun.end).
LOSS_METRICS = (METRIC_VAL_LOSS, METRIC_TRAIN_LOSS, METRIC_VAL_BPB)
#: A trial's totals, logged once at its end.
RESULT_METRICS = (METRIC_TOKENS, "steps", METRIC_WALL_S, METRIC_TRAIN_FLOPS, METRIC_MFU,
                  METRIC_FINAL_VAL_LOSS)

# ------------------------------------------------------------------------------- artifacts
SPEC_ARTIFACT = "spec.yaml"
TRIALS_ARTIFACT = "trials.csv"
BEST_CONFIG_ARTIFACT = "best_config.yaml"
FAIL_REASON_ARTIFACT = "fail_reason.txt"
#: ``sweep train --save``: the saved folder's ``config.json`` (`sweep.train.saved`), logged.
SAVED_CONFIG_ARTIFACT = "model/config.json"
#: A scaling study's IsoFLOP grid as laid out (budget, centre, shapes, drops), on its parent run.
SCALING_GRID_ARTIFACT = "scaling_grid.csv"
#: ``sweep analyze transfer``: the best learning rate per width and its drift, and the plot.
TRANSFER_ANALYSIS_ARTIFACT = "transfer_analysis/transfer.json"
TRANSFER_PLOTS_ARTIFACT_DIR = "transfer_analysis/plots"
#: ``sweep analyze hparams``: eta_opt(C) and B_opt(C) by both estimators, and the figure.
HPARAMS_ANALYSIS_ARTIFACT = "hparams_analysis/hparams.json"
HPARAMS_PLOTS_ARTIFACT_DIR = "hparams_analysis/plots"

# ------------------------------------------------------- executor attributes and config keys
#: Optuna user attributes and Ray Tune report keys (one spelling for both executors).
ATTR_STATE = "sweep_state"
ATTR_OWNER = "sweep_owner"
ATTR_HEARTBEAT = "sweep_heartbeat"
ATTR_RETRY_OF = "sweep_retry_of"
ATTR_RUN_ID = "sweep_run_id"
ATTR_REASON = "sweep_reason"
ATTR_BEST_VAL_LOSS = "sweep_best_val_loss"
ATTR_PROGRESS = "sweep_progress"
#: A trial's constraint values (<= 0 feasible), as Optuna samplers and the results read them.
ATTR_CONSTRAINTS = "constraints"
#: For optuna-dashboard: a trial's link to its MLflow run (`sweep.tracking.view.run_url`).
ATTR_MLFLOW_RUN = "mlflow_run"
#: Keys the Ray executor adds to a trial's config.
CONFIG_TRIAL_NUMBER = "sweep.trial_number"
CONFIG_MEMBER = "sweep.member"
CONFIG_RETRY_OF = "sweep.retry_of"
#: Every key the Ray executor adds; the rest of a config is the trial's sampled params.
CONFIG_KEYS = (CONFIG_TRIAL_NUMBER, CONFIG_MEMBER, CONFIG_RETRY_OF)


def run_name(number: int) -> str:
    """The MLflow run name of trial ``number``: ``trial-<number>``."""
    return f"trial-{number}"


def retrain_run_name(number: int) -> str:
    """The MLflow run name of ``sweep train`` retraining trial ``number``: ``retrain-trial-<n>``."""
    return f"retrain-{run_name(number)}"


def count_metric(state: TrialState | str) -> str:
    """The parent run's metric counting trials in ``state``: ``trials_<state>`` lower case."""
    return f"trials_{TrialState(state).value.lower()}"


def mutation_key(key: str) -> str:
    """Metric and tag name of a hyperparameter changed during training: ``pbt.<key>``."""
    return f"pbt.{key}"


def cost_metrics(estimate: Any) -> dict[str, float]:
    """`COST_METRICS` from a `sweep_models.cost.CostEstimate` (or any object with its field names).

    ``flops_per_token`` is the forward count over the kept query-key pairs,
    ``flops_per_token_dense`` the dense-attention forward count (nanoGPT/PaLM convention),
    ``flops_per_token_train`` forward + backward, ``mem_estimate_bytes`` the training total;
    for an encoder-decoder model (``model.arch=encoder_decoder``) a token is any token of the
    window, source or target (a window's FLOPs over ``seq_len``, as ``tokens`` counts them),
    and ``val_loss`` is per target token (`sweep_models.cost.flops`,
    `sweep_models.encoder_decoder`);
    ``mem_estimate_bytes`` is nan for an estimate without a memory breakdown.
    """
    memory = getattr(estimate, "memory", None)
    values = (
        estimate.n_params,
        estimate.n_params_non_embedding,
        estimate.flops_per_token_fwd,
        estimate.flops_per_token_dense_fwd,
        estimate.flops_per_token_train,
        memory.total if memory is not None else math.nan,
    )
    return {name: float(value) for name, value in zip(COST_METRICS, values, strict=True)}
