"""The sweep service: study specs, search spaces, trial runner, executors, tracking, CLI."""
