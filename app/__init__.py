"""neardup: a near-duplicate lookup service (MinHash signatures in C++, LSH band tables in Redis/Valkey).

Importing the package costs nothing: ``neardup.client`` needs only httpx; the service
(``neardup.main``), the sketch module (``neardup.sketch``) and the storage need the ``server`` extra.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    #: The installed distribution's version: pyproject.toml is its one definition.
    __version__ = version("neardup")
except PackageNotFoundError:  # pragma: no cover - imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
