"""Routes of mirror detection, for collections created with a ``site_field``: one site's mirrors, and
the pairs of sites ranked by the share of pages they have in common (docs/design.md, "Sites")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from neardup.api.auth import READ
from neardup.api.deps import CollectionCtx
from neardup.api.errors import error_responses, invalid
from neardup.api.models import MirrorList, SiteOut
from neardup.api.responses import JSONBytesResponse
from neardup.api.routing import OrjsonRoute
from neardup.domain.sites import MirrorPair, SiteMirrors

#: Longest site accepted in the path (a site is at most 256 bytes once derived; a full URL may be sent).
MAX_SITE_CHARS = 2048
#: Most pairs one /mirrors answer lists.
MAX_MIRROR_LIMIT = 10_000

router = APIRouter(prefix="/v1/collections/{name}", tags=["sites"], route_class=OrjsonRoute)

SiteParam = Annotated[
    str,
    Path(
        description="the site: a host as the collection derives it from its site_field (an absolute URL "
        "is accepted and stands for its lower-cased host), URL-encoded; no line break",
        examples=["example.org"],
        # Documented for clients and checked in get_site with a message that says what to change (a line
        # break anywhere in the path is refused for every route: api/errors.py, api/deps.py).
        json_schema_extra={"minLength": 1, "maxLength": MAX_SITE_CHARS, "pattern": r"^[^\n]+$"},
    ),
]


def site_dict(found: SiteMirrors) -> dict[str, Any]:
    return {
        "site": found.site,
        "pages": found.pages,
        "mirrors": [
            {
                "site": m.site,
                "pages": m.pages,
                "shared": m.shared,
                "share": m.share,
                "other_shared": m.other_shared,
                "share_of_other": m.share_of_other,
            }
            for m in found.mirrors
        ],
    }


def pair_dict(pair: MirrorPair) -> dict[str, Any]:
    return {
        "site": pair.site,
        "other": pair.other,
        "pages": pair.pages,
        "other_pages": pair.other_pages,
        "shared": pair.shared,
        "other_shared": pair.other_shared,
        "share": pair.share,
        "share_of_other": pair.share_of_other,
    }


@router.get(
    "/sites/{site:path}",
    response_model=SiteOut,
    responses=error_responses(401, 404, 409, 422, 503),
    openapi_extra=READ,
    summary="A site's pages and the sites that share them",
)
async def get_site(ctx: CollectionCtx, site: SiteParam) -> Response:
    """`shared`: pages of this site with a verified near-duplicate on the other site; `share` =
    shared / pages; `share_of_other` the same from the other side. Best first (the larger of the two
    shares). An unknown site has 0 pages and no mirrors. 409 when the collection has no site_field."""
    if not site or len(site) > MAX_SITE_CHARS:
        raise invalid(("path", "site"), f"a site is 1 to {MAX_SITE_CHARS} characters")
    return JSONBytesResponse(site_dict(await ctx.service.site(ctx.name, site)))


@router.get(
    "/mirrors",
    response_model=MirrorList,
    responses=error_responses(401, 404, 409, 422, 503),
    openapi_extra=READ,
    summary="Pairs of sites that mirror each other, ranked by share",
)
async def mirrors(
    ctx: CollectionCtx,
    min_share: Annotated[
        float, Query(ge=0.0, le=1.0, description="a pair is listed when either direction's share reaches it")
    ] = 0.5,
    min_pages: Annotated[
        int, Query(ge=1, le=2**31, description="both sites have at least this many pages")
    ] = 1,
    limit: Annotated[int, Query(ge=1, le=MAX_MIRROR_LIMIT, description="most pairs to return")] = 100,
) -> Response:
    """Each pair once, `site` being the side with the larger share. Reads every site's counts:
    O(sites + pairs) per call. 409 when the collection has no site_field."""
    pairs = await ctx.service.mirrors(ctx.name, min_share=min_share, min_pages=min_pages, limit=limit)
    return JSONBytesResponse({"pairs": [pair_dict(p) for p in pairs]})
