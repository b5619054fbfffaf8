"""Images and manifests, checked without a Docker engine or a Kubernetes cluster: the Kubernetes
manifests against the API's JSON schemas (kubernetes-validate, strict, offline), docker/compose.yaml
against the Compose specification (the schema vendored in check-jsonschema), and the Dockerfile's
build steps against the README's and CI's install commands. Plus what no schema knows: every
``NEARDUP_*`` variable the files set is a real setting, and the probes name real routes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]
from check_jsonschema.builtin_schemas import get_builtin_schema  # type: ignore[import-untyped]
from jsonschema import Draft7Validator  # type: ignore[import-untyped]

from neardup.main import create_app
from neardup.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKER = ROOT / "docker"
KUBERNETES_VERSION = "1.30.0"
#: The README's quick start install (the first command) and the CI script's (with the test extra).
README_INSTALL = 'python3 -m venv .venv && .venv/bin/pip install ".[server]"'
CI_INSTALL = 'python3 -m venv .venv && .venv/bin/pip install ".[test]"'


def manifests() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") != "Kustomization":
                found.append((path.name, document))
    return found


def settings_fields() -> set[str]:
    return {f"NEARDUP_{name.upper()}" for name in Settings.model_fields}


@pytest.mark.parametrize(("name", "manifest"), manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_kubernetes_manifests_match_the_api_schemas(name: str, manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_manifests_hold_what_the_issue_asks_for() -> None:
    kinds = {manifest["kind"]: manifest for _, manifest in manifests()}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap", "Secret"} <= set(kinds)
    deployment = kinds["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (
        kinds["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    )
    sources = {ref[key]["name"] for ref in container["envFrom"] for key in ref}
    assert sources == {kinds["ConfigMap"]["metadata"]["name"], kinds["Secret"]["metadata"]["name"]}
    assert "NEARDUP_API_KEYS" in kinds["Secret"]["stringData"]
    selector = kinds["Service"]["spec"]["selector"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    files = {path.name for path in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_setting_the_files_set_exists_and_has_a_valid_value(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in settings_fields():
        monkeypatch.delenv(name, raising=False)
    kinds = {manifest["kind"]: manifest for _, manifest in manifests()}
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    files = {
        "configmap + secret": {**kinds["ConfigMap"]["data"], **kinds["Secret"]["stringData"]},
        "compose": {k: str(v) for k, v in compose["services"]["neardup"]["environment"].items()},
        "Dockerfile": dict(re.findall(r"(NEARDUP_[A-Z_]+)=(\S+)", (DOCKER / "Dockerfile").read_text())),
    }
    counter = iter(range(100))
    for where, values in files.items():
        assert set(values) <= settings_fields(), (where, set(values) - settings_fields())
        # Placeholders (secret.yaml's REPLACE-WITH-..., compose's ${...}) get distinct stand-ins.
        concrete = {
            k[len("NEARDUP_") :].lower(): re.sub(
                r"REPLACE-WITH-[A-Z-]+", lambda _: f"stand-in-key-{next(counter):04d}-abcdef", v
            )
            for k, v in values.items()
            if "${" not in v
        }
        Settings.model_validate(concrete)


def test_probed_and_scraped_paths_are_routes_of_the_app() -> None:
    paths = set(create_app(Settings(redis_url="redis://127.0.0.1:1/0")).openapi()["paths"])
    assert {"/healthz", "/readyz", "/metrics"} <= paths
    assert "/healthz" in (DOCKER / "Dockerfile").read_text()


def test_compose_file_matches_the_compose_specification() -> None:
    schema = get_builtin_schema("vendor.compose-spec")
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    errors = sorted(Draft7Validator(schema).iter_errors(compose), key=str)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    valkey = " ".join(compose["services"]["valkey"]["command"])
    assert "--appendonly yes" in valkey and "--appendfsync always" in valkey
    # The server loads neardup's module from the Dockerfile's valkey stage, where it is copied to.
    assert compose["services"]["valkey"]["build"]["target"] == "valkey"
    module = valkey.split("--loadmodule ")[1].split()[0]
    valkey_stage = (DOCKER / "Dockerfile").read_text().split("AS valkey", 1)[1].split("\nFROM ", 1)[0]
    assert module in valkey_stage and "neardup/storage/neardup_valkey.so" in valkey_stage
    assert compose["services"]["neardup"]["environment"]["NEARDUP_REDIS_URL"].startswith("redis://valkey:")
    assert compose["services"]["neardup"]["build"]["dockerfile"] == "docker/Dockerfile"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (DOCKER / "Dockerfile").read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_dockerfile_builds_with_the_readme_and_ci_install_command() -> None:
    instructions = dockerfile_instructions()
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    installs = [run for run in runs if "pip install" in run]
    assert installs and all(run.startswith(README_INSTALL) for run in installs), installs
    readme = (ROOT / "README.md").read_text()
    assert README_INSTALL in readme
    ci = (ROOT / ".ci" / "run").read_text() + (ROOT / "scripts" / "test.sh").read_text()
    assert CI_INSTALL in ci
    # The same command but for the test extra: one way to build, everywhere.
    assert CI_INSTALL.replace("test", "server") == README_INSTALL


def test_dockerfile_is_multi_stage_non_root_with_a_healthcheck_and_a_volume() -> None:
    instructions = dockerfile_instructions()
    stages = [args for keyword, args in instructions if keyword == "FROM"]
    assert len(stages) >= 2 and any("AS build" in stage for stage in stages)
    copies = [args for keyword, args in instructions if keyword == "COPY"]
    assert any(copy.startswith("--from=build") for copy in copies)
    [user] = [args for keyword, args in instructions if keyword == "USER"]
    assert user.split(":")[0] not in ("0", "root")
    [healthcheck] = [args for keyword, args in instructions if keyword == "HEALTHCHECK"]
    assert "/healthz" in healthcheck
    env = " ".join(args for keyword, args in instructions if keyword == "ENV")
    assert "NEARDUP_HOST=0.0.0.0" in env
    assert any(keyword == "VOLUME" for keyword, _ in instructions)
    # What the build stage copies exists, and the context file lets exactly that through.
    for copy in copies:
        if not copy.startswith("--from"):
            for source in shlex.split(copy)[:-1]:
                assert (ROOT / source).exists(), source
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert "*" in ignore and "app/_native*.so" in ignore  # a locally built module must not leak in
