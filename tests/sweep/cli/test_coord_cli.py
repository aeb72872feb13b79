"""``sweep coord-check``: bad input exits 2 before any work; a small check writes its outputs."""

import json

import pytest
from typer.testing import CliRunner

from sweep.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("args", "message"), [
    (["no-such-preset"], "neither a spec file nor a preset"),
    (["tiny", "--widths", "64,x"], "'x' is not a whole number"),
    (["tiny", "--widths", "64"], "at least two distinct positive widths"),
    (["tiny", "--widths", "64,72"], "width=72: must be a positive multiple of"),
    (["tiny", "--parametrization", "ntk"], "--parametrization 'ntk': choose from"),
    (["tiny", "--lr", "-1"], "--lr -1.0: must be a finite number > 0"),
    (["tiny", "--set", "d_model=3"], "--set d_model: give model.FIELD=VALUE"),
    (["studies/quickstart.yaml"], "model.n_layers, model.attn_temperature"),
])
def test_bad_input_exits_2_with_one_message(args, message, tmp_path):
    result = runner.invoke(app, ["coord-check", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_a_small_check_writes_the_table_figure_and_records(tmp_path):
    out = tmp_path / "cc"
    result = runner.invoke(app, ["coord-check", "tiny", "--widths", "32,64", "--steps", "2",
                                 "--set", "model.seq_len=32", "--batch-size", "2",
                                 "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["logit_slopes"]) == {"sp", "mup"} and data["lr"] == 0.01
    assert len(data["records"]) == 2 * 2 * 2 * 4  # pars x widths x steps x modules
    assert (out / "coord_check.png").stat().st_size > 0
    assert (out / "coord_check.csv").read_text().startswith("parametrization,width,module,t,l1")


def test_a_transfer_spec_gives_its_widths_and_parametrizations(tmp_path):
    spec = tmp_path / "t.yaml"
    spec.write_text("name: t\ndata: builtin:python-stdlib\n"
                    "model: {seq_len: 16, n_layers: 1, parametrization: {choice: [sp, mup]}, "
                    "base_d_model: 32}\n"
                    "train: {tokens: 4096, lr: {choice: [0.001, 0.002, 0.004]}}\n"
                    "transfer: {widths: [32, 64], d_head: 16}\n")
    result = runner.invoke(app, ["coord-check", str(spec), "--steps", "1", "--batch-size",
                                 "1", "--out", str(tmp_path / "cc"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["widths"], data["parametrizations"]) == ([32, 64], ["sp", "mup"])
    assert (tmp_path / "cc" / "data").is_dir()  # the corpus under --out, not ./runs
