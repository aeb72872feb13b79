"""The MLflow app of ``sweep ui`` opens MLflow's pages in the model-training layout (the browser
test shows it on a page; these hold the pieces)."""

from importlib.metadata import entry_points

from sweep.results.ui import UI_APP, ui_command
from sweep.tracking.ui_app import LAYOUT_KEY, LAYOUT_SCRIPT, with_layout


def test_the_layout_script_is_the_first_thing_in_the_head():
    page = b'<!doctype html><html><head><meta charset="utf-8"><script src="main.js"></script>'
    out = with_layout(page)
    assert out == (b'<!doctype html><html><head>' + LAYOUT_SCRIPT
                   + b'<meta charset="utf-8"><script src="main.js"></script>')
    assert LAYOUT_KEY.encode() in LAYOUT_SCRIPT
    assert b"===null" in LAYOUT_SCRIPT  # a layout the user chose stays


def test_a_page_without_a_head_is_left_as_it_is():
    assert with_layout(b"not found") == b"not found"


def test_sweep_ui_runs_mlflow_server_with_the_registered_app():
    cmd = ui_command("sqlite:////tmp/x/mlflow.db")
    assert cmd[cmd.index("--app-name") + 1] == UI_APP
    (point,) = [p for p in entry_points(group="mlflow.app") if p.name == UI_APP]
    assert point.value == "sweep.tracking.ui_app:create_app"
