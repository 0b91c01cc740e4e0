#!/usr/bin/env bash
# README command two (what CI runs): installs the testbed if needed, checks formatting and
# lints, builds every binary the tests start, and runs the whole test suite, including
# the integration tests against real containerd 2.4.x, 2.2.x and 1.7.24.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash integration/testbed/setup.sh >/dev/null
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo build --workspace --bins --quiet
# graft-hook as shipped: statically linked (the tests install and run this one).
bash hooks/build-static.sh --quiet >/dev/null
# Doc-tests only where there are some (the NRI SDK's usage example): the other crates' empty
# runs would only lengthen the log.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --no-fail-fast --lib --bins --tests 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
cargo test -p graft-nri-sdk --doc 2>&1 | tee -a "$log"
doc_rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] || rc=$doc_rc
set -e
passed=$(grep -Eo '^test result: .* ([0-9]+) passed' "$log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -Eo '^test result: .*; ([0-9]+) failed' "$log" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
echo "graft: $passed passed, $failed failed"
exit "$rc"
