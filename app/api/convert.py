"""Domain results to plain JSON-ready dicts, the exact shapes of the response models in ``models``.

Plain dicts rendered by orjson instead of pydantic instances: a batch of 1,000 checks returns
thousands of matches, and a model round trip per match would cost more than the check itself.
"""

from __future__ import annotations

from typing import Any

from neardup.domain import CheckResult, CollectionInfo, CollectionParams, Match, StoredDocument
from neardup.domain.passage_search import PassageResult


def params_dict(params: CollectionParams, documents: int | None = None) -> dict[str, Any]:
    return {
        "name": params.name,
        "threshold": params.threshold,
        "num_perm": params.num_perm,
        "shingle": params.shingle,
        "size": params.size,
        "bands": params.bands,
        "rows": params.rows,
        "seed": params.seed,
        "ttl_seconds": params.ttl_seconds,
        "max_documents": params.max_documents,
        "expected_documents": params.expected_documents,
        "verify": params.verify,
        "bins": params.bins,
        "passages": params.passages,
        "site_field": params.site_field,
        "documents": documents,
    }


def collection_dict(info: CollectionInfo) -> dict[str, Any]:
    return params_dict(info.params, info.documents)


def match_dict(match: Match) -> dict[str, Any]:
    return {"id": match.id, "similarity": float(match.similarity), "metadata": match.metadata}


def check_dict(result: CheckResult) -> dict[str, Any]:
    return {
        "id": result.id,
        "duplicate": result.duplicate,
        "duplicate_of": result.duplicate_of,
        "matches": [match_dict(match) for match in result.matches],
        "inserted": result.inserted,
    }


def document_dict(doc: StoredDocument) -> dict[str, Any]:
    return {"id": doc.id, "metadata": doc.metadata, "inserted_at": doc.inserted_at}


def passages_dict(result: PassageResult) -> dict[str, Any]:
    return {
        "coverage": result.coverage,
        "coverage_all": result.coverage_all,
        "sources": [
            {
                "id": source.id,
                "metadata": source.metadata,
                "containment": source.containment,
                "spans": [
                    {
                        "start": s.start,
                        "end": s.end,
                        "source_start": s.source_start,
                        "source_end": s.source_end,
                        "also_in": [
                            {
                                "id": c.id,
                                "metadata": c.metadata,
                                "source_start": c.source_start,
                                "source_end": c.source_end,
                            }
                            for c in s.also_in
                        ],
                        "also_in_count": s.also_in_count,
                    }
                    for s in source.spans
                ],
            }
            for source in result.sources
        ],
        "more_sources": result.more_sources,
        "documents": result.documents,
    }
