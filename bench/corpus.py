"""Assemble the benchmark corpus: real text shipped by Debian and PyPI packages, as one JSONL file.

``python bench/corpus.py`` installs what it needs (Debian packages through apt-get, PyPI sdists through
``pip download``), turns man pages, package documentation, copyright files and the source and docs of
several versions of the same PyPI projects (natural near-duplicates) into plain-text documents, and
writes ``bench/data/corpus.jsonl`` (one ``{"id", "text", "source"}`` per line, sorted by id) and
``bench/data/manifest.json`` (every package version, archive and file used, with sizes and sha256).
Everything is walked in sorted order, so the same machine image gives the same corpus byte for byte.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
SDISTS = DATA / "sdists"

#: Debian packages whose man pages become documents (English, German, French, Spanish: the tokenizer
#: sees accented Latin as well as ASCII). groff-base and man-db render them.
MAN_PACKAGES = [
    "manpages",
    "manpages-dev",
    "perl-doc",
    "git-man",
    "manpages-de",
    "manpages-fr",
    "manpages-es",
    "manpages-it",
    "manpages-nl",
    "manpages-pl",
    "manpages-pt-br",
]
#: Python's documentation as shipped in reStructuredText (``_sources/*.rst.txt``), no HTML to strip.
PYDOC_PACKAGE = "python3.11-doc"
TOOL_PACKAGES = ["groff-base", "man-db"]
DEBIAN_PACKAGES = sorted({*MAN_PACKAGES, PYDOC_PACKAGE, *TOOL_PACKAGES})

#: Several versions of the same projects: a file that changed a little between releases is a natural
#: near-duplicate, one that did not is an exact one. Which files of each archive are kept is chosen
#: per project so that no single project dominates the corpus (Django's and SQLAlchemy's Python
#: sources alone would be ~100 MB, so only their documentation is taken).
PYPI_RELEASES: dict[str, list[str]] = {
    "attrs": ["23.1.0", "23.2.0", "24.2.0"],
    "click": ["8.0.4", "8.1.3", "8.1.7"],
    "django": ["3.2.25", "4.1.13", "4.2.16", "5.0.9", "5.1.3"],
    "docutils": ["0.20.1", "0.21.2"],
    "flask": ["2.2.5", "2.3.3", "3.0.3"],
    "jinja2": ["3.0.3", "3.1.2", "3.1.4"],
    # pip vendors requests, urllib3, rich, pygments and more: copies of files that other projects and
    # other releases ship too.
    "pip": ["22.3.1", "23.0.1", "23.3.2", "24.0", "24.2", "24.3.1"],
    "pygments": ["2.17.2", "2.18.0"],
    "pytest": ["7.4.4", "8.0.2", "8.2.2", "8.3.3"],
    "requests": ["2.28.2", "2.31.0", "2.32.3"],
    "setuptools": ["68.2.2", "69.5.1", "70.3.0", "72.2.0", "75.1.0"],
    "sphinx": ["7.1.2", "7.2.6", "7.3.7", "7.4.7", "8.0.2"],
    "sqlalchemy": ["1.4.54", "2.0.20", "2.0.36"],
    "werkzeug": ["2.2.3", "2.3.8", "3.0.4"],
}
PYPI_SUFFIXES: dict[str, tuple[str, ...]] = {
    "django": (".txt",),
    "sqlalchemy": (".rst",),
}
DEFAULT_SUFFIXES = (".py", ".rst", ".txt", ".md")

#: Documents outside this range of UTF-8 bytes are left out (and listed as skipped in the manifest):
#: tiny files are mostly stubs, and a few multi-megabyte changelogs or licence bundles would otherwise
#: dominate a throughput figure that is meant to be about typical documents.
MIN_BYTES, MAX_BYTES = 200, 1 << 20
MANWIDTH = "100"


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    source: str
    path: str
    package: str
    version: str
    file_size: int
    file_sha256: str


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kwargs)  # type: ignore[call-overload, no-any-return]


# --- installing what the corpus is made of ---------------------------------------------------------


def debian_versions(packages: Iterable[str]) -> dict[str, str]:
    """Installed version of each package ("" when it is not installed)."""
    versions: dict[str, str] = {}
    for package in packages:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Version}", package],
            text=True,
            capture_output=True,
        )
        status, _, version = proc.stdout.partition("\t")
        versions[package] = version if proc.returncode == 0 and status.startswith("ii") else ""
    return versions


def ensure_debian(packages: list[str]) -> dict[str, str]:
    missing = [name for name, version in debian_versions(packages).items() if not version]
    if missing:
        if os.geteuid() != 0:
            sys.exit(f"corpus: Debian packages {missing} are missing; run as root or apt-get install them")
        print(f"corpus: apt-get install {' '.join(missing)}", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True, env=env
        )
    versions = debian_versions(packages)
    still_missing = [name for name, version in versions.items() if not version]
    if still_missing:
        sys.exit(f"corpus: could not install {still_missing}")
    return versions


def sdist_path(name: str, version: str) -> Path | None:
    # Older releases capitalise the archive name (Django-4.2.16.tar.gz), newer ones don't.
    for candidate in sorted(SDISTS.glob("*.tar.gz")):
        stem = candidate.name[: -len(".tar.gz")]
        if stem.lower() == f"{name}-{version}".lower():
            return candidate
    return None


def ensure_pypi(releases: dict[str, list[str]]) -> dict[str, Path]:
    SDISTS.mkdir(parents=True, exist_ok=True)
    archives: dict[str, Path] = {}
    for name in sorted(releases):
        for version in releases[name]:
            path = sdist_path(name, version)
            if path is None:
                print(f"corpus: pip download {name}=={version}", file=sys.stderr)
                # The source distribution, not a wheel: only sdists carry the documentation.
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "download",
                        "-q",
                        "--no-deps",
                        "--no-binary",
                        ":all:",
                        f"{name}=={version}",
                        "-d",
                        str(SDISTS),
                    ],
                    check=True,
                )
                path = sdist_path(name, version)
                if path is None:
                    sys.exit(f"corpus: pip download {name}=={version} left no sdist in {SDISTS}")
            archives[f"{name}=={version}"] = path
    return archives


# --- turning files into documents ------------------------------------------------------------------


def package_files(package: str) -> list[str]:
    return sorted(run(["dpkg", "-L", package]).stdout.splitlines())


def is_so_stub(raw_man: bytes) -> bool:
    """A page whose only content is ``.so other.1`` renders as an exact copy of another page."""
    lines = [line for line in raw_man.splitlines() if line.strip() and not line.startswith(b'.\\"')]
    return len(lines) <= 1 and bool(lines) and lines[0].startswith(b".so ")


def render_man(path: str) -> str:
    # man-db picks the preprocessors (tbl, eqn) each page asks for; no hyphenation or justification so
    # that words are not split or padded. LC_ALL pins the messages and the output charset.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "MANWIDTH": MANWIDTH}
    proc = subprocess.run(
        ["man", "--no-hyphenation", "--no-justification", "-E", "UTF-8", "-l", path],
        capture_output=True,
        env=env,
    )
    text = proc.stdout.decode("utf-8", errors="replace")
    return "\n".join(line.rstrip() for line in text.splitlines()).strip() + "\n"


def man_documents(versions: dict[str, str]) -> list[Document]:
    jobs: list[tuple[str, str, bytes]] = []
    for package in MAN_PACKAGES:
        for path in package_files(package):
            if not path.startswith("/usr/share/man/") or not path.endswith(".gz"):
                continue
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            raw = Path(path).read_bytes()
            if is_so_stub(gzip.decompress(raw)):
                continue
            jobs.append((package, path, raw))
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        texts = list(pool.map(lambda job: render_man(job[1]), jobs))
    documents = []
    for (package, path, raw), text in zip(jobs, texts, strict=True):
        relative = path[len("/usr/share/man/") :]
        documents.append(
            Document(
                id=f"man/{package}/{relative}",
                text=text,
                source=f"man:{package}",
                path=path,
                package=package,
                version=versions[package],
                file_size=len(raw),
                file_sha256=sha256_bytes(raw),
            )
        )
    return documents


def pydoc_documents(versions: dict[str, str]) -> list[Document]:
    documents = []
    for path in package_files(PYDOC_PACKAGE):
        if "/_sources/" not in path or not path.endswith(".rst.txt") or os.path.islink(path):
            continue
        raw = Path(path).read_bytes()
        relative = path.split("/_sources/", 1)[1]
        documents.append(
            Document(
                id=f"pydoc/{relative}",
                text=raw.decode("utf-8", errors="replace"),
                source="pydoc",
                path=path,
                package=PYDOC_PACKAGE,
                version=versions[PYDOC_PACKAGE],
                file_size=len(raw),
                file_sha256=sha256_bytes(raw),
            )
        )
    return documents


def copyright_documents() -> tuple[list[Document], dict[str, str]]:
    """The copyright file of every installed Debian package: many quote the same licences in full,
    some with small edits, which gives near-duplicates written by different people."""
    installed = installed_packages()
    documents = []
    used: dict[str, str] = {}
    for package in sorted(installed):
        folder = Path("/usr/share/doc") / package
        path = folder / "copyright"
        # A symlinked doc folder or file is another package's copyright: skip the exact copy.
        if folder.is_symlink() or path.is_symlink() or not path.is_file():
            continue
        raw = path.read_bytes()
        used[package] = installed[package]
        documents.append(
            Document(
                id=f"copyright/{package}",
                text=raw.decode("utf-8", errors="replace"),
                source="copyright",
                path=str(path),
                package=package,
                version=installed[package],
                file_size=len(raw),
                file_sha256=sha256_bytes(raw),
            )
        )
    return documents, used


#: Files under /usr/share/doc that become ``debdoc`` documents: text by suffix (``.gz`` too) or by the
#: conventional names of Debian changelogs and read-me files. Upstream changelogs (changelog.gz, NEWS)
#: are left out: ~60 MB in a few hundred long files would outweigh everything else here.
DEBDOC_SUFFIXES = (".txt", ".md", ".rst")
DEBDOC_NAMES = {
    "AUTHORS",
    "FAQ",
    "NEWS.Debian",
    "README",
    "README.Debian",
    "THANKS",
    "TODO",
    "changelog.Debian",
}


def installed_packages() -> dict[str, str]:
    listing = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"]).stdout
    installed = {}
    for line in listing.splitlines():
        package, version, status = line.split("\t")
        if status.startswith("ii"):
            installed[package] = version
    return installed


def debdoc_documents() -> tuple[list[Document], dict[str, str]]:
    """Package documentation under /usr/share/doc (read-me files, changelogs, text and Markdown docs)
    of every installed Debian package: packages built from one source share changelogs that differ by
    a release or two. Python's HTML sources (``pydoc``) and copyright files (``copyright``) are left to
    their own sources; a path listed by two packages goes to the first in sorted order."""
    installed = installed_packages()
    lists: dict[str, list[Path]] = {}
    for list_file in sorted(Path("/var/lib/dpkg/info").glob("*.list")):
        package = list_file.name[: -len(".list")].split(":", 1)[0]
        if package in installed:
            lists.setdefault(package, []).append(list_file)
    documents = []
    used: dict[str, str] = {}
    seen: set[str] = set()
    for package in sorted(lists):
        paths: set[str] = set()
        for list_file in lists[package]:
            paths.update(list_file.read_text(encoding="utf-8", errors="replace").splitlines())
        for path in sorted(paths):
            if not path.startswith("/usr/share/doc/") or path.startswith("/usr/share/doc/python3.11/html/"):
                continue
            name = path.rsplit("/", 1)[1]
            plain = name[: -len(".gz")] if name.endswith(".gz") else name
            if not (plain.endswith(DEBDOC_SUFFIXES) or plain in DEBDOC_NAMES):
                continue
            if path in seen or os.path.islink(path) or not os.path.isfile(path):
                continue
            seen.add(path)
            raw = Path(path).read_bytes()
            try:
                data = gzip.decompress(raw) if name.endswith(".gz") else raw
            except (OSError, EOFError):
                continue
            used[package] = installed[package]
            documents.append(
                Document(
                    id=f"debdoc/{path[len('/usr/share/doc/') :]}",
                    text=data.decode("utf-8", errors="replace"),
                    source="debdoc",
                    path=path,
                    package=package,
                    version=installed[package],
                    file_size=len(raw),
                    file_sha256=sha256_bytes(raw),
                )
            )
    return documents, used


def sdist_documents(archives: dict[str, Path]) -> Iterator[Document]:
    for key in sorted(archives):
        name, version = key.split("==")
        suffixes = PYPI_SUFFIXES.get(name, DEFAULT_SUFFIXES)
        with tarfile.open(archives[key]) as archive:
            members = sorted((m for m in archive.getmembers() if m.isfile()), key=lambda m: m.name)
            for member in members:
                if not member.name.endswith(suffixes):
                    continue
                handle = archive.extractfile(member)
                if handle is None:
                    continue
                raw = handle.read()
                # Strip the "Django-4.2.16/" top folder so the same file in two versions has the same
                # id suffix: that is how near-duplicate pairs are found later.
                relative = member.name.split("/", 1)[1] if "/" in member.name else member.name
                yield Document(
                    id=f"pypi/{name}/{version}/{relative}",
                    text=raw.decode("utf-8", errors="replace"),
                    source=f"pypi:{name}",
                    path=f"{archives[key].name}:{member.name}",
                    package=name,
                    version=version,
                    file_size=len(raw),
                    file_sha256=sha256_bytes(raw),
                )


# --- the one command -------------------------------------------------------------------------------


def tool_version(cmd: list[str]) -> str:
    try:
        return run(cmd).stdout.splitlines()[0].strip()
    except (OSError, subprocess.CalledProcessError, IndexError):
        return ""


def build(output: Path, manifest_path: Path) -> None:
    started = time.perf_counter()
    versions = ensure_debian(DEBIAN_PACKAGES)
    archives = ensure_pypi(PYPI_RELEASES)
    print("corpus: rendering man pages", file=sys.stderr)
    documents: list[Document] = man_documents(versions)
    documents += pydoc_documents(versions)
    copyrights, copyright_packages = copyright_documents()
    documents += copyrights
    debdocs, debdoc_packages = debdoc_documents()
    documents += debdocs
    documents += sdist_documents(archives)
    documents.sort(key=lambda d: d.id)

    kept: list[dict[str, object]] = []
    skipped: list[dict[str, object]] = []
    total_bytes = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".jsonl.tmp")
    seen_ids: set[str] = set()
    with tmp.open("w", encoding="utf-8") as out:
        for doc in documents:
            if doc.id in seen_ids:
                raise RuntimeError(f"duplicate document id {doc.id}")
            seen_ids.add(doc.id)
            encoded = doc.text.encode("utf-8", errors="surrogatepass")
            entry: dict[str, object] = {
                "id": doc.id,
                "source": doc.source,
                "path": doc.path,
                "package": doc.package,
                "version": doc.version,
                "file_size": doc.file_size,
                "file_sha256": doc.file_sha256,
                "text_bytes": len(encoded),
            }
            if not MIN_BYTES <= len(encoded) <= MAX_BYTES:
                skipped.append(entry)
                continue
            entry["text_sha256"] = sha256_bytes(encoded)
            kept.append(entry)
            total_bytes += len(encoded)
            out.write(json.dumps({"id": doc.id, "text": doc.text, "source": doc.source}, ensure_ascii=False))
            out.write("\n")
    tmp.replace(output)

    by_source: dict[str, dict[str, int]] = {}
    for entry in kept:
        stats = by_source.setdefault(str(entry["source"]), {"documents": 0, "bytes": 0})
        stats["documents"] += 1
        stats["bytes"] += int(str(entry["text_bytes"]))
    corpus_sha = sha256_bytes(output.read_bytes())
    manifest = {
        "corpus": output.name,
        "corpus_sha256": corpus_sha,
        "documents": len(kept),
        "bytes": total_bytes,
        "mean_document_bytes": round(total_bytes / max(len(kept), 1)),
        "limits": {"min_bytes": MIN_BYTES, "max_bytes": MAX_BYTES, "manwidth": int(MANWIDTH)},
        "by_source": dict(sorted(by_source.items())),
        "machine": {
            "debian": Path("/etc/debian_version").read_text().strip()
            if Path("/etc/debian_version").exists()
            else "",
            "python": platform.python_version(),
            "man": tool_version(["man", "--version"]),
            "groff": tool_version(["groff", "--version"]),
        },
        "debian_packages": versions,
        "copyright_packages": copyright_packages,
        "debdoc_packages": debdoc_packages,
        "pypi": {
            key: {
                "archive": path.name,
                "size": path.stat().st_size,
                "sha256": sha256_bytes(path.read_bytes()),
                "suffixes": list(PYPI_SUFFIXES.get(key.split("==")[0], DEFAULT_SUFFIXES)),
            }
            for key, path in sorted(archives.items())
        },
        "files": kept,
        "skipped": skipped,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {
                "corpus": str(output),
                "documents": len(kept),
                "mb": round(total_bytes / 1e6, 1),
                "mean_document_bytes": manifest["mean_document_bytes"],
                "skipped": len(skipped),
                "by_source": manifest["by_source"],
                "sha256": corpus_sha,
                "seconds": round(time.perf_counter() - started, 1),
            },
            indent=1,
        )
    )


def load(path: Path = DATA / "corpus.jsonl") -> list[dict[str, str]]:
    """The corpus as a list of ``{"id", "text", "source"}``, in file (id) order."""
    if not path.exists():
        sys.exit(f"{path} does not exist: build it with `python bench/corpus.py`")
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DATA / "corpus.jsonl")
    parser.add_argument("--manifest", type=Path, default=DATA / "manifest.json")
    args = parser.parse_args()
    build(args.output, args.manifest)


if __name__ == "__main__":
    main()
