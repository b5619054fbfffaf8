"""JSON responses rendered with orjson: the batch endpoint returns thousands of matches per call."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response


class JSONBytesResponse(Response):
    """``application/json`` rendered by orjson (FastAPI's ``ORJSONResponse`` is deprecated).

    Routes return this directly with plain dicts and lists, so FastAPI skips its own response-model
    validation pass; the declared ``response_model`` still documents the shape in OpenAPI.
    """

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
