"""The CLI's rich consoles, imported on first use (`sweep.cli.common`'s ``console``).

rich costs about 30 ms of imports; a refusal prints its one line without it
(`sweep.cli.common.bad_input`).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from sweep.redact import redact
from sweep.tables import keep_numbers_whole

__all__ = ["RedactingConsole"]


class RedactingConsole(Console):
    """A rich `Console` whose printed text passes through `sweep.redact.redact` first.

    A table it prints never has a number cut to fit (`sweep.tables.keep_numbers_whole`).
    """

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: D102 (Console.print's)
        super().print(*(redact(o) if isinstance(o, str) else
                        keep_numbers_whole(o, self.width) if isinstance(o, Table) else o
                        for o in objects), **kwargs)
