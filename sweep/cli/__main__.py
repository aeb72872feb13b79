"""``python -m sweep.cli``: the same command line as ``sweep``."""

from sweep.cli import program

program()
