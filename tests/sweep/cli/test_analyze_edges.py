"""``sweep analyze scaling --csv`` at the edge of float64 and of size, run as a real process.

A row ``1e7,1e9,1e308`` once crashed the process inside scipy's nnls (SIGSEGV), ``1e308,1e308``
raised an OverflowError traceback, and a 3.3M-row table ran for 600 s at 1.3 GB without
printing. Each now exits 2 with one message and nothing written; the refusal of the huge table
reads only the first rows (its peak memory is that of the bare command).
"""

import subprocess
import sys

import numpy as np
import pytest
from testsupport import law
from typer.testing import CliRunner

from sweep.cli import app

HEADER = "n_params,n_tokens,loss,budget\n"


def _table(path, extra_rows=()):
    """IsoFLOP points from the Chinchilla law at 3 budgets x 5 sizes, then ``extra_rows``."""
    rows = []
    for c in (1e18, 1e19, 1e20):
        for n in np.geomspace(1e7, 1e9, 5).tolist():
            rows.append(f"{n!r},{c / (6 * n)!r},{law(n, c / (6 * n))!r},{c!r}")
    path.write_text(HEADER + "\n".join([*rows, *extra_rows]) + "\n")
    return path


def _analyze(csv, out):
    """Run the command in a process of its own: (exit status, stdout, stderr)."""
    proc = subprocess.run([sys.executable, "-m", "sweep.cli", "analyze", "scaling", "--csv",
                           str(csv), "--bootstrap", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _one_message(stderr):
    lines = " ".join(stderr.split())
    assert "Traceback" not in stderr and lines.count("error:") == 1, stderr
    return lines


def test_a_1e308_loss_row_exits_2_naming_it(tmp_path):
    csv = _table(tmp_path / "edge.csv", ["1e7,1e9,1e308,1e18"])
    code, stdout, stderr = _analyze(csv, tmp_path / "out")
    assert code == 2 and stdout == ""
    assert _one_message(stderr) == (f"error: --csv {csv}: column loss, line 17: '1e308' is "
                                    "outside [0, 1000] nats/token, the range a fit accepts")
    assert not (tmp_path / "out").exists()


def test_a_1e308_count_row_exits_2_naming_it(tmp_path):
    csv = _table(tmp_path / "edge.csv", ["1e308,1e308,2.0,1e18"])
    code, stdout, stderr = _analyze(csv, tmp_path / "out")
    assert code == 2 and stdout == ""
    assert _one_message(stderr) == (f"error: --csv {csv}: column n_params, line 17: '1e308' is "
                                    "outside [1, 1e+20] parameters, the range a fit accepts")
    assert not (tmp_path / "out").exists()


# The command run as ``python -m sweep.cli``, recording at exit its peak resident memory
# (``VmHWM``: kept per process image, unlike ``ru_maxrss``, which a child inherits from the
# test process that forked it).
_PEAK_PROBE = """
import atexit, runpy, sys
peak_file = sys.argv.pop()
def record():
    with open("/proc/self/status") as status, open(peak_file, "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM")))
atexit.register(record)
sys.argv[0] = "sweep"
runpy.run_module("sweep.cli", run_name="__main__")
"""


def test_a_3_3_million_row_table_exits_2_at_once_in_bounded_memory(tmp_path):
    csv = tmp_path / "huge.csv"
    with csv.open("wb") as f:
        f.write(b"n_params,n_tokens,loss\n" + b"1e7,1e9,3.0\n" * 3_300_000)  # 40 MB
    peak = tmp_path / "peak.txt"
    proc = subprocess.run([sys.executable, "-c", _PEAK_PROBE, "analyze", "scaling", "--csv",
                           str(csv), "--out", str(tmp_path / "out"), str(peak)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_message(proc.stderr) == (f"error: --csv {csv}: more than 10,000 rows; a table "
                                         "of points holds at most 10,000 (one row per trained "
                                         "run: aggregate or sample the runs)")
    # Its first 10,001 rows cost nothing beside the command's own imports: 130 MB at the peak
    # (reading the whole table, 370 MB; fitting it, 1.3 GB).
    name, kb, unit = peak.read_text().split()
    assert name == "VmHWM:" and unit == "kB" and int(kb) < 200 * 1024
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # an approach-2 fit and its plots: 5-7 s
def test_a_row_of_inf_and_nan_is_left_out_and_counted(tmp_path):
    csv = _table(tmp_path / "edge.csv", ["inf,nan,inf,inf"])
    res = CliRunner().invoke(app, ["analyze", "scaling", "--csv", str(csv), "--approach", "2",
                                   "--bootstrap", "0", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert f"{csv.name}: 15 points (excluded: non-finite loss 1)" in " ".join(res.stdout.split())


def test_only_rows_of_inf_and_nan_exit_2(tmp_path):
    csv = tmp_path / "edge.csv"
    csv.write_text(HEADER + "inf,nan,inf,inf\nnan,inf,nan,nan\n")
    res = CliRunner().invoke(app, ["analyze", "scaling", "--csv", str(csv), "--out",
                                   str(tmp_path / "out")])
    assert res.exit_code == 2
    assert _one_message(res.stderr) == (f"error: --csv {csv}: no row has a finite loss and "
                                        "finite, positive n_params and n_tokens (2 rows read)")
    assert not (tmp_path / "out").exists()
