#!/usr/bin/env bash
# README command one: installs the testbed if needed, builds graft, and runs the demo on
# a private containerd 2.2 (a pod's container gets its recorded device; the injected spec
# is shown). Pass --keep to leave the testbed running.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash integration/testbed/setup.sh >/dev/null
cargo build --workspace --bins --quiet
exec ./target/debug/graft-demo "$@"
