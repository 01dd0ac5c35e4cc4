#!/usr/bin/env bash
# Installs what is missing, checks the environment, then opens the course in JupyterLab.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# What setup could not install (bubblewrap without root, a broken extension, ...): each
# missing thing on one line with its fix (`course doctor` shows every line). A FAIL that keeps
# the course from working (a package, torch, jupyter, the widget extension) stops here; one
# that does not (bubblewrap, nbgrader's extensions) is shown and the course starts.
if ! .venv/bin/course doctor --quiet --start; then
    echo "[start] the course cannot work like this: run each fix above, then scripts/start.sh again" >&2
    exit 1
fi
exec .venv/bin/course start "$@"
