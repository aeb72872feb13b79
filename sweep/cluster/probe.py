"""What the cluster has: asked once per submission by a short job that only reads.

Whether the cluster's Python has this project's code (the same source as here, another
version, or none), whether it has the project's dependencies, and the cluster's
``MLFLOW_TRACKING_URI``: none of these is visible through the Jobs API, so `probe_cluster`
submits a job whose entrypoint is ``python -c`` of `cluster_facts` (standard library only; it
imports nothing it looks for), reads the one line it prints, and deletes the job. The same
`code_fingerprint` runs here, so the two sources compare exactly.

`code_plan` turns the answer into what the study job needs: nothing when the cluster's code is
this code, else the packages ``sweep`` and ``sweep_models`` shipped in the job's ``runtime_env``
(``py_modules``: Ray uploads them once per content hash and puts them first on the job's
``PYTHONPATH``, for the driver and for every trial worker it starts).
"""

from __future__ import annotations

import inspect
import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DEPENDENCIES", "PROBE_TIMEOUT_S", "ClusterFacts", "cluster_facts", "code_fingerprint",
           "code_plan", "local_packages", "probe_cluster"]

#: Modules the study job imports besides this project's (import names of its dependencies).
DEPENDENCIES = ("torch", "numpy", "optuna", "mlflow", "pandas", "pydantic", "yaml", "typer",
                "rich", "scipy", "matplotlib", "ray")
#: This project's top-level packages, shipped when the cluster does not have them.
PACKAGES = ("sweep", "sweep_models")
#: Seconds the probe job may take, from submission to its end (a busy cluster queues it).
PROBE_TIMEOUT_S = 120.0
_MARKER = "sweep-cluster-facts:"


def code_fingerprint(roots: list[str]) -> str:
    """16 hex digits of SHA-256 over the ``.py`` files under each package folder in ``roots``.

    Each file contributes its path relative to its package's parent and its bytes, in sorted
    order; ``__pycache__`` is left out. Standard library only (it runs in the probe job).
    """
    import hashlib
    import os

    digest = hashlib.sha256()
    for root in roots:
        parent = os.path.dirname(os.path.abspath(root))
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, parent).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read() + b"\0")
    return digest.hexdigest()[:16]


def cluster_facts(packages: tuple[str, ...], dependencies: tuple[str, ...]) -> dict[str, Any]:
    """What the Python running this has: the project's packages, dependencies, MLflow store.

    Standard library only; nothing looked for is imported (``importlib.util.find_spec``). The
    tracking URI's password, if any, is replaced by ``***``.

    Returns:
        ``python`` (the interpreter), ``roots`` (package folder or None, per package),
        ``fingerprint`` (`code_fingerprint` of the roots, None unless all are found),
        ``version`` (the installed ``transformer-sweep`` distribution, or None), ``missing``
        (dependencies not found), ``mlflow_tracking_uri`` (None when unset).
    """
    import importlib.metadata
    import importlib.util
    import os
    import sys
    import urllib.parse

    roots = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        roots.append(locations[0] if locations else None)
    found = [root for root in roots if root]
    try:
        version = importlib.metadata.version("transformer-sweep")
    except importlib.metadata.PackageNotFoundError:
        version = None
    uri = os.environ.get("MLFLOW_TRACKING_URI") or None
    if uri:
        try:
            parts = urllib.parse.urlsplit(uri)
            if parts.password is not None:
                uri = uri.replace(f":{parts.password}@", ":***@", 1)
        except ValueError:
            uri = uri.split("://", 1)[0] + "://***"
    return {
        "python": sys.executable,
        "roots": roots,
        "fingerprint": code_fingerprint(found) if len(found) == len(roots) else None,
        "version": version,
        "missing": [d for d in dependencies if importlib.util.find_spec(d) is None],
        "mlflow_tracking_uri": uri,
    }


@dataclass(frozen=True)
class ClusterFacts:
    """The probe job's answer (`cluster_facts` on the cluster), with the probe's duration."""

    python: str
    roots: list[str | None]
    fingerprint: str | None
    version: str | None
    missing: list[str]
    mlflow_tracking_uri: str | None
    probe_s: float


def probe_entrypoint() -> str:
    """The probe job's shell command: ``python -c`` of `cluster_facts`, printing one line."""
    script = "\n".join([
        "from __future__ import annotations",  # the annotations name typing's Any
        inspect.getsource(code_fingerprint),
        inspect.getsource(cluster_facts),
        "import json",
        f"print({_MARKER!r} + json.dumps(cluster_facts({PACKAGES!r}, {DEPENDENCIES!r})))",
    ])
    return f"python -c {shlex.quote(script)}"


def probe_cluster(client: Any, metadata: dict[str, str]) -> ClusterFacts:
    """Run the probe job on the cluster of ``client`` and return what it found.

    The job asks for no CPU, so it runs even while trials hold every CPU; it is deleted once
    read, so job lists show only studies.

    Args:
        client: A `ray.job_submission.JobSubmissionClient` (`sweep.cluster.connect`).
        metadata: The job's metadata (marks it as this service's probe).

    Raises:
        sweep.cluster.ClusterError: The probe did not end within `PROBE_TIMEOUT_S`, failed
            (no ``python`` on the cluster's ``PATH``, for example), or printed no answer.
    """
    from ray.job_submission import JobStatus

    from sweep.cluster.connection import ClusterError

    start = time.monotonic()
    job_id = client.submit_job(entrypoint=probe_entrypoint(), metadata=metadata)
    try:
        while not (status := client.get_job_status(job_id)).is_terminal():
            if time.monotonic() - start > PROBE_TIMEOUT_S:
                client.stop_job(job_id)
                raise ClusterError(f"the cluster did not run a {PROBE_TIMEOUT_S:.0f}-second "
                                   f"probe job ({job_id}, still {status}); is it busy or "
                                   "short of nodes? (ray status on the head)")
            time.sleep(0.2)
        logs = client.get_job_logs(job_id)
    finally:
        _delete_when_ended(client, job_id)
    line = next((ln for ln in logs.splitlines() if ln.startswith(_MARKER)), None)
    if status != JobStatus.SUCCEEDED or line is None:
        tail = " | ".join(logs.strip().splitlines()[-3:]) or "no output"
        raise ClusterError(f"the cluster could not run the probe job's `python` ({status}: "
                           f"{tail}); start Ray from an environment where `python` is the one "
                           "Ray runs")
    facts = json.loads(line[len(_MARKER):])
    return ClusterFacts(probe_s=time.monotonic() - start, **facts)


def _delete_when_ended(client: Any, job_id: str) -> None:
    for _ in range(50):  # a job can be deleted once it has ended; stopping takes a moment
        if client.get_job_status(job_id).is_terminal():
            client.delete_job(job_id)
            return
        time.sleep(0.2)


def local_packages() -> list[Path]:
    """The folders of this project's packages as imported here (``sweep``, ``sweep_models``)."""
    import importlib
    import inspect

    return [Path(inspect.getfile(importlib.import_module(name))).parent for name in PACKAGES]


def code_plan(facts: ClusterFacts) -> tuple[dict[str, Any], str]:
    """What the study job's ``runtime_env`` needs for the code, and a line saying which.

    Returns:
        ``runtime_env`` entries (none, or ``py_modules`` with ``excludes``) and the line.

    Raises:
        sweep.cluster.ClusterError: The cluster's Python lacks some of `DEPENDENCIES` (the
            shipped code would not import there).
    """
    from sweep.cluster.connection import ClusterError

    if facts.missing:
        raise ClusterError(f"the cluster's python ({facts.python}) lacks {', '.join(facts.missing)}"
                           ", which the study needs; install transformer-sweep's dependencies "
                           "on every node (pip install transformer-sweep)")
    packages = local_packages()
    here = code_fingerprint([str(p) for p in packages])
    if facts.fingerprint == here:
        return {}, (f"code: the cluster's installed transformer-sweep {facts.version or ''} "
                    f"({facts.roots[0]}) is this source ({here})").replace("  ", " ")
    if facts.fingerprint is None:
        why = f"the cluster's python ({facts.python}) has no transformer-sweep"
    else:
        why = (f"the cluster's transformer-sweep ({facts.roots[0]}, source "
               f"{facts.fingerprint}) is not this source ({here})")
    env = {"py_modules": [str(p) for p in packages], "excludes": ["__pycache__", "*.pyc"]}
    return env, (f"code: shipped with the job (runtime_env py_modules "
                 f"{', '.join(p.name for p in packages)}, source {here}): {why}")
