"""A stop signal that lands while a server handles a request still stops it (`stop_signals`)."""

import http.server
import os
import signal
import threading
import urllib.request

import pytest

from sweep.results.ui import Stopped, stop_signals


class _SignalsItself(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        os.kill(os.getpid(), signal.SIGHUP)  # the handler runs here, in the main thread
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_signal_inside_a_request_is_not_swallowed_by_the_servers_error_handling():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _SignalsItself)
    port = httpd.server_address[1]
    before = signal.getsignal(signal.SIGHUP)
    # socketserver catches every Exception of a request and serves on: were the stop one, the
    # server would serve until this timer shuts it down.
    timer = threading.Timer(10.0, httpd.shutdown)
    client = threading.Thread(target=lambda: _get(f"http://127.0.0.1:{port}/"), daemon=True)
    timer.start()
    try:
        with pytest.raises(Stopped, match="SIGHUP"), stop_signals():
            client.start()
            httpd.serve_forever(poll_interval=0.05)
    finally:
        timer.cancel()
        httpd.server_close()
    assert signal.getsignal(signal.SIGHUP) == before  # the previous handler is back


def _get(url):
    try:
        urllib.request.urlopen(url, timeout=5).read()
    except OSError:
        pass
