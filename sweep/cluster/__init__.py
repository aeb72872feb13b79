"""Studies on a Ray cluster through its Jobs API: ``sweep submit``, ``status``, ``logs``, ``stop``.

`submission` checks a spec here and builds the job (``sweep run`` on the cluster, the spec and,
where the cluster lacks it, the code in its ``runtime_env``, metadata marking it as this
service's study); `probe` asks the cluster what it has; `connection` reaches the dashboard with
the cluster's token (`auth`); `jobs` finds, follows and stops this service's jobs. Ray is
imported only inside the functions that talk to the cluster, so a bad spec is refused before it
loads.
"""

from sweep.cluster.auth import ClusterToken, TokenError, find_token
from sweep.cluster.connection import CONNECT_TIMEOUT_S, ClusterError, check_address, connect
from sweep.cluster.jobs import (
    already_runs,
    describe,
    ended,
    exit_code,
    follow_logs,
    is_study,
    stop,
    study_job,
    study_jobs,
    submission_id,
    wait_ended,
)
from sweep.cluster.probe import ClusterFacts, code_fingerprint, code_plan, probe_cluster
from sweep.cluster.submission import (
    STOP_GRACE_S,
    JobRequest,
    check_submittable,
    job_request,
    results_uri,
    shipped_spec,
)

__all__ = ["CONNECT_TIMEOUT_S", "STOP_GRACE_S", "ClusterError", "ClusterFacts", "ClusterToken",
           "JobRequest", "TokenError", "already_runs", "check_address", "check_submittable",
           "code_fingerprint", "code_plan", "connect", "describe", "ended", "exit_code",
           "find_token", "follow_logs", "is_study", "job_request", "probe_cluster",
           "results_uri", "shipped_spec", "stop", "study_job", "study_jobs", "submission_id",
           "wait_ended"]
