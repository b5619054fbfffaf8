"""The HTTP layer: one router per resource, request/response models, and the error mapping.

``neardup.main`` mounts ``routers`` and installs the handlers of ``neardup.api.errors``.
"""

from fastapi import APIRouter

from neardup.api import checks, collections, documents, health, sites, web

routers: list[APIRouter] = [
    collections.router, checks.router, documents.router, sites.router, health.router, web.router,
]  # fmt: skip

__all__ = ["routers"]
