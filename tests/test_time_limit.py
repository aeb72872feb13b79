"""The fast suite's limit (tests/time_limit.py) fails an unmarked test whose call is slow."""

import pytest
from time_limit import MARKED, over_time_limit


def test_only_an_unmarked_call_over_the_limit_is_refused():
    why = over_time_limit(5.2, {"parametrize"}, 5.0)
    assert "5.2 s, over the 5 s" in why and "@pytest.mark.slow" in why
    assert over_time_limit(4.9, set(), 5.0) is None
    for marker in MARKED:
        assert over_time_limit(60.0, {marker, "parametrize"}, 5.0) is None, marker
    assert over_time_limit(60.0, set(), 0) is None  # 0: no limit


def test_a_busy_machine_stretches_the_limit_by_its_contention():
    assert over_time_limit(8.9, set(), 5.0, busy=2.0) is None
    why = over_time_limit(10.2, set(), 5.0, busy=2.0)
    assert "10.2 s, over the 10 s (5 s on an idle machine, x2.0 for its load)" in why
    assert over_time_limit(5.2, set(), 5.0, busy=0.5) is not None  # never below the idle limit


@pytest.mark.parametrize(("limit", "busy", "outcomes"),
                         [("0.1", "1", {"passed": 2, "failed": 1}), ("0", "1", {"passed": 3}),
                          ("0.1", "4", {"passed": 3})], ids=["0.1s", "off", "0.1s-busy"])
def test_a_sleeping_unmarked_test_fails_and_names_the_limit_and_the_marker(pytester, limit, busy,
                                                                           outcomes, monkeypatch):
    monkeypatch.setenv("FAST_TEST_CONTENTION", busy)  # "1": as on an idle machine
    pytester.makeini("[pytest]\nmarkers =\n    slow: s\n")
    pytester.makepyfile(test_inner="""
        import time
        import pytest

        def test_quick():
            pass

        def test_sleepy():
            time.sleep(0.25)

        @pytest.mark.slow
        def test_sleepy_and_slow():
            time.sleep(0.25)
    """)
    result = pytester.runpytest("-p", "time_limit", "-o", f"fast_test_limit_s={limit}")
    result.assert_outcomes(**outcomes)
    if outcomes.get("failed"):
        result.stdout.fnmatch_lines(["*test_inner.py::test_sleepy: its call took 0.* s, over the "
                                     "0.1 s an unmarked test may take (fast_test_limit_s); make "
                                     "it cheaper or mark it @pytest.mark.slow"])
