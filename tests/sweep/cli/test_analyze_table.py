"""``sweep analyze scaling --csv`` on someone else's table: other column names, a FLOPs column
instead of tokens, two conditions in one file, CSV or parquet, read through the options alone.

Independent truth: the same points in the native format (`testsupport.isoflop_frame`, drawn
from Hoffmann et al. 2022's law); the options must give the fits the very same numbers.
"""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from testsupport import cli_probe, isoflop_frame
from typer.testing import CliRunner

from sweep import schema as S
from sweep.cli import app
from sweep.scaling.options import TableOptions
from sweep.scaling.points_csv import read_csv_points

OPTIONS = ["--columns", "n_params=Model Size", "--columns", "budget=Training FLOP",
           "--columns", "loss=Final Loss", "--where", "condition=raw_loss", "--convention", "6ND"]


def tables(tmp_path):
    """The native table and the same points as a foreign one, beside a second condition.

    The foreign table names N "Model Size", the loss "Final Loss", gives each run's IsoFLOP
    budget as "Training FLOP" and no tokens, and interleaves the raw_loss rows with another
    condition's (the same sizes, losses 1.2 times higher).
    """
    points = isoflop_frame(noise=0.005, seed=2)
    native = points.drop(columns=["trial"]).rename(columns={"budget_flops": "budget"})
    native.to_csv(tmp_path / "native.csv", index=False)
    ours = pd.DataFrame({"Model Size": points["n_params"], "Training FLOP": points["budget_flops"],
                         "Final Loss": points["loss"], "condition": "raw_loss"})
    other = ours.assign(**{"Final Loss": ours["Final Loss"] * 1.2, "condition": "smoothed"})
    foreign = pd.concat([ours, other]).sort_index(kind="stable").reset_index(drop=True)
    foreign.to_csv(tmp_path / "foreign.csv", index=False)
    foreign.to_parquet(tmp_path / "foreign.parquet")
    return tmp_path / "native.csv", tmp_path / "foreign.csv", tmp_path / "foreign.parquet"


def analyze(*args):
    return CliRunner().invoke(app, ["analyze", "scaling", *map(str, args)])


def fits(out, approaches):
    """Each approach's entry (less how its tokens came), and the verdict's rows."""
    return ({k: {f: v for f, v in out[k].items() if f != "n_tokens_from"} for k in approaches},
            out["verdict"]["rows"])


def test_a_foreign_table_reads_as_the_very_same_points(tmp_path):
    native, foreign, parquet = tables(tmp_path)
    expected = read_csv_points(native)
    options = TableOptions(columns=(("n_params", "Model Size"), ("budget", "Training FLOP"),
                                    ("loss", "Final Loss")),
                           where=(("condition", "raw_loss"),), convention="6ND")
    for path in (foreign, parquet):
        got = read_csv_points(path, options)
        for name in (S.METRIC_N_PARAMS, S.METRIC_N_TOKENS, S.METRIC_BUDGET_FLOPS, "loss"):
            np.testing.assert_array_equal(got[name].to_numpy(), expected[name].to_numpy())
        assert list(got["trial"]) == list(range(0, 72, 2))  # the file's data rows
        assert got.attrs["excluded"] == {"--where": 36}
        assert got.attrs["n_tokens_from"] == "budget / (6 n_params), C = 6ND"


def test_through_the_options_alone_approach_2_and_the_verdict_match_the_native_table(tmp_path):
    native, foreign, _ = tables(tmp_path)
    common = ["--approach", "2", "--bootstrap", 0, "--json", "--budget", "1e22"]
    expected = json.loads(analyze("--csv", native, *common, "--out", tmp_path / "a").stdout)
    res = analyze("--csv", foreign, *OPTIONS, *common, "--out", tmp_path / "b")
    assert res.exit_code == 0, res.output
    assert fits(json.loads(res.stdout), ["2"]) == fits(expected, ["2"])


@pytest.mark.slow  # six fits of L(N, D) and their plots in one process: 4.5 s of CPU measured
def test_a_foreign_table_fits_exactly_as_the_same_points_in_the_native_format(tmp_path):
    native, foreign, parquet = tables(tmp_path)
    common = ["--approach", "2,3,vpnls", "--bootstrap", 0, "--json", "--budget", "1e22"]
    res = analyze("--csv", native, *common, "--out", tmp_path / "a")
    assert res.exit_code == 0, res.output
    expected = json.loads(res.stdout)
    res = analyze("--csv", parquet, *OPTIONS, *common, "--out", tmp_path / "b")
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    approaches = ("2", "3", "vpnls")
    assert fits(got, approaches) == fits(expected, approaches)  # to the last bit
    assert got["3"]["n_points"] == 36 and got["3"]["huber_delta"] == 1e-3
    assert got["vpnls"]["n_tokens_from"] == "budget / (6 n_params), C = 6ND"
    assert expected["vpnls"]["n_tokens_from"] is None
    assert abs(got["vpnls"]["a"] - 0.28 / (0.34 + 0.28)) < 0.02  # the law's own exponent


def test_the_text_report_says_how_the_table_was_read(tmp_path):
    _, foreign, _ = tables(tmp_path)
    res = analyze("--csv", foreign, *OPTIONS, "--approach", "2", "--bootstrap", 0,
                  "--out", tmp_path / "out")
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "foreign.csv: 36 points (excluded: --where 36)" in text
    assert "n_tokens = budget / (6 n_params), C = 6ND" in text
    assert "rows-dropped" not in text  # rows left out on request are no data problem


def test_the_where_values_of_one_column_are_either_and_a_number_matches_as_written(tmp_path):
    _, foreign, _ = tables(tmp_path)
    frame = pd.read_csv(foreign).assign(seed=[0.0, 1.0] * 36)
    frame.to_csv(foreign, index=False)
    base = [*OPTIONS[:6], "--convention", "6nd", "--approach", "2", "--bootstrap", 0, "--json"]
    res = analyze("--csv", foreign, *base, "--where", "condition=raw_loss",
                  "--where", "condition=smoothed", "--out", tmp_path / "a")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["2"]["n_points"] == 72
    res = analyze("--csv", foreign, *base, "--where", "seed=1", "--out", tmp_path / "b")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["2"]["n_points"] == 36


@pytest.mark.parametrize("args, message", [
    (["--columns", "n_params"], "--columns 'n_params': must be NAME=COLUMN, e.g. "
                                'n_params="Model Size"'),
    (["--columns", "size=Model Size"], "--columns size=Model Size: 'size' is no column of a "
                                       "table of points; map one of n_params, n_tokens, loss, "
                                       "flops, budget, n_params_non_embedding"),
    (["--columns", "loss=a", "--columns", "loss=b"], "--columns loss: mapped twice"),
    (["--columns", "flops=FLOPs"], "--columns flops=FLOPs: {csv} has no column 'FLOPs'; its "
                                   "columns: Model Size, Training FLOP, Final Loss, condition"),
    (["--where", "cond=raw_loss"], "--where cond=raw_loss: {csv} has no column 'cond'; its "
                                   "columns: Model Size"),
    (["--where", "condition=raw"], "--where condition=raw: no row of {csv} has condition raw; "
                                   "its values: raw_loss, smoothed"),
    (["--where", "condition"], "--where 'condition': must be NAME=COLUMN, e.g. "
                               "condition=raw_loss"),
    (["--convention", "7ND"], "--convention '7ND': unknown; choose 6ND (C = 6ND)"),
    (["--huber-delta", "0"], "--huber-delta 0: must be a number in [1e-06, 1e+09] "
                             "(Hoffmann's 0.001; a large one, e.g. 1e9, makes approach 3 least "
                             "squares on log loss)"),
    (["--huber-delta", "nan"], "--huber-delta nan: must be a number in [1e-06, 1e+09]"),
    (["--huber-delta", "1e10"], "--huber-delta 1e10: must be a number in"),
    (["--huber-delta", "lots"], "--huber-delta lots: must be a number in [1e-06, 1e+09]"),
    (["budget=Training FLOP"], "'budget=Training FLOP': one NAME=VALUE per flag; repeat "
                               "--columns or --where for each"),
])
def test_a_bad_table_flag_exits_2_naming_it_and_writes_nothing(tmp_path, args, message):
    _, foreign, _ = tables(tmp_path)
    mapped = OPTIONS[:6] + ["--convention", "6ND"]
    res = analyze("--csv", foreign, *mapped, *args, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert message.format(csv=foreign) in " ".join(res.stderr.split())
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, message", [
    ([], "missing column(s) n_tokens; it has Model Size, Training FLOP, Final Loss, condition, "
         "n_params, budget, loss (required: loss, n_params, n_tokens; optional: flops, budget); "
         "map the table's own names with --columns NAME=COLUMN or derive n_tokens from its "
         "budget column with --convention 6ND"),
    (["--convention", "6ND", "--columns", "n_tokens=Model Size"],
     "--convention 6ND: {csv} has an n_tokens column (Model Size); the convention derives "
     "n_tokens for a table without one"),
])
def test_the_convention_is_named_where_it_is_missing_or_has_nothing_to_do(tmp_path, args,
                                                                          message):
    _, foreign, _ = tables(tmp_path)
    frame = pd.read_csv(foreign)
    frame.assign(n_params=frame["Model Size"], budget=frame["Training FLOP"],
                 loss=frame["Final Loss"]).to_csv(foreign, index=False)
    res = analyze("--csv", foreign, *args, "--out", tmp_path / "out")
    assert res.exit_code == 2, res.output
    assert message.format(csv=foreign) in " ".join(res.stderr.split())


def test_the_table_flags_read_a_table_and_not_a_study(tmp_path):
    res = analyze(tmp_path / "study", "--where", "condition=raw_loss")
    assert res.exit_code == 2
    assert "--where reads a --csv table; a study's points already have the names" in " ".join(
        res.stderr.split())


_PROBE = cli_probe(("pandas", "numpy", "mlflow", "matplotlib"))


@pytest.mark.parametrize("flag", [["--columns", "size=Model Size"], ["--where", "nothing"],
                                  ["--convention", "6NDT"], ["--huber-delta", "-1"]])
def test_a_bad_table_flag_is_refused_before_pandas_loads(tmp_path, flag):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    proc = subprocess.run([sys.executable, "-c", _PROBE, "analyze", "scaling", "--csv",
                           str(tmp_path / "t.csv"), *flag, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"code": 2, "loaded": []}, proc.stderr
    assert flag[0] in proc.stderr
