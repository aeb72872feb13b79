"""Wheels for a GPU machine that has Python and torch but no network: `bench/gpu_check.py`'s needs.

    python bench/gpu_wheels.py --python 3.12 --dest .whl [--have have.txt] [--part-mb 56]

Downloads, for that Python on x86-64 Linux, the wheels of the project's dependencies
(``pyproject.toml``; torch left out: the machine's own is used) and of everything they need,
drops the distributions named in ``--have`` (``pip list --format=freeze`` of the target machine:
what it has already), and packs the rest into folders ``part-1``, ``part-2``, ... of at most
``--part-mb`` MB each (a wheel larger than that is cut into numbered pieces), so that each part
can be carried on its own. ``install.sh`` beside them, run on the target after every part has
been copied into one folder, joins the pieces and installs all with ``pip install --no-index
--no-deps --target DIR``; the project itself runs from its checkout (``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# Never carried: the machine's torch and its CUDA stack.
SKIP = re.compile(r"^(torch|triton|nvidia[-_].*|cuda[-_].*)$")

INSTALL_SH = """#!/usr/bin/env bash
# Join the cut wheels and install every wheel here into $1 (default /tmp/site); then
# export PYTHONPATH=$1:<checkout>:<checkout>/models
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${1:-/tmp/site}
for first in "$here"/*.whl.000; do
    [ -e "$first" ] || continue
    whole=${first%.000}
    cat "$whole".[0-9][0-9][0-9] > "$whole" && rm "$whole".[0-9][0-9][0-9]
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
    --target "$target" "$here"/*.whl
"""


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> list[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in deps if not SKIP.match(norm(re.split(r"[<>=!~\[ ;]", d)[0]))]


def download(python: str, into: Path) -> None:
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", *plat,
                    "--platform", "any", "-d", str(into), *requirements()], check=True)


def dist_name(wheel: Path) -> str:
    return norm(wheel.name.split("-")[0])


def pack(wheels: list[Path], dest: Path, part_bytes: int) -> list[Path]:
    """Wheels into ``part-N`` folders of at most ``part_bytes``; larger ones cut in pieces."""
    pieces: list[tuple[str, bytes | Path]] = []
    for w in sorted(wheels, key=lambda p: -p.stat().st_size):
        if w.stat().st_size <= part_bytes:
            pieces.append((w.name, w))
            continue
        data = w.read_bytes()
        for i in range(0, len(data), part_bytes):
            pieces.append((f"{w.name}.{i // part_bytes:03d}", data[i:i + part_bytes]))
    parts: list[tuple[Path, int]] = []
    for name, what in pieces:  # first fit, largest first
        size = len(what) if isinstance(what, bytes) else what.stat().st_size
        slot = next((i for i, (_, used) in enumerate(parts) if used + size <= part_bytes), None)
        if slot is None:
            parts.append((dest / f"part-{len(parts) + 1}", 0))
            slot = len(parts) - 1
        folder, used = parts[slot]
        folder.mkdir(parents=True, exist_ok=True)
        if isinstance(what, bytes):
            (folder / name).write_bytes(what)
        else:
            shutil.copy2(what, folder / name)
        parts[slot] = (folder, used + size)
    return [p for p, _ in parts]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default="3.12", help="the target's Python, e.g. 3.12")
    ap.add_argument("--dest", type=Path, default=ROOT / ".whl")
    ap.add_argument("--have", type=Path, help="pip list --format=freeze of the target")
    ap.add_argument("--part-mb", type=float, default=56.0)
    args = ap.parse_args(argv)
    have = set()
    if args.have:
        have = {norm(line.split("==")[0]) for line in args.have.read_text().splitlines()
                if line.strip() and not line.startswith("#")}
    cache = args.dest / "download"
    cache.mkdir(parents=True, exist_ok=True)
    download(args.python, cache)
    wheels = [w for w in cache.glob("*.whl") if dist_name(w) not in have
              and not SKIP.match(dist_name(w))]
    parts = pack(wheels, args.dest, int(args.part_mb * 1e6))
    parts[0].joinpath("install.sh").write_text(INSTALL_SH)
    shutil.rmtree(cache)
    total = sum(w.stat().st_size for p in parts for w in p.iterdir())
    print(f"{len(wheels)} wheels, {total / 1e6:.1f} MB in {len(parts)} part(s): "
          + ", ".join(str(p) for p in parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
