"""``GET /``: a small page to try the service (paste a text, pick a collection, see the matches and the
collection's S-curve). Plain HTML/JS/CSS from ``app/web/``, no build step; the files ship in the wheel."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, Response

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
#: The only files served, with their types: nothing else under app/ can be fetched through here.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
#: Small files that change with releases: revalidate each time rather than cache stale ones.
CACHE = {"cache-control": "no-cache"}

router = APIRouter(tags=["web"], include_in_schema=False)


@router.get("/")
async def index() -> Response:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8", headers=CACHE)


@router.get("/web/{asset}")
async def asset(asset: str) -> Response:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise HTTPException(404, f"no such file: /web/{asset}")
    return FileResponse(WEB_DIR / asset, media_type=media_type, headers=CACHE)
