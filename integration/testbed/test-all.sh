#!/usr/bin/env bash
# README command two (what CI runs): installs the testbed if needed, checks formatting and
# lints, builds every binary the tests start, and runs the whole test suite, including
# the integration tests against real containerd 2.2.x and 1.7.24.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash integration/testbed/setup.sh >/dev/null
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo build --workspace --bins --quiet
cargo test --workspace --no-fail-fast
