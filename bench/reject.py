"""How fast ``sweep run``, ``validate``, ``worker`` and ``submit`` refuse a bad spec.

Bad input should be refused in well under a second, before the service loads torch, MLflow or
Optuna. This benchmark writes a set of bad specs into a temporary folder (type errors, unknown
keys, bad ranges, bad choices, a missing or malformed corpus, a tracking URI of an unknown
scheme, a CUDA device on a machine without one, a ``search.storage`` that is a file of the
user's, YAML that does not parse, a spec file that does not exist) and runs each through the
four commands as subprocesses (``python -m sweep.cli``, ``--out`` a folder of its own), one
at a time. Per case and command:

- ``cpu_s``: user + system CPU seconds of the subprocess (``resource.getrusage`` of the
  children, before and after);
- ``wall_s``: wall-clock seconds;
- ``rc``: the exit status, which must be 2 (bad input), with no traceback on stderr and no
  output folder left behind.

Side by side in the same run, ``python -c pass`` is measured the same way as the floor (what
any Python command costs on this machine), and ``python -m sweep.cli --help`` (what the CLI's
own imports cost before it reads a spec). Target: a refusal within 0.3 s of CPU on a 2-core
machine, judged on each command's median case (the max is printed beside it: a busy machine
adds a few hundredths to some cases), run from compiled bytecode as an installed package is: one
untimed refusal per command first writes it to a temporary ``PYTHONPYCACHEPREFIX``. The spec
and the refusal path load none of torch, MLflow, Optuna, scipy, pandas, datasketch or numpy (a
test holds this, ``tests/sweep/spec``). The CUDA case runs only where torch sees no CUDA
device. Prints a table and ends with one JSON line: median and max CPU and wall seconds per
command, whether every case exited 2 cleanly, and whether the target holds.

With ``--corpus DIR`` the cases are instead the spec files of ``DIR`` as they are, e.g. the
hostile corpus ``tests/sweep/spec/hostile`` (malformed YAML, aliases and tags, wrong types,
bad ranges...); a file whose first line is ``# expect: TEXT`` must also be refused with a
message containing ``TEXT`` (``expected`` in the table and JSON; flagged ``[unexpected
message]`` otherwise).

    python bench/reject.py [--repeats 1] [--corpus tests/sweep/spec/hostile]

Runtime: about 30 s on an idle 2-core CPU machine when refusals are fast (about 1.5 minutes
for the 66 files of the hostile corpus); a few minutes when every refusal loads torch and
MLflow first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_CPU_S = 0.3
COMMANDS = ("run", "validate", "worker", "submit")
#: ``sweep submit``'s cluster: nothing listens there, and a bad spec is refused before it.
DEAD_ADDRESS = "http://127.0.0.1:9"

GOOD = """\
name: NAME
data: synthetic:markov?order=1&vocab=16&seed=0&tokens=20000
model: {vocab_size: 16, seq_len: 8, d_model: 16, n_heads: 2, n_layers: 1}
train: {steps: 2, batch_size: 2, eval_tokens: 8, device: cpu,
         lr: {float: [1.0e-4, 1.0e-2], log: true}}
search: {executor: optuna, sampler: random, pruner: none, n_trials: 2}
"""

#: (case, what is wrong, the spec's text; None: the spec file does not exist).
CASES: list[tuple[str, str, str | None]] = [
    ("type", "model.seq_len is text", GOOD.replace("seq_len: 8", "seq_len: eight")),
    ("unknown-key", "model.d_modle", GOOD.replace("d_model: 16", "d_modle: 16")),
    ("unknown-section", "a section trian", GOOD + "trian: {steps: 3}\n"),
    ("float-range", "lr range low > high",
     GOOD.replace("[1.0e-4, 1.0e-2]", "[1.0e-2, 1.0e-4]")),
    ("int-range", "n_layers int range low > high",
     GOOD.replace("n_layers: 1", "n_layers: {int: [4, 1]}")),
    ("choice", "search.sampler unknown", GOOD.replace("sampler: random", "sampler: annealing")),
    ("negative", "train.batch_size 0", GOOD.replace("batch_size: 2", "batch_size: 0")),
    ("heads", "n_heads does not divide d_model", GOOD.replace("n_heads: 2", "n_heads: 3")),
    ("no-name", "name missing", "\n".join(GOOD.splitlines()[1:]) + "\n"),
    ("data-scheme", "data s3://", GOOD.replace("synthetic:markov?order=1&vocab=16&seed=0&"
                                               "tokens=20000", "s3://bucket/corpus")),
    ("data-missing", "text: file missing",
     GOOD.replace("synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
                  "text:/nonexistent/corpus.txt")),
    ("tokens-missing", "tokens: folder missing",
     GOOD.replace("synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
                  "tokens:/nonexistent/shakespeare")),
    ("data-param", "synthetic vocab=1",
     GOOD.replace("order=1&vocab=16", "order=1&vocab=1")),
    ("tracking-scheme", "tracking.uri ftp://", GOOD + "tracking: {uri: 'ftp://example.com/x'}\n"),
    ("cuda", "train.device cuda, no CUDA here", GOOD.replace("device: cpu", "device: cuda")),
    ("storage-foreign", "search.storage a file of the user's",
     GOOD.replace("n_trials: 2}", "n_trials: 2, storage: WORK/notes.txt}")),
    ("yaml", "YAML does not parse", GOOD.replace("n_layers: 1}", "n_layers: 1")),
    ("no-file", "spec file does not exist", None),
]


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


#: Bytecode folder of the children (`PYTHONPYCACHEPREFIX`), set in `main`: an installed
#: package runs from compiled bytecode, and a checkout run with ``PYTHONDONTWRITEBYTECODE``
#: would otherwise compile every module of the refusal path from source on each start.
PYCACHE: Path | None = None


def measure(argv: list[str], cwd: Path) -> dict:
    """One subprocess: exit status, CPU and wall seconds, whether stderr holds a traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if PYCACHE is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    cpu0, t0 = _child_cpu(), time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          errors="replace")
    wall, cpu = time.perf_counter() - t0, _child_cpu() - cpu0
    return {"rc": proc.returncode, "cpu_s": cpu, "wall_s": wall,
            "traceback": "Traceback" in proc.stderr + proc.stdout,
            "message": (proc.stderr.strip().splitlines() or [""])[-1][:90],
            "output": " ".join((proc.stderr + proc.stdout).split())}


def corpus_cases(folder: Path) -> list[tuple[str, str, Path, str | None]]:
    """The spec files of ``folder``: (case, what, path, the ``# expect:`` text or None)."""
    cases = []
    for path in sorted(folder.glob("*.yaml")):
        first = path.read_bytes().split(b"\n", 1)[0].decode(errors="replace")
        expected = first.removeprefix("# expect: ") if first.startswith("# expect: ") else None
        cases.append((path.stem, expected or "", path, expected))
    if not cases:
        raise SystemExit(f"--corpus {folder}: no *.yaml files there")
    return cases


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per case and command; figures are their medians")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="a folder of bad spec files to run instead of the built-in cases "
                        "(e.g. tests/sweep/spec/hostile)")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="sweep-reject-") as tmp:
        work = Path(tmp)
        if args.corpus is not None:
            cases = corpus_cases(args.corpus.resolve())
        else:
            cases = []
            for case, what, text in CASES:
                if case == "cuda" and _has_cuda():
                    continue
                path = work / f"{case}.yaml"
                if text is not None:
                    path.write_text(text.replace("NAME", f"reject-{case}")
                                    .replace("WORK", str(work)))
                cases.append((case, what, path, None))
        (work / "notes.txt").write_text("the user's own notes\n")  # storage-foreign
        global PYCACHE
        PYCACHE = work / "pycache"
        for command in COMMANDS:  # untimed: compiles the bytecode of each command's path
            measure([sys.executable, "-m", "sweep.cli", command, str(cases[0][2])]
                    + (["--address", DEAD_ADDRESS] if command == "submit" else
                       [] if command == "validate" else ["--out", str(work / "warm")]), work)
        n_floor = max(3, args.repeats)
        floor = [measure([sys.executable, "-c", "pass"], work) for _ in range(n_floor)]
        cli_help = [measure([sys.executable, "-m", "sweep.cli", "--help"], work)
                    for _ in range(n_floor)]
        for case, what, path, expected in cases:
            for command in COMMANDS:
                out = work / "out" / f"{case}-{command}"
                argv = [sys.executable, "-m", "sweep.cli", command, str(path)]
                if command == "submit":
                    argv += ["--address", DEAD_ADDRESS]
                elif command != "validate":
                    argv += ["--out", str(out)]
                runs = [measure(argv, work) for _ in range(args.repeats)]
                left = out.exists() or (work / "runs").exists()
                rows.append({
                    "case": case, "what": what, "command": command,
                    "rc": runs[-1]["rc"], "traceback": any(r["traceback"] for r in runs),
                    "left_behind": left,
                    "expected": expected is None
                    or " ".join(expected.split()) in runs[-1]["output"],
                    "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                    "wall_s": statistics.median(r["wall_s"] for r in runs),
                    "message": runs[-1]["message"],
                })
    floor_cpu = statistics.median(r["cpu_s"] for r in floor)
    floor_wall = statistics.median(r["wall_s"] for r in floor)
    width = max([16, *(len(r["case"]) for r in rows)])
    print(f"{'case':<{width}} {'command':<9} {'rc':>3} {'cpu s':>6} {'wall s':>6}  message")
    for r in rows:
        flags = ("" if r["rc"] == 2 else " [exit != 2]") + (" [traceback]" if r["traceback"]
                                                            else "") \
            + (" [left a folder]" if r["left_behind"] else "") \
            + ("" if r["expected"] else " [unexpected message]")
        print(f"{r['case']:<{width}} {r['command']:<9} {r['rc']:>3} {r['cpu_s']:>6.2f} "
              f"{r['wall_s']:>6.2f}  {r['message']}{flags}")
    help_cpu = statistics.median(r["cpu_s"] for r in cli_help)
    print(f"floor (python -c pass): {floor_cpu:.3f} s CPU, {floor_wall:.3f} s wall; "
          f"sweep --help (the CLI's own imports): {help_cpu:.3f} s CPU")
    per_command = {}
    for command in COMMANDS:
        mine = [r for r in rows if r["command"] == command]
        cpu = [r["cpu_s"] for r in mine]
        wall = [r["wall_s"] for r in mine]
        clean = all(r["rc"] == 2 and not r["traceback"] and not r["left_behind"]
                    and r["expected"] for r in mine)
        per_command[command] = {
            "median_cpu_s": round(statistics.median(cpu), 3), "max_cpu_s": round(max(cpu), 3),
            "median_wall_s": round(statistics.median(wall), 3),
            "max_wall_s": round(max(wall), 3),
            "all_exit_2": clean,
            "not_clean": [r["case"] for r in mine if r["rc"] != 2 or r["traceback"]
                          or r["left_behind"] or not r["expected"]],
            "target_met": statistics.median(cpu) <= TARGET_CPU_S,
        }
        print(f"{command:<9} CPU median {per_command[command]['median_cpu_s']:.2f} s, max "
              f"{per_command[command]['max_cpu_s']:.2f} s; all exit 2 cleanly: {clean}")
    total = time.perf_counter() - started
    print(f"load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
          f"benchmark took {total:.0f} s")
    print(json.dumps({
        "bench": "reject",
        "corpus": str(args.corpus) if args.corpus is not None else None,
        "cases": len(cases),
        "repeats": args.repeats,
        "floor_cpu_s": round(floor_cpu, 3),
        "floor_wall_s": round(floor_wall, 3),
        "cli_help_cpu_s": round(help_cpu, 3),
        "commands": per_command,
        "target_cpu_s": TARGET_CPU_S,
        "target_met": all(c["target_met"] for c in per_command.values()),
        "all_exit_2": all(c["all_exit_2"] for c in per_command.values()),
    }))


if __name__ == "__main__":
    main()
