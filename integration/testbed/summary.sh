#!/usr/bin/env bash
# The end of test-all.sh's log: the slowest integration tests, the pass and fail counts, and
# the retry report (each line a test that failed once: "NAME: failed, then passed when run
# again alone" or "NAME: failed twice"). Kept apart so that a test runs it
# (integration/tests/workspace_scripts.rs): its only job is to report, so it exits 0.
#
#   summary.sh LOG RETRIED
set -euo pipefail
log=$1
retried=$2
echo "test-all: the slowest integration tests:"
# awk, not head, takes the first 15: it reads sort's output to the end. head would exit
# after 15 lines, and sort, with more than a pipe's worth still to write (about 800 tests
# make 70 kB), would die of SIGPIPE and fail the pipeline under pipefail.
sed -n 's/^test \(.*\) \.\.\. [a-zA-Z]* <\([0-9.]*\)s>$/\2 \1/p' "$log" | sort -rn |
  awk 'NR <= 15 {printf "  %8.1f s  %s\n", $1, $2}'
# Counted by awk, which exits 0 on no match (grep -c would exit 1, and set -e end the run).
passed=$(awk '/^test result: / {for (i = 1; i < NF; i++) if ($(i + 1) ~ /^passed/) s += $i} END {print s + 0}' "$log")
failed=$(awk '/^test result: / {for (i = 1; i < NF; i++) if ($(i + 1) ~ /^failed/) s += $i} END {print s + 0}' "$log")
flaky=$(awk '/passed when run again/ {n++} END {print n + 0}' "$retried")
echo "graft: $passed passed, $failed failed ($flaky of those passed when run again alone)"
if [ -s "$retried" ]; then
  echo "test-all: the retry report (each a flaky test to fix):"
  sed 's/^/  /' "$retried"
else
  echo "test-all: the retry report: no test failed"
fi
