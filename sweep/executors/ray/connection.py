"""Connecting to Ray.

A cluster at an address (checked fast first) or a local instance bound to 127.0.0.1; per-trial
resources from what the cluster has.
"""

from __future__ import annotations

import logging
import os
import socket

import ray

from sweep.adapters.ray import bootstrap_address, refused_by_gcs
from sweep.errors import InputError
from sweep.spec import StudySpec

__all__ = ["UnreachableClusterError", "check_address", "init_ray", "trial_resources"]

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------- Ray
def init_ray(address: str | None = None, *, env_vars: dict[str, str] | None = None) -> bool:
    """Connect to Ray unless this process already has; returns whether it connected here.

    Args:
        address: A cluster address (``auto``, ``host:6379``, ``ray://host:10001``); default
            ``RAY_ADDRESS``, else a local instance (all CPUs, bound to 127.0.0.1, no dashboard).
        env_vars: Variables a cluster's workers need (the job's ``runtime_env``); a local
            instance's workers inherit this process's environment instead.

    Raises:
        ConnectionError: The cluster refused this process's token (`refused_by_gcs`: at once),
            or Ray could not connect.
    """
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        gcs = bootstrap_address() if address == "auto" else address
        refused = None if gcs in (None, "local") or gcs.startswith("ray://") else \
            refused_by_gcs(gcs)
        if refused is not None:  # at once, where ray.init would retry for 20 s
            raise ConnectionError(f"the cluster refused this process: {refused}")
        runtime_env = {"env_vars": dict(env_vars)} if env_vars else None
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 runtime_env=runtime_env)
    else:
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False,
                 _node_ip_address="127.0.0.1", logging_level=logging.WARNING, log_to_driver=False)
    return True


class UnreachableClusterError(InputError, ValueError):
    """A Ray cluster address that is malformed or where no cluster answers."""


def check_address(address: str | None, source: str = "--address", *,
                  timeout_s: float = 5.0) -> None:
    """Fail fast when a Ray cluster address does not answer.

    ``ray.init(address=...)`` waits for an absent cluster's GCS for minutes, logging retries,
    before it gives up; one TCP connection to the address (the GCS port, or the Ray Client
    server port of ``ray://host:port``) that must answer an HTTP/2 preface (both are gRPC
    servers, `_speaks_http2`) tells within ``timeout_s``. ``auto`` is resolved the way Ray does:
    the cluster last started on this machine (recorded in Ray's temp folder), else any raylet
    process running on the machine, so on a shared machine ``auto`` may join another user's
    cluster; give ``host:port`` there. ``local`` and None start a new local instance and need no
    check.

    Args:
        address: ``host:port``, ``ray://host:port``, ``auto``, ``local`` or None.
        source: Where the address came from, for the message (``--address``, ``RAY_ADDRESS``).
        timeout_s: Seconds to wait for the connection.

    Raises:
        UnreachableClusterError: Naming ``source``, the address and the rule or network error.
    """
    if address in (None, "", "local"):
        return
    target = bootstrap_address() if address == "auto" else address
    if target is None:  # only for auto
        raise UnreachableClusterError(
            f"{source} auto: no Ray cluster was started on this machine; start one "
            "(ray start --head --node-ip-address 127.0.0.1) or give its host:port")
    host, sep, port = target.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UnreachableClusterError(
            f"{source} {address}: not a Ray address (host:port, ray://host:port, auto or local)")
    try:
        grpc = _speaks_http2(host.strip("[]"), int(port), timeout_s)
    except OSError as exc:
        raise UnreachableClusterError(
            f"{source} {address}: no Ray cluster answers at {host}:{port} "
            f"({exc.strerror or exc or 'no answer'}); start it (ray start --head) or fix the "
            "address") from None
    if not grpc:
        raise UnreachableClusterError(
            f"{source} {address}: the server at {host}:{port} is not a Ray cluster (it does not "
            "speak gRPC); give the head's GCS port (ray start --head --port, default 6379) or "
            "ray://host:port of its Ray Client server")


def _speaks_http2(host: str, port: int, timeout_s: float) -> bool:
    """Whether ``host:port`` answers the HTTP/2 connection preface with a SETTINGS frame.

    Ray's GCS and Ray Client servers are gRPC servers, and an HTTP/2 server's first frame is
    SETTINGS (RFC 9113, section 3.4); an HTTP/1 server answers text or closes.

    Raises:
        OSError: No connection, or no answer within ``timeout_s``.
    """
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(preface)
        head = b""
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                return False
            head += chunk
    return head[3] == 4  # frame type SETTINGS


def trial_resources(spec: StudySpec) -> dict[str, float]:
    """Per-trial Ray resources: the spec's, capped by the cluster; no GPUs if it has none."""
    cluster = ray.cluster_resources()
    cpus = min(spec.resources.cpus_per_trial, cluster.get("CPU", 1.0))
    gpus = spec.resources.gpus_per_trial
    if gpus and not cluster.get("GPU"):
        log.warning("resources.gpus_per_trial=%s but the Ray cluster has no GPUs; trials run "
                    "on CPUs", gpus)
        gpus = 0.0
    return {"cpu": cpus, "gpu": gpus}
