"""Bad input raised anywhere inside a command: one ``error:`` line and exit 2, in one place."""

import pytest
import typer
from typer.testing import CliRunner

from sweep.cli import app, common
from sweep.cluster import ClusterError
from sweep.cluster.auth import TokenError
from sweep.data import DataError
from sweep.errors import InputError
from sweep.executors.optuna.storage import StorageError
from sweep.results import StudyNotFoundError
from sweep.results.dashboard import DashboardError
from sweep.scaling.runs import PointsError
from sweep.spec import SpecError
from sweep.spec.resume import ResumeError
from sweep.study.preflight import PreflightError
from sweep.tracking import StoredSpecError, UnreachableStoreError
from sweep_models import ConfigError

#: Each bad-input error, and the builtin base callers still catch it by.
BAD_INPUT = [
    (SpecError, Exception), (ResumeError, ValueError), (PreflightError, ValueError),
    (DataError, Exception), (UnreachableStoreError, ValueError), (StorageError, ValueError),
    (ClusterError, ValueError),
    (TokenError, ValueError), (StudyNotFoundError, LookupError), (PointsError, ValueError),
    (DashboardError, ValueError), (StoredSpecError, RuntimeError),
]


@pytest.mark.parametrize(("error", "base"), BAD_INPUT, ids=lambda e: e.__name__)
def test_each_bad_input_error_is_an_input_error_and_keeps_its_base(error, base):
    assert issubclass(error, InputError) and issubclass(error, base)


def _group(raised: BaseException) -> typer.Typer:
    """A command group, built as every group of the app is, whose one command raises."""
    group = common.command_group(no_args_is_help=True)

    @group.command()
    def fail(spec_path: str = typer.Argument(..., metavar="SPEC")) -> None:
        raise raised

    @group.command()
    def other() -> None:  # a second command, so that `fail` is addressed by name
        """Nothing."""

    return group


@pytest.mark.parametrize("raised", [
    InputError("data.uri 'x': no such corpus"),
    PreflightError("train.device='cuda': no CUDA device is available on this machine"),
    ConfigError("model.d_model=-1 must be >= 1"),
    SpecError(["model.seq_len: not an integer ('eight')"], "spec.yaml"),
], ids=lambda e: type(e).__name__)
def test_an_input_error_raised_inside_a_command_is_one_message_and_exit_2(raised):
    result = CliRunner().invoke(_group(raised), ["fail", "spec.yaml"])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)  # typer.Exit(2), not the error
    assert result.output == f"error: {raised}\n"
    assert "Traceback" not in result.output


def test_an_error_that_is_not_bad_input_is_not_swallowed():
    raised = RuntimeError("a fault of the service")
    result = CliRunner().invoke(_group(raised), ["fail", "spec.yaml"])
    assert result.exit_code == 1
    assert result.exception is raised
    assert "error:" not in result.output


def _commands(group):
    """Every leaf command, asked through the group's own interface so lazily added ones count."""
    ctx = typer.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if hasattr(command, "list_commands"):
            yield from _commands(command)
        else:
            yield name, command


def test_every_command_of_the_app_maps_bad_input_to_exit_2():
    """Every command, those the study kinds add under ``sweep analyze`` too, is built by the
    one class that maps bad input, so none needs a mapping of its own."""
    commands = dict(_commands(typer.main.get_command(app)))
    assert {"validate", "run", "worker", "submit", "results", "scaling", "transfer"} <= \
        set(commands)
    mapped = type(typer.main.get_command(_group(InputError())).commands["fail"])
    assert all(type(command) is mapped for command in commands.values()), \
        {n: type(c).__name__ for n, c in commands.items() if type(c) is not mapped}
