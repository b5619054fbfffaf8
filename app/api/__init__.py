"""The HTTP layer: one router per resource, request/response models, and the error mapping.

``app.main`` mounts ``routers`` and installs the handlers of ``app.api.errors``.
"""

from fastapi import APIRouter

from app.api import checks, collections, documents, health, web

routers: list[APIRouter] = [collections.router, checks.router, documents.router, health.router, web.router]

__all__ = ["routers"]
