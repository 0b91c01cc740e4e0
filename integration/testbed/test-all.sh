#!/usr/bin/env bash
# README command two (what CI runs): installs the testbed if needed, checks formatting,
# builds every binary the tests start, lints, and runs the whole test suite, including
# the integration tests against real containerd 2.4.x, 2.2.x and 1.7.24. Each phase prints
# its wall time, and the integration suite each test's, with the slowest listed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
phase_start=$SECONDS
phase() {
  echo "test-all: $1 in $((SECONDS - phase_start)) s" >&2
  phase_start=$SECONDS
}
bash integration/testbed/setup.sh >/dev/null
phase "testbed setup"
cargo fmt --all -- --check
phase "fmt"
# First what the cluster tier needs, which is the longest: the binaries the tests start and
# the suite's binary. Clippy and the crates' tests build beside it.
cargo build --workspace --bins --quiet
# graft-hook as shipped: statically linked (the tests install and run this one).
bash hooks/build-static.sh --quiet >/dev/null
log=$(mktemp)
cluster_log=$(mktemp)
warm_log=$(mktemp)
node_log=$(mktemp)
retry_log=$(mktemp)
retried_list=$(mktemp)
trap 'rm -f "$log" "$cluster_log" "$warm_log" "$node_log" "$retry_log" "$retried_list"' EXIT
# The integration suite's binary is run directly, as cargo would (from its package's
# folder), so that RUSTC_BOOTSTRAP reaches libtest alone: --report-time is unstable, and
# cargo would rebuild everything under it.
suite=$(cargo test -p graft-integration --test suite --no-run --message-format=json 2>/dev/null |
  grep '"kind":\["test"\]' | grep '"name":"suite"' | grep -o '"executable":"[^"]*"' | tail -1 |
  sed 's/^"executable":"\(.*\)"$/\1/')
[ -x "$suite" ] || { echo "test-all: the integration suite's binary was not found" >&2; exit 1; }
phase "build: the binaries and the integration suite"
# suite_nice: the niceness to run it at (the node tier yields to the cluster tier).
run_suite() {
  (cd integration && RUSTC_BOOTSTRAP=1 nice -n "${suite_nice:-0}" "$suite" -Z unstable-options --report-time "$@")
}
# retry_failed RC LOG [ARGS]: a suite tier that ended RC, having printed LOG, passes when it
# passed, or when every test it failed passes when run again alone (ARGS added). Each retry
# is reported, passed or not, so that a flaky test is seen and fixed, not waved through; a
# tier that failed without naming a test (it crashed, or timed out) fails.
retried=()
retry_failed() {
  local tier_rc=$1 tier_log=$2 name failed ok=0
  shift 2
  [ "$tier_rc" -eq 0 ] && return 0
  failed=$(sed -n 's/^test \(.*\) \.\.\. FAILED.*$/\1/p' "$tier_log")
  [ -n "$failed" ] || { echo "test-all: a tier failed ($tier_rc) without naming a test"; return 1; }
  for name in $failed; do
    echo "test-all: retrying $name, which failed"
    if run_suite --exact "$name" "$@" >"$retry_log" 2>&1; then
      retried+=("$name: failed, then passed when run again alone")
    else
      retried+=("$name: failed twice")
      tail -60 "$retry_log"
      ok=1
    fi
  done
  return "$ok"
}
# Two tiers of the suite run side by side: the cluster tier (the suites on the host's one
# testbed cluster, which take turns on it, so one at a time: its times are then each
# test's own) mostly waits on the cluster, while the node tier (containerd, runc, API
# servers of its own on free ports) and the crates' tests use the CPUs.
cluster=(cluster_e2e:: cluster_gpu:: cluster_guards:: cluster_install:: cluster_multi:: cluster_placement::
  cluster_tokens:: compute_domain_cluster::)
skips=()
for m in "${cluster[@]}"; do skips+=(--skip "$m"); done
set +e
# install_as_documented goes last: by then the warm step below has built the release it
# installs, which it would otherwise wait for while holding the cluster.
install=cluster_install::install_as_documented
{
  run_suite --test-threads 1 "${cluster[@]}" --skip "$install"
  first=$?
  run_suite --test-threads 1 --exact "$install"
  last=$?
  [ "$first" -eq 0 ] && exit "$last"
  exit "$first"
} >"$cluster_log" 2>&1 &
cluster_pid=$!
cluster_start=$SECONDS
# install_as_documented's release build, started now beside everything at the lowest
# priority, so that the test finds it built (cluster_install/clone.rs). Its failure fails
# nothing by itself: the test then builds, and fails, on its own.
(cd integration && nice -n 19 "$suite" --ignored --exact cluster_install::warm_the_release_build) >"$warm_log" 2>&1 &
warm_pid=$!
rc=0
# The cluster tier is the run's longest path: what runs beside it yields the CPUs to it
# (its API server, kubelet and containerd) and takes what they leave, most of it.
nice -n 10 cargo clippy --workspace --all-targets --quiet -- -D warnings || rc=1
# The suite is `test = false` (built by `--test suite` only), so --all-targets skips it.
nice -n 10 cargo clippy -p graft-integration --test suite --quiet -- -D warnings || rc=1
phase "clippy (beside the cluster tier)"
nice -n 10 cargo test --workspace --no-run --quiet --lib --bins --tests --examples 2>/dev/null ||
  nice -n 10 cargo test --workspace --no-run --lib --bins --tests --examples || rc=1
phase "build: the crates' tests"
# The fast tier (no root, no testbed), linted above.
nice -n 10 bash integration/testbed/fast-tier.sh --no-lint 2>&1 | tee "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
phase "fast tier: unit, property, contract and crate tests"
suite_nice=10 run_suite "${skips[@]}" 2>&1 | tee "$node_log"
node_rc=${PIPESTATUS[0]}
cat "$node_log" >>"$log"
retry_failed "$node_rc" "$node_log" || rc=1
phase "integration suite, node tier"
echo "test-all: the cluster tier (started after the build, beside clippy and the rest):"
wait "$cluster_pid"
cluster_rc=$?
tee -a "$log" <"$cluster_log"
retry_failed "$cluster_rc" "$cluster_log" --test-threads 1 || rc=1
phase "integration suite, cluster tier (after the node tier)"
echo "test-all: the cluster tier took $((SECONDS - cluster_start)) s from its start" >&2
if ! wait "$warm_pid"; then
  echo "test-all: the warmed release build failed (install_as_documented built on its own):"
  tail -40 "$warm_log"
fi
set -e
# The tests' outcome is rc alone: the summary only reports it.
printf '%s\n' "${retried[@]}" | sed '/^$/d' >"$retried_list"
bash integration/testbed/summary.sh "$log" "$retried_list" || echo "test-all: summary.sh failed" >&2
exit "$rc"
