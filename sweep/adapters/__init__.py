"""Adapters to the private parts of third-party libraries, one module per library.

Where the service needs what a library does not expose publicly (a trial's storage record in
Optuna, ``OptunaSearch``'s study in Ray Tune, PBT's exploit step), it goes through these
modules only, each naming the version it was checked against, so an upgrade has one place to
look. `sweep.adapters.optuna` imports Optuna, `sweep.adapters.ray` Ray: import the one needed.
"""
