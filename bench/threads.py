"""CPU threads per trial: the default share of the cores against one thread, and torch's own.

``search.parallel`` trials train at once, each in its own process (as Optuna's workers do), on
the quickstart study's corpus (``builtin:python-stdlib``) and a quickstart-sized model, each
process with one of:

- ``default``: `sweep.train.hardware.default_threads`, taken before the rounds of each
  ``parallel`` (the cores this process may use divided by the trials at once, capped by the
  cores idle then; ``OMP_NUM_THREADS`` is removed first, so it is the share);
- ``one``: one thread per trial;
- ``torch``: torch's own default in a fresh process (its physical cores), what an in-process
  trial trained with before the default.

The trials start together (a barrier after the model is built) and the wall time of the slowest
is the round's; each thread count runs ``--repeats`` rounds and the fastest is kept (the round
least disturbed by other load). Modes with the same thread count share their measurement. The
machine's load average (``os.getloadavg``) before and after is printed beside the figures:
others' work on the cores changes them, and more threads than free cores is the slow case.
Target: ``default`` no slower than ``one`` (within 5%) at every ``parallel``. The final val
losses of seed 0 across thread counts are compared too (float noise only). Ends with one JSON
line.

    python bench/threads.py [--tokens 30000] [--repeats 2] [--parallel 1 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

CORPUS = "builtin:python-stdlib"
MODEL = {"vocab_size": 256, "seq_len": 64, "d_model": 96, "n_heads": 3, "n_layers": 2,
         "d_ff": 288}


def _torch_default(queue) -> None:
    import torch

    queue.put(torch.get_num_threads())


def _trial(cache: str, tokens: int, threads: int, seed: int, barrier, queue) -> None:
    import torch

    from sweep.data import load_corpus
    from sweep.train.hardware import set_threads
    from sweep.train.trainer import TrainConfig, Trainer
    from sweep_models import ModelConfig

    set_threads(threads)
    corpus = load_corpus(CORPUS, Path(cache))
    config = TrainConfig(tokens=tokens, batch_size=16, lr=5e-3, warmup=0.05, eval_tokens=4096,
                         eval_every=tokens, device="cpu", seed=seed)
    trainer = Trainer(ModelConfig(**MODEL), config, corpus)
    barrier.wait()
    started = time.perf_counter()
    result = trainer.train()
    queue.put((seed, time.perf_counter() - started, result.final_val_loss,
               torch.get_num_threads()))


def _round(mp, cache: str, tokens: int, threads: int, parallel: int) -> tuple[float, float]:
    """One round: ``parallel`` trials at once; the slowest one's wall time, seed 0's loss."""
    barrier, queue = mp.Barrier(parallel), mp.Queue()
    procs = [mp.Process(target=_trial, args=(cache, tokens, threads, seed, barrier, queue))
             for seed in range(parallel)]
    for proc in procs:
        proc.start()
    got = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    assert all(n == threads for *_, n in got), got
    return max(wall for _, wall, _, _ in got), next(loss for seed, _, loss, _ in got if seed == 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=30_000, help="training tokens per trial")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    os.environ.pop("OMP_NUM_THREADS", None)
    from sweep.data import load_corpus
    from sweep.train.hardware import cpu_cores, default_threads

    mp = multiprocessing.get_context("spawn")
    queue = mp.Queue()
    probe = mp.Process(target=_torch_default, args=(queue,))
    probe.start()
    torch_threads = queue.get()
    probe.join()
    load_before = os.getloadavg()
    rows, losses = [], {}
    with tempfile.TemporaryDirectory() as cache:
        load_corpus(CORPUS, Path(cache))  # prepared once, read by every trial
        for parallel in args.parallel:
            modes = {"default": default_threads(parallel), "one": 1, "torch": torch_threads}
            walls = {}
            for threads in sorted(set(modes.values())):
                rounds = [_round(mp, cache, args.tokens, threads, parallel)
                          for _ in range(args.repeats)]
                walls[threads] = min(wall for wall, _ in rounds)
                losses[(parallel, threads)] = rounds[0][1]
            for mode, threads in modes.items():
                rows.append({"parallel": parallel, "mode": mode, "threads": threads,
                             "wall_s": round(walls[threads], 2),
                             "tokens_per_s": round(parallel * args.tokens / walls[threads])})
                print(f"parallel {parallel}  {mode:7s} {threads} thread(s): "
                      f"{walls[threads]:7.2f} s, {rows[-1]['tokens_per_s']:,} tokens/s")
    load_after = os.getloadavg()
    by = {(r["parallel"], r["mode"]): r["wall_s"] for r in rows}
    ratios = {str(p): round(by[(p, "default")] / by[(p, "one")], 3) for p in args.parallel}
    spread = max(losses.values()) - min(losses.values())
    print(f"default / one: {ratios}; load average before {load_before[0]:.1f}, after "
          f"{load_after[0]:.1f} on {cpu_cores()} cores; val loss spread {spread:.2e}")
    print(json.dumps({
        "bench": "threads", "cores": cpu_cores(), "torch_default_threads": torch_threads,
        "load_1min_before": round(load_before[0], 2), "load_1min_after": round(load_after[0], 2),
        "tokens_per_trial": args.tokens, "model": MODEL, "rows": rows,
        "default_over_one": ratios, "val_loss_spread": spread,
        "targets_met": {f"default_not_slower_parallel_{p}": ratios[str(p)] <= 1.05
                        for p in args.parallel}}))


if __name__ == "__main__":
    main()
