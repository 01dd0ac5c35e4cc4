#!/usr/bin/env bash
# Installs what is missing (test tools included), lints (ruff, configured in pyproject.toml),
# checks the layout (ruff format), then runs the whole test suite. A lint finding fails the run
# before any test starts.
#
# The suite runs as COURSE_TEST_PARTS pytest processes at once (3 unless set), `--part K/N`
# (tests/conftest.py): each test file whole in one of them, the same files in the same order on
# every machine. Much of the suite waits on kernels, browsers and servers, so one process a core
# leaves the cores idle. Arguments go to every part (a file, -k, -m); the reports follow in order.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
parts=${COURSE_TEST_PARTS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pids=()
for ((k = 2; k <= parts; k++)); do
    .venv/bin/python -m pytest --part "$k/$parts" --basetemp "$work/part$k" "$@" >"$work/part$k.log" 2>&1 &
    pids[k]=$!
done
statuses=()
.venv/bin/python -m pytest --part "1/$parts" --basetemp "$work/part1" "$@" && statuses[1]=0 || statuses[1]=$?
for ((k = 2; k <= parts; k++)); do
    wait "${pids[k]}" && statuses[k]=0 || statuses[k]=$?
    echo "================================ part $k of $parts ================================"
    cat "$work/part$k.log"
done
# 5: no test in that part (a selection that falls in another part only) is not a failure
empty=0
for ((k = 1; k <= parts; k++)); do
    s=${statuses[k]}
    if [ "$s" -ne 0 ] && [ "$s" -ne 5 ]; then exit "$s"; fi
    if [ "$s" -eq 5 ]; then empty=$((empty + 1)); fi
done
if [ "$empty" -eq "$parts" ]; then exit 5; fi
exit 0
