"""Functions several test modules share (importable as ``testsupport``: tests/ is on sys.path).

Fixtures live in ``conftest.py``; plain functions a test calls live here.
"""

import math
import socket


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (a server started next may take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Hoffmann et al. 2022 (Chinchilla), eq. 10: L(N, D) = E + A / N^alpha + B / D^beta.
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def law(n, d, p=CHINCHILLA):
    """The loss of ``n`` parameters trained on ``d`` tokens under the law ``p``."""
    return p["E"] + p["A"] / n ** p["alpha"] + p["B"] / d ** p["beta"]


def same_3_digits(value, truth):
    """Agree to 3 significant digits: within half a unit of the third digit of the truth."""
    return abs(value - truth) <= 0.5 * 10 ** (math.floor(math.log10(abs(truth))) - 2)


class FailingAfter:
    """An MLflow client whose server goes away after ``n`` writes (as requests reports it)."""

    def __init__(self, client, n):
        self.client, self.n = client, n

    def __getattr__(self, name):
        attr = getattr(self.client, name)
        if name not in ("log_batch", "log_text", "set_terminated", "set_tag"):
            return attr

        def call(*args, **kwargs):
            if self.n <= 0:
                raise ConnectionError("Max retries exceeded with url: /api/2.0/mlflow/runs "
                                      "(Connection refused)")
            self.n -= 1
            return attr(*args, **kwargs)

        return call
