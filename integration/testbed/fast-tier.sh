#!/usr/bin/env bash
# The fast tier: every test that needs no root, no testbed and nothing installed but a Rust
# toolchain with clippy and rustfmt: the crates' unit, property and contract tests (the
# chart against graft-api included, read as files), the fake-runtime NRI tests, the
# workspace's rules (integration/tests/workspace_*.rs) and the NRI SDK's example, compiled.
# test-all.sh runs it as its crate-test step (--no-lint: it lints first itself).
#
#   fast-tier.sh [--no-lint]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
start=$SECONDS
if [ "${1:-}" != --no-lint ]; then
  cargo fmt --all -- --check
  cargo clippy --workspace --all-targets --quiet -- -D warnings
  echo "fast-tier: fmt and clippy in $((SECONDS - start)) s" >&2
fi
rc=0
# One cargo invocation over the whole workspace, as test-all.sh builds it: a narrower one
# (-p, --exclude) unifies other features, and --doc builds every dependency again, so
# either compiled kube and graft's crates a second time (about 2 min of CI beside the
# cluster tier). The integration suite (the node and cluster tiers) is `test = false`, so
# `--tests` leaves it out and runs the harness's own tests and the workspace's rules
# (integration/tests/workspace_*.rs); `--examples` compiles the NRI SDK's usage example,
# which its crate docs point to.
cargo test --workspace --no-fail-fast --lib --bins --tests --examples || rc=1
echo "fast-tier: done ($rc) in $((SECONDS - start)) s" >&2
exit "$rc"
