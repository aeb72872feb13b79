"""The trial runner: train one model config on one corpus within a budget, report as it goes.

`run_trial` is the whole story for an executor; `Trainer` exposes the pieces population-based
training needs: ``train(until_tokens=...)`` in chunks, `Trainer.set_hparams` between chunks,
and `Trainer.save_checkpoint` / `Trainer.load_checkpoint`. Chunked training, and training
resumed from a checkpoint, give exactly the losses of one uninterrupted run: batches are a pure
function of (seed, index), the schedule a pure function of tokens seen, and each trainer keeps
its own RNG state.

Executors plug in through a `Reporter` (``report`` at each evaluation, ``should_stop`` to
prune); `NullReporter` runs a trial with no executor at all, like Optuna's ``FixedTrial``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import torch

from sweep.data import Corpus
from sweep.schema import METRIC_TOKENS, METRIC_VAL_LOSS, METRIC_WALL_S, TrialState
from sweep.train import hardware
from sweep.train.checkpoint import restore_trainer, save_trainer
from sweep.train.config import TrainConfig, resolve_budget
from sweep.train.evaluation import Batch, eval_metrics, mean_loss, val_tensors
from sweep.train.optim import build_adamw, set_group_hparams
from sweep.train.reporter import NullReporter, Reporter, TrialResult
from sweep.train.schedule import budget_lr_factor
from sweep_models import build_model
from sweep_models.config import ModelConfig
from sweep_models.errors import ConfigError

__all__ = [
    "NullReporter",
    "Reporter",
    "TrainConfig",
    "Trainer",
    "TrialResult",
    "run_trial",
]


class Trainer:
    """Trains one model on one corpus; resumable in chunks and from checkpoints.

    Args:
        model_config: The model to build; its ``vocab_size`` must cover the corpus's.
        train_config: Optimiser, schedule, precision, budget, evaluation.
        corpus: A prepared `sweep.data.Corpus`.
        device: Overrides ``train_config.device`` (``auto``: CUDA when present).

    Raises:
        ConfigError: vocab_size below the corpus's, or a budget that does not fit the model.
        sweep.data.DataError: The corpus is shorter than one sequence of ``seq_len + 1``, or
            holds examples that ``seq_len`` (an encoder-decoder model's ``src_len``) does not
            fit.

    An encoder-decoder model (``arch="encoder_decoder"``) trains on the same windows: it reads
    the first ``src_len`` tokens of each as the source and is scored on the rest
    (`sweep_models.encoder_decoder`), so ``val_loss`` and ``train_loss`` are nats per target token,
    while ``tokens`` counts every token of the windows (source and target), as FLOPs per token
    do (`sweep_models.cost.flops`).
    """

    def __init__(
        self,
        model_config: ModelConfig,
        train_config: TrainConfig,
        corpus: Corpus,
        *,
        device: str | torch.device | None = None,
    ) -> None:
        if model_config.vocab_size < corpus.vocab_size:
            raise ConfigError(
                f"vocab_size={model_config.vocab_size} is smaller than the vocab of corpus "
                f"{corpus.uri!r} ({corpus.vocab_size})"
            )
        corpus.require(model_config.seq_len, src_len=model_config.src_len)
        self.model_config, self.train_config, self.corpus = model_config, train_config, corpus
        self.budget = resolve_budget(train_config, model_config)
        self.device = hardware.pick_device(str(device) if device else train_config.device)
        self.amp_dtype = hardware.autocast_dtype(train_config.precision, self.device)
        cuda_devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda_devices):  # leave the caller's RNGs alone
            torch.manual_seed(train_config.seed)
            self.model = build_model(model_config, device=self.device)
            self._rng_cpu = torch.get_rng_state()
        self._rng_cuda = self._cuda_seed_state(train_config.seed)
        self.n_params = self.model.num_params()
        self._forward = torch.compile(self.model) if train_config.compile else self.model
        self.optimizer = build_adamw(self.model, train_config, self.device)
        self.lr = train_config.lr
        self.weight_decay = train_config.weight_decay
        self._val = val_tensors(corpus, model_config.seq_len, train_config.eval_tokens,
                                train_config.batch_size, self.device)
        from sweep_models.cost import flops_per_token

        self.flops_per_token = flops_per_token(model_config, train=True)
        self.peak_flops = hardware.peak_flops(self.device, self.amp_dtype)
        self.step = 0
        self.tokens_seen = 0
        self._data_seed = train_config.seed
        self.state = TrialState.RUNNING
        self.fail_reason: str | None = None
        self.history: list[dict[str, float]] = []
        self.timings = {"compute_s": 0.0, "data_s": 0.0, "eval_s": 0.0, "report_s": 0.0,
                        METRIC_WALL_S: 0.0}
        self._loss_sum, self._loss_n, self._last_eval_tokens = 0.0, 0, 0
        self._window = [0, 0.0]  # tokens and training seconds at the last evaluation
        self._last_lr = self.lr

    def _cuda_seed_state(self, seed: int) -> torch.Tensor | None:
        if self.device.type != "cuda":
            return None
        with torch.random.fork_rng(devices=[self.device]):
            torch.cuda.manual_seed(seed)
            return torch.cuda.get_rng_state(self.device)

    # ------------------------------------------------------------------------ live changes
    def set_hparams(
        self,
        *,
        lr: float | None = None,
        weight_decay: float | None = None,
        betas: tuple[float, float] | list[float] | None = None,
        grad_clip: float | None = None,
        dropout: float | None = None,
        attn_temperature: float | None = None,
    ) -> None:
        """Change shape-preserving hyperparameters between steps (population-based training).

        The names are `sweep.train.config.LIVE_HPARAMS`. ``lr`` is the new peak; the schedule's
        factor still applies. ``lr`` and ``weight_decay`` are the base values: every parameter
        group takes them times its own multipliers (`sweep.train.optim.set_group_hparams`;
        under muP and CompleteP the groups differ). ``betas`` are AdamW's, set on every group.

        Raises:
            ConfigError: For a value out of range (the field is named).
        """
        if lr is not None:
            if not lr > 0 or not math.isfinite(lr):
                raise ConfigError(f"lr={lr!r} must be a finite number > 0")
            self.lr = float(lr)
        if weight_decay is not None:
            if not weight_decay >= 0 or not math.isfinite(weight_decay):
                raise ConfigError(f"weight_decay={weight_decay!r} must be a finite number >= 0")
            self.weight_decay = float(weight_decay)
            set_group_hparams(self.optimizer, weight_decay=self.weight_decay)
        if betas is not None:
            for group in self.optimizer.param_groups:
                group["betas"] = tuple(float(b) for b in betas)
        if grad_clip is not None:
            self.train_config = dataclasses.replace(self.train_config, grad_clip=float(grad_clip))
        if dropout is not None:
            self.model.set_dropout(dropout)
        if attn_temperature is not None:
            self.model.set_attn_temperature(attn_temperature)

    def hparams(self) -> dict[str, float]:
        """Current values of the mutable hyperparameters."""
        return {"lr": self.lr, "weight_decay": self.weight_decay,
                "dropout": self.model.config.dropout,
                "attn_temperature": self.model.config.attn_temperature}

    # ---------------------------------------------------------------------------- training
    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _batch(self, index: int) -> Batch:
        xs, ys = self.corpus.train_batch(self._data_seed, index, self.train_config.batch_size,
                                         self.model_config.seq_len)
        x, y = torch.from_numpy(xs), torch.from_numpy(ys)
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(
                self.device, non_blocking=True)
        return x, y

    def _train_s(self) -> float:
        """Seconds spent in training steps (compute and data), the unit of a seconds budget."""
        return self.timings["compute_s"] + self.timings["data_s"]

    def _budget_done(self) -> bool:
        return self.budget.spent(self.step, self._train_s())

    def _lr_now(self, step_s: float) -> float:
        return self.lr * budget_lr_factor(self.train_config, self.budget,
                                          self.tokens_seen + self.budget.step_tokens,
                                          self._train_s() + step_s)

    def _train_step(self, last_step_s: float) -> bool:
        """One optimizer step; returns False (and marks the trial DIVERGED) if non-finite."""
        accum, clip = self.budget.grad_accum, self.train_config.grad_clip
        lr = self._lr_now(last_step_s)
        set_group_hparams(self.optimizer, lr=lr)
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(accum):
            t0 = time.perf_counter()
            x, y = self._batch(self.step * accum + micro)
            t1 = time.perf_counter()
            with self._autocast():
                _, loss = self._forward(x, y)
            (loss / accum).backward()
            loss_sum += loss.detach().float()
            self.timings["data_s"] += t1 - t0
            self.timings["compute_s"] += time.perf_counter() - t1
        t1 = time.perf_counter()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                   clip if clip > 0 else math.inf)
        loss_value, norm_value = torch.stack([loss_sum / accum, grad_norm.float()]).tolist()
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
            self.optimizer.zero_grad(set_to_none=True)
            self.state = TrialState.DIVERGED
            what = "loss" if not math.isfinite(loss_value) else "gradient norm"
            self.fail_reason = (f"non-finite {what} in step {self.step + 1} (loss={loss_value}, "
                                f"grad_norm={norm_value}, lr={lr:.3g})")
            self.timings["compute_s"] += time.perf_counter() - t1
            return False
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.timings["compute_s"] += time.perf_counter() - t1
        self.step += 1
        self.tokens_seen += self.budget.step_tokens
        self._loss_sum += loss_value
        self._loss_n += 1
        self._last_lr = lr
        return True

    def evaluate(self) -> float:
        """Mean cross-entropy (nats/token) on the fixed validation windows."""
        return mean_loss(self.model, self._forward, self._val, self._autocast, self.device)

    def _eval_and_report(self, reporter: Reporter, *, scheduled: bool = True) -> bool:
        """Evaluate, record and report; returns False if the trial ends here.

        An unscheduled evaluation (at the end of a chunk) leaves the train-loss and throughput
        windows running, so the scheduled evaluations match an uninterrupted run's.
        """
        t0 = time.perf_counter()
        val_loss = self.evaluate()
        t1 = time.perf_counter()
        self.timings["eval_s"] += t1 - t0
        if not math.isfinite(val_loss):
            self.state = TrialState.DIVERGED
            self.fail_reason = f"non-finite val_loss ({val_loss}) after step {self.step}"
            return False
        spent = self._train_s()
        window_tokens = self.tokens_seen - self._window[0]
        window_s = spent - self._window[1]
        metrics = eval_metrics(val_loss, self._loss_sum / max(self._loss_n, 1),
                               window_tokens / window_s if window_s > 0 else math.nan,
                               self._last_lr, byte_level=self.corpus.byte_level)
        self.history.append({METRIC_TOKENS: self.tokens_seen, **metrics})
        if scheduled:
            self._loss_sum, self._loss_n = 0.0, 0
            self._window = [self.tokens_seen, spent]
        self._last_eval_tokens = self.tokens_seen
        reporter.report(self.tokens_seen, metrics)
        stop = reporter.should_stop()
        self.timings["report_s"] += time.perf_counter() - t1
        if stop:
            self.state = TrialState.PRUNED
        return not stop

    def train(self, reporter: Reporter | None = None, until_tokens: int | None = None, *,
              eval_at_chunk_end: bool = True) -> TrialResult:
        """Train until the budget is spent, the trial ends, or ``until_tokens`` is reached.

        Evaluates every ``eval_every`` tokens, at the end of the budget and (with
        ``eval_at_chunk_end``) at the end of a chunk, reporting each evaluation to
        ``reporter``. Without it, a run trained in chunks reports exactly the evaluations of one
        trained at once. A non-finite loss or gradient norm ends the trial at once as
        ``DIVERGED`` (that step is not applied or reported).

        Returns:
            The result so far; ``state`` is ``RUNNING`` if only a chunk was trained.
        """
        reporter = reporter or NullReporter()
        if self.state != TrialState.RUNNING:
            return self.result()
        start = time.perf_counter()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(self._rng_cpu)
            if self._rng_cuda is not None:
                torch.cuda.set_rng_state(self._rng_cuda, self.device)
            self.model.train()
            every, step_s = self.budget.eval_every, 0.0
            while self.state == TrialState.RUNNING:
                if self._budget_done():
                    if self._last_eval_tokens != self.tokens_seen or not self.history:
                        self._eval_and_report(reporter)
                    if self.state == TrialState.RUNNING:
                        self.state = TrialState.COMPLETE
                    break
                if until_tokens is not None and self.tokens_seen >= until_tokens:
                    if eval_at_chunk_end and self._last_eval_tokens != self.tokens_seen:
                        self._eval_and_report(reporter, scheduled=False)
                    break
                t0 = time.perf_counter()
                if not self._train_step(step_s):
                    break
                step_s = time.perf_counter() - t0
                if (self.tokens_seen // every > self._last_eval_tokens // every
                        and not self._budget_done()):
                    self._eval_and_report(reporter)
            self._rng_cpu = torch.get_rng_state()
            if self._rng_cuda is not None:
                self._rng_cuda = torch.cuda.get_rng_state(self.device)
        self.timings[METRIC_WALL_S] += time.perf_counter() - start
        return self.result()

    def result(self) -> TrialResult:
        """The `TrialResult` of the training so far."""
        losses = [h[METRIC_VAL_LOSS] for h in self.history]
        train_s = self._train_s()
        flops = self.flops_per_token * self.tokens_seen
        mfu = flops / (train_s * self.peak_flops) if self.peak_flops and train_s > 0 else None
        return TrialResult(
            state=self.state, best_val_loss=min(losses, default=math.nan),
            final_val_loss=losses[-1] if losses else math.nan, tokens=self.tokens_seen,
            steps=self.step, wall_s=self.timings[METRIC_WALL_S], train_flops=flops, mfu=mfu,
            n_params=self.n_params, baseline_unigram_loss=self.corpus.baseline_unigram_loss,
            entropy_rate=self.corpus.entropy_rate, fail_reason=self.fail_reason,
            history=[dict(h) for h in self.history], device=str(self.device))

    # ------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: Path | str, *, meta: dict | None = None) -> Path:
        """Write the whole training state to ``path`` atomically (`sweep.train.checkpoint`).

        Args:
            path: The file to write.
            meta: Plain data (str, int, float) kept with the state and returned by
                `load_checkpoint`, e.g. which run wrote it.

        Raises:
            RuntimeError: If the trial diverged or failed (no checkpoint of it is written).
        """
        if self.state in (TrialState.DIVERGED, TrialState.FAILED):
            raise RuntimeError(f"trial is {self.state} ({self.fail_reason}); not checkpointed")
        return save_trainer(self, path, meta)

    def load_checkpoint(self, path: Path | str) -> dict:
        """Restore the training state from ``path`` (possibly another member's, for PBT).

        The model's shape must match. Mutable hyperparameters, RNG states and the data stream
        (seed and position) take the checkpoint's values, so training continues exactly as the
        checkpointed trainer would have.

        Returns:
            The ``meta`` the checkpoint was saved with (empty if none).

        Raises:
            sweep.train.checkpoint.CheckpointError: Unreadable file, or a model of another shape.
        """
        return restore_trainer(self, path)


def run_trial(
    model_config: ModelConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    reporter: Reporter | None = None,
) -> TrialResult:
    """Train ``model_config`` on ``corpus`` with ``train_config``; see `Trainer`."""
    return Trainer(model_config, train_config, corpus).train(reporter)
