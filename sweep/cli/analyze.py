"""``sweep analyze``: the analyses of a study's trials, each a study kind's command.

Every registered kind (`sweep.kinds`) adds its own (`sweep.kinds.StudyKind.add_commands`):
``scaling`` (scaling laws, `sweep.kinds.scaling.analyze`) and ``transfer`` (the learning rate's
drift with width, `sweep.kinds.transfer.analyze`). The kinds are loaded when ``sweep analyze``
is used, not with every command (they load the spec's models).
"""

from __future__ import annotations

from typing import Any

import typer

from sweep.cli import common
from sweep.cli.common import app

__all__ = ["analyze_app"]


class _KindAnalyses(common.Group):
    """The ``analyze`` group, filled with the kinds' commands the first time it is asked."""

    _filled = False

    def _fill(self) -> None:
        if self._filled:
            return
        from sweep.kinds import kinds

        commands = common.command_group()
        for kind in kinds():
            kind.add_commands(commands)
        for name, command in typer.main.get_group(commands).commands.items():
            self.add_command(command, name)
        self._filled = True

    def list_commands(self, ctx: Any) -> list[str]:
        self._fill()
        return super().list_commands(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        self._fill()
        return super().get_command(ctx, cmd_name)


analyze_app = common.command_group(cls=_KindAnalyses, help="Analyses of a study's trials.",
                                   no_args_is_help=True)
app.add_typer(analyze_app, name="analyze")
