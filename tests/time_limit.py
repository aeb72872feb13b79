"""The default suite stays fast: an unmarked test fails when its call takes too long.

A pytest plugin (``pytest_plugins`` in conftest.py). Unmarked: none of the markers of
`MARKED` (slow, ray, server and browser tests are left out of the default suite; a gpu test's
time is its device's). The limit is the ini option ``fast_test_limit_s`` (pyproject.toml;
``-o fast_test_limit_s=0`` turns it off, say under a coverage tracer); only the call phase
counts, not the fixtures a module or the session shares.

The limit is for an idle machine. On a busy one (more runnable processes than cores, from
``os.getloadavg``) a call's wall time stretches with the contention, so the limit stretches by
the same factor: a test is flagged for what it costs, not for what else runs beside it.
"""

import os

import pytest

#: The markers (pyproject.toml) that exempt a test from the limit.
MARKED = ("slow", "ray", "server", "gpu", "browser")


def contention():
    """How many times over the machine's cores are asked for: 1-minute load / cores, at least 1.

    ``FAST_TEST_CONTENTION`` in the environment sets it instead (the plugin's own tests).
    """
    fixed = os.environ.get("FAST_TEST_CONTENTION")
    return max(1.0, float(fixed) if fixed else os.getloadavg()[0] / (os.cpu_count() or 1))


def over_time_limit(seconds, markers, limit_s, busy=1.0):
    """Why a test's call of ``seconds`` breaks the fast suite's limit, or None if it does not.

    A test with none of `MARKED` may take ``limit_s`` seconds in its call on an idle machine,
    ``limit_s * busy`` on one whose `contention` is ``busy``; a longer one is made cheaper or
    marked ``slow``. ``limit_s`` 0 turns the check off.
    """
    allowed = limit_s * max(1.0, busy)
    if not limit_s or seconds <= allowed or any(m in MARKED for m in markers):
        return None
    busy_note = f" ({limit_s:g} s on an idle machine, x{busy:.1f} for its load)" if busy > 1 else ""
    return (f"its call took {seconds:.1f} s, over the {allowed:g} s{busy_note} an unmarked test "
            f"may take (fast_test_limit_s); make it cheaper or mark it @pytest.mark.slow")


def pytest_addoption(parser):
    parser.addini("fast_test_limit_s", "seconds the call of a test without a slow, ray, server, "
                  "gpu or browser marker may take; 0 for no limit", default="5")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.passed:
        why = over_time_limit(report.duration, {m.name for m in item.iter_markers()},
                              float(item.config.getini("fast_test_limit_s")), contention())
        if why is not None:
            report.outcome, report.longrepr = "failed", f"{item.nodeid}: {why}"
    return report
