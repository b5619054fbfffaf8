"""Logging of the service: one JSON object per line (for log shippers) or uvicorn's plain text, and the
request id of the request being served, added to every record logged while serving it.

``neardup.api.access_log`` sets the request id and writes the access log; ``neardup.cli`` picks the format
(``neardup serve --log-format json``) through :func:`log_config`, applied in every worker process.
"""

from __future__ import annotations

import copy
import datetime
import logging
import traceback
from contextvars import ContextVar
from typing import Any, Literal

import orjson

LogFormat = Literal["text", "json"]

#: The id of the request whose handling is logging, or None outside a request.
request_id: ContextVar[str | None] = ContextVar("neardup_request_id", default=None)

ACCESS_LOGGER = "neardup.access"

#: Attributes every LogRecord has; anything else on a record came from ``extra=`` and is a field.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", "request_id", ...extra fields, "exception"}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = request_id.get()
        if current is not None:
            entry["request_id"] = current
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return orjson.dumps(entry, default=str).decode()


def log_config(level: str, fmt: LogFormat = "text", access_log: bool = False) -> dict[str, Any]:
    """uvicorn's logging config plus ours. ``json``: every logger (uvicorn's too) writes JSON lines and
    the access log is ours (``neardup.access``: request id, route, status, duration); ``text``: as
    uvicorn prints it, with uvicorn's own access log."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["neardup"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    # Silent in text mode: uvicorn's own access log (its --access-log) is the one printed there.
    access_level = "INFO" if access_log and fmt == "json" else "WARNING"
    config["loggers"][ACCESS_LOGGER] = {"handlers": ["default"], "level": access_level, "propagate": False}
    if fmt == "json":
        for name in ("default", "access"):
            config["formatters"][name] = {"()": "neardup.logs.JsonFormatter"}
    return config
