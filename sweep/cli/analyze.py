"""``sweep analyze``: the analyses of a study's trials, each a study kind's command.

Every registered kind (`sweep.kinds`) adds its own (`sweep.kinds.StudyKind.add_commands`):
``scaling`` (scaling laws, `sweep.kinds.scaling.analyze`) and ``transfer`` (the learning rate's
drift with width, `sweep.kinds.transfer.analyze`).
"""

from __future__ import annotations

from sweep.cli import common
from sweep.cli.common import app
from sweep.kinds import kinds

__all__ = ["analyze_app"]

analyze_app = common.command_group(help="Analyses of a study's trials.", no_args_is_help=True)
app.add_typer(analyze_app, name="analyze")
for _kind in kinds():
    _kind.add_commands(analyze_app)
