"""The MLflow server app ``sweep ui`` runs: MLflow's own, in the model-training layout.

MLflow 3 keeps the layout of its pages (GenAI or model training) in the browser's local storage
(``mlflow.workflowType_v1``, GenAI until the user switches), and a page's ``workflowType`` query
only overrides it for that page: a run opened from the runs table, whose link has no query,
falls back to the GenAI layout. The app sets the stored layout to model training before MLflow's
page script reads it, unless the user chose one on this server before. Registered as the
``mlflow.app`` entry point ``sweep-ui`` (``mlflow server --app-name sweep-ui``).
"""

from __future__ import annotations

import os
from typing import Any

#: The local-storage key and value of MLflow 3.17's layout switch (``useLocalStorage``: the key
#: with ``_v<version>``, the value as JSON).
LAYOUT_KEY = "mlflow.workflowType_v1"
LAYOUT_VALUE = '"machine_learning"'

#: Runs first in the page's head: sets the layout where none is stored (private windows and
#: blocked storage keep MLflow's own behaviour).
LAYOUT_SCRIPT = (
    f"<script>try{{if(localStorage.getItem('{LAYOUT_KEY}')===null)"
    f"localStorage.setItem('{LAYOUT_KEY}','{LAYOUT_VALUE}')}}catch(e){{}}</script>"
).encode()


def with_layout(html: bytes) -> bytes:
    """``html`` (MLflow's ``index.html``) with `LAYOUT_SCRIPT` as the first element of its head.

    A page without a ``<head>`` is returned unchanged.
    """
    at = html.find(b"<head>")
    if at < 0:
        return html
    at += len(b"<head>")
    return html[:at] + LAYOUT_SCRIPT + html[at:]


def _add_layout(response: Any) -> Any:
    from flask import request

    if request.endpoint != "serve" or response.status_code != 200 \
            or response.mimetype != "text/html":
        return response
    response.direct_passthrough = False
    response.set_data(with_layout(response.get_data()))
    return response


def create_app() -> Any:
    """MLflow's server app with `with_layout` applied to its page (``index.html``).

    An ASGI app under uvicorn (MLflow's default server), the Flask app under gunicorn or
    waitress, as MLflow's own ``basic-auth`` app does.
    """
    from mlflow.server import app

    app.after_request(_add_layout)
    # mlflow server names the server it started in this variable (mlflow.environment_variables).
    if os.environ.get("_MLFLOW_SGI_NAME") == "uvicorn":
        from mlflow.server.fastapi_app import create_fastapi_app

        return create_fastapi_app(app)
    return app
