"""Trial-runner overhead: time outside forward/backward/optimizer as a share of a trial's wall time.

Side by side, in one process, on the same model, corpus, step count and evaluation windows:

- ``trial``: `sweep.train.Trainer.train`, the real runner (batch sampling, schedule, divergence
  check, evaluations, metrics, reporting);
- ``bare``: the same forward/backward/clip/AdamW steps and the same evaluation forwards (every
  ``eval_every`` tokens and at the end) on batches materialised in memory beforehand: the work
  no runner can avoid.

overhead = (trial - bare) / trial, target < 3 %. Runs alternate and the fastest of each is used
(the run least disturbed by other load on the machine). The runner's own timers (data, eval,
report) are printed beside it. Ends with one JSON line.

    python bench/trial_step.py [--tokens 200000] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from sweep.data import load_corpus
from sweep.train.config import TrainConfig, resolve_budget
from sweep.train.optim import decay_groups
from sweep.train.trainer import NullReporter, Trainer
from sweep_models import ModelConfig, build_model


def bare_run(model_config, train_config, corpus) -> float:
    budget = resolve_budget(train_config, model_config)
    b, t = train_config.batch_size, model_config.seq_len
    batches = [tuple(torch.from_numpy(a) for a in corpus.train_batch(9, i, b, t))
               for i in range(budget.total_steps)]
    val = [tuple(torch.from_numpy(a) for a in xy)
           for xy in corpus.val_batches(t, train_config.eval_tokens, b)]
    # The runner's schedule: every eval_every tokens, and once more at the end of the budget.
    eval_at = {i for i in range(1, budget.total_steps + 1)
               if (i * budget.step_tokens) // budget.eval_every
               > ((i - 1) * budget.step_tokens) // budget.eval_every} | {budget.total_steps}
    torch.manual_seed(train_config.seed)
    model = build_model(model_config)
    decay, no_decay = decay_groups(model)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, foreach=True)
    start = time.perf_counter()
    for i, (x, y) in enumerate(batches, 1):
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i in eval_at:
            model.eval()
            with torch.no_grad():
                for vx, vy in val:
                    model(vx, vy)
            model.train()
    return time.perf_counter() - start


def trial_run(model_config, train_config, corpus) -> tuple[float, dict, float]:
    trainer = Trainer(model_config, train_config, corpus, device="cpu")
    start = time.perf_counter()
    result = trainer.train(NullReporter())
    wall = time.perf_counter() - start
    return wall, dict(trainer.timings), result.final_val_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=2e5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        corpus = load_corpus("builtin:python-stdlib?max_bytes=1000000", cache)
        model_config = ModelConfig.from_preset("tiny")
        train_config = TrainConfig(tokens=int(args.tokens), batch_size=16, device="cpu",
                                   precision="fp32")
        trial_run(model_config, train_config.replace(steps=3), corpus)  # warm up kernels
        bare_run(model_config, train_config.replace(steps=3), corpus)
        trials, bares, timings = [], [], []
        for _ in range(args.repeats):
            wall, t, _ = trial_run(model_config, train_config, corpus)
            trials.append(wall)
            timings.append(t)
            bares.append(bare_run(model_config, train_config, corpus))
    trial_s, bare_s = min(trials), min(bares)
    mid = timings[trials.index(trial_s)]
    overhead = (trial_s - bare_s) / trial_s
    own = {k: mid[k] / mid["wall_s"] for k in ("data_s", "eval_s", "report_s")}
    own["unaccounted"] = 1 - (mid["compute_s"] + mid["data_s"] + mid["eval_s"]
                              + mid["report_s"]) / mid["wall_s"]
    print(f"tiny model, {int(args.tokens):,} tokens, {args.threads} threads, "
          f"{args.repeats} alternating repeats (fastest)")
    print(f"  trial (Trainer.train)        {trial_s:8.3f} s   runs {[round(x, 3) for x in trials]}")
    print(f"  bare fwd/bwd/opt + eval fwd  {bare_s:8.3f} s   runs {[round(x, 3) for x in bares]}")
    print(f"  overhead (trial - bare) / trial: {overhead:+.2%} (target < 3%)")
    print("  runner's own timers, share of its wall time: " + ", ".join(
        f"{k} {v:.2%}" for k, v in own.items()))
    print(json.dumps({"bench": "trial_step", "tokens": int(args.tokens), "threads": args.threads,
                      "trial_s": trial_s, "bare_s": bare_s, "overhead_fraction": overhead,
                      "data_fraction": own["data_s"], "eval_fraction": own["eval_s"],
                      "report_fraction": own["report_s"],
                      "unaccounted_fraction": own["unaccounted"], "target": 0.03,
                      "pass": overhead < 0.03}))


if __name__ == "__main__":
    main()
