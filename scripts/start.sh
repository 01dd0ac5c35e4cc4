#!/usr/bin/env bash
# Installs what is missing, then opens the course in JupyterLab.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/course start "$@"
