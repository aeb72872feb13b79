"""`sweep ui`'s server: MLflow's GenAI job workers only when asked (``--jobs``)."""

from sweep.results.ui import JOB_EXECUTION, runs_view_url, ui_env


def test_the_job_workers_are_off_unless_asked_and_a_users_setting_wins(monkeypatch):
    monkeypatch.delenv(JOB_EXECUTION, raising=False)
    assert ui_env()[JOB_EXECUTION] == "false"
    assert ui_env(job_execution=True)[JOB_EXECUTION] == "true"
    monkeypatch.setenv(JOB_EXECUTION, "true")
    assert ui_env()[JOB_EXECUTION] == "true"


def test_the_runs_url_carries_the_landing_query():
    assert runs_view_url("http://127.0.0.1:5000/", "7", "viewStateShareKey=k") == (
        "http://127.0.0.1:5000/#/experiments/7/runs?viewStateShareKey=k")
    assert runs_view_url("http://h:1", "7").endswith("/runs?workflowType=machine_learning")
