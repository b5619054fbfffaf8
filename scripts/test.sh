#!/usr/bin/env bash
# Install everything and run the whole test suite: what CI runs (.ci/run), the README's second command.
# Extra arguments go to pytest (scripts/test.sh -q tests/web).
#
# The browser test drives Debian's chromium through chromium-driver (never a downloaded browser). When
# either is missing: as root they are installed with apt-get, in parallel with the pip install; as
# another user the browser test is skipped and says why.
set -euo pipefail
cd "$(dirname "$0")/.."

browser_pid=""
browser_log="$(mktemp -t neardup-chromium.XXXXXX)"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing chromium and chromium-driver with apt-get (log: $browser_log)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      chromium chromium-driver) >"$browser_log" 2>&1 &
    browser_pid=$!
  else
    echo "scripts/test.sh: chromium or chromedriver missing and not root: the browser test will be skipped" >&2
  fi
fi

python3 -m venv .venv && .venv/bin/pip install ".[test]"

if [ -n "$browser_pid" ]; then
  if ! wait "$browser_pid"; then
    tail -n 20 "$browser_log" >&2
    echo "scripts/test.sh: apt-get could not install chromium and chromium-driver (see above)" >&2
    exit 1
  fi
fi
rm -f "$browser_log"
exec .venv/bin/pytest "$@"
