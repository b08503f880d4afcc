#!/usr/bin/env bash
# The README's test command: installs what the tests need when it is missing, then runs every
# test (`cargo test --workspace`, with any arguments given here passed on).
#
# What it installs, and from where:
# - the wasm32-wasip1 target (rustup): the guests the tests run are built for it;
# - PostgreSQL's server binaries (Debian's `postgresql`): the tests start servers of their own;
# - promtool (Debian's `prometheus`): the metrics tests check the exposition with it;
# - Chromium and ChromeDriver (Debian's `chromium`, `chromium-driver`): the web UI's test;
# - Node.js (Debian's `nodejs`): the JavaScript client's tests;
# - Python packages (PyPI, into target/test-tools/venv): openapi-spec-validator, which checks
#   the API's OpenAPI document; pytest and httpx, for the Python client's own tests.
#
# Then, when no arguments narrow the run, the client packages' own tests, by their own runners
# against a real `wfhost serve --http`: `pytest` for guest-sdk/python (installed into the venv as
# a user installs it, `pip install ./guest-sdk/python`), `node --test` for guest-sdk/js.
set -euo pipefail
cd "$(dirname "$0")"

say() { echo "test.sh: $*" >&2; }

if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx wasm32-wasip1; then
    say "installing the wasm32-wasip1 target"
    rustup target add wasm32-wasip1
fi

# Debian packages, installed with apt-get (as root, or with sudo) when a command is missing.
missing=()
if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1; then
    missing+=(postgresql)
fi
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing Debian's ${missing[*]}"
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages, in a virtual environment of the tests' own.
target="${CARGO_TARGET_DIR:-target}"
venv="$target/test-tools/venv"
if [ ! -x "$venv/bin/openapi-spec-validator" ]; then
    say "installing openapi-spec-validator (PyPI) into $venv"
    if ! python3 -m venv "$venv"; then
        # Debian's own python3 keeps venv in a package of its own.
        sudo=""
        if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv
        python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install -q --disable-pip-version-check 'openapi-spec-validator>=0.7,<0.8'
fi
WFHOST_TEST_TOOLS="$(cd "$target/test-tools" && pwd)"
export WFHOST_TEST_TOOLS

cargo test --workspace "$@"
if [ "$#" -gt 0 ]; then
    exit 0
fi

# The packages' tests start the CLI the workspace's tests built.
cargo build -q -p wfhost-cli
WFHOST_BIN="$(cd "$target/debug" && pwd)/wfhost"
export WFHOST_BIN
say "the Python client's tests (pytest)"
"$venv/bin/pip" install -q --disable-pip-version-check './guest-sdk/python[test]'
python="$(cd "$venv/bin" && pwd)/python"
(cd guest-sdk/python && "$python" -m pytest -q -p no:cacheprovider)
say "the JavaScript client's tests (node --test)"
(cd guest-sdk/js && node --test test/*.test.js)
