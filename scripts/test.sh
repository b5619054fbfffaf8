#!/usr/bin/env bash
# Install everything, check lint and types, and run the whole test suite: what CI runs (.ci/run), the
# README's second command.
# Extra arguments go to pytest (scripts/test.sh -q tests/web).
#
# The browser test drives Debian's chromium through chromium-driver (never a downloaded browser), and the
# clock-skew test needs Debian's faketime. When one is missing: as root it is installed with apt-get, in
# parallel with the pip install; as another user the tests that need it are skipped and say why.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian tools the tests use: the browser test's chromium and chromium-driver, and faketime (the
# clock-skew test runs a service process under libfaketime).
debian_pid=""
debian_log="$(mktemp -t neardup-apt.XXXXXX)"
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing ${missing[*]} with apt-get (log: $debian_log)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}") >"$debian_log" 2>&1 &
    debian_pid=$!
  else
    echo "scripts/test.sh: ${missing[*]} missing and not root: the tests that need them will be skipped" >&2
  fi
fi

python3 -m venv .venv && .venv/bin/pip install ".[test]"

if [ -n "$debian_pid" ]; then
  if ! wait "$debian_pid"; then
    tail -n 20 "$debian_log" >&2
    echo "scripts/test.sh: apt-get could not install ${missing[*]} (see above)" >&2
    exit 1
  fi
fi
rm -f "$debian_log"

# Lint and types first (seconds): ruff over the whole tree, mypy --strict over the package. mypy checks
# the source folder under the name it is imported by (app/ is installed as neardup), through a link.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
mkdir -p build/typecheck && ln -sfn ../../app build/typecheck/neardup
MYPYPATH=build/typecheck .venv/bin/mypy -p neardup

# Two workers (NEARDUP_TEST_WORKERS; 0 runs in this process): most tests wait on servers, clusters and
# services rather than compute. A test file runs whole on one worker, so a module's fixture (one
# service, one wheel) is still started once; each worker has its own session servers and cluster.
exec .venv/bin/pytest -n "${NEARDUP_TEST_WORKERS:-2}" --dist loadfile "$@"
