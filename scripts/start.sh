#!/usr/bin/env bash
# Installs what is missing, checks the environment, then opens the course in JupyterLab.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# What setup could not install (bubblewrap without root, a broken extension, ...): each
# missing thing on one line with its fix (`course doctor` shows every line).
if ! .venv/bin/course doctor --quiet; then
    echo "[start] something the course needs is missing (above, each with its fix); starting anyway" >&2
fi
exec .venv/bin/course start "$@"
