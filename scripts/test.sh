#!/usr/bin/env bash
# Installs what is missing (test tools included), lints (ruff, configured in pyproject.toml),
# checks the layout (ruff format), then runs the whole test suite. A lint finding fails the run
# before any test starts.
#
# The suite runs as two pytest processes at once, `--part 1/2` and `--part 2/2` (tests/conftest.py):
# each test file whole in one of them, the same files in the same order on every machine. Much
# of the suite waits on kernels, browsers and servers, so one process leaves a core idle.
# Arguments go to both (a file, -k, -m); part 2's report follows part 1's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pytest --part 2/2 --basetemp "$work/part2" "$@" >"$work/part2.log" 2>&1 &
second=$!
status=0
.venv/bin/python -m pytest --part 1/2 --basetemp "$work/part1" "$@" || status=$?
wait "$second" || second_status=$?
echo "================================ part 2 of 2 ================================"
cat "$work/part2.log"
second_status=${second_status:-0}
# 5: no test in that part (a selection that falls in the other part only) is not a failure
for s in "$status" "$second_status"; do
    if [ "$s" -ne 0 ] && [ "$s" -ne 5 ]; then exit "$s"; fi
done
if [ "$status" -eq 5 ] && [ "$second_status" -eq 5 ]; then exit 5; fi
exit 0
