"""The sweep service: study specs, search spaces, trial runner, executors, tracking, CLI.

Each concept is a subpackage with its own ``__all__`` (see ``docs/architecture.md``); importing
``sweep`` itself loads none of them, so ``import sweep.spec`` stays free of torch and MLflow.
"""

__all__: list[str] = []
