"""Dependency aliases of the routes: the service, the limits and the metrics of the running app.

All three are built by the app factory's lifespan and kept on ``app.state``; nothing here creates
clients or reads settings.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from app.api.errors import invalid
from app.api.limits import Limits, collection_name_problem
from app.api.metrics import Metrics
from app.api.models import COLLECTION_NAME_PATTERN
from app.domain import Index
from app.settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_service(request: Request) -> Index:
    service: Index = request.app.state.service
    default = request.app.state.default_collection
    if not default.ready:  # the store was down at start-up: create `default` as soon as it is back
        await default.ensure(service)
    return service


def get_limits(request: Request) -> Limits:
    limits: Limits = request.app.state.limits
    return limits


def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


def collection_name(
    request: Request,
    name: Annotated[
        str,
        Path(
            description="the collection's name",
            examples=["default"],
            # Documented for clients; checked below, with a message that says what to change.
            json_schema_extra={"pattern": COLLECTION_NAME_PATTERN},
        ),
    ],
) -> str:
    if request.scope["path"].endswith("\n"):
        # Starlette matches routes with `$`, which also matches before a final line break: without
        # this, ".../documents/a%0A" would silently address document "a", and ".../default%0A" the
        # collection "default". Neither ids nor names can contain a line break, so refuse the path.
        raise invalid(("path",), "the path ends with a line break (%0A); ids and names cannot contain one")
    if problem := collection_name_problem(name):
        raise invalid(("path", "name"), problem)
    return name


def document_id(
    doc_id: Annotated[str, Path(description="the document's id (URL-encoded)")],
    limits: Annotated[Limits, Depends(get_limits)],
) -> str:
    if problem := limits.id_problem(doc_id):
        raise invalid(("path", "doc_id"), problem)
    return doc_id


SettingsDep = Annotated[Settings, Depends(get_settings)]
ServiceDep = Annotated[Index, Depends(get_service)]
LimitsDep = Annotated[Limits, Depends(get_limits)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
CollectionName = Annotated[str, Depends(collection_name)]
DocumentId = Annotated[str, Depends(document_id)]
