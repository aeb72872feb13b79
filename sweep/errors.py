"""`InputError`, the one base of the errors that mean bad input.

Bad input is what the user gave that cannot be used: a spec, a flag, a file, a URL, a table, a
store or a cluster. The CLI turns any `InputError` raised inside a command into one message
and exit status 2 (`sweep.cli.common`), as it does `sweep_models.errors.ConfigError`, which
cannot subclass it (``models/`` never imports ``sweep/``). This module imports nothing, so
every package can subclass it.
"""

__all__ = ["InputError"]


class InputError(Exception):
    """Bad input; the message names the field, flag or address at fault and the rule it breaks.

    Subclasses keep the builtin base their callers catch them by (``ValueError``,
    ``LookupError``, ``RuntimeError``) beside this one.
    """
