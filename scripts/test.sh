#!/usr/bin/env bash
# The one test command: installs what the tests need, then runs formatting,
# lints, the whole test suite (unit, real-peer integration, fuzz smoke).
# Usage: scripts/test.sh        (FUZZ_SECONDS=0 skips the fuzz smoke run)
set -euo pipefail
cd "$(dirname "$0")/.."

# Real peers the tests talk to, from Debian's packages.
need=()
command -v haproxy >/dev/null || need+=(haproxy)
command -v nginx >/dev/null || need+=(nginx)
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v curl >/dev/null || need+=(curl)
command -v openssl >/dev/null || need+=(openssl)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ip >/dev/null || need+=(iproute2)
command -v nft >/dev/null || need+=(nftables)
command -v dnsmasq >/dev/null || need+=(dnsmasq-base)
# A second gRPC implementation for the tunnel's interop test, for Debian's
# own interpreter (the tests run /usr/bin/python3).
/usr/bin/python3 -c "import grpc, grpc_tools" 2>/dev/null || need+=(python3-grpcio python3-grpc-tools)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "==> installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# One build from scratch: incremental caches would only take disk (CI's disk
# is small; the test build once ran out of it).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> module import cycles"
python3 scripts/module_cycles.py
echo "==> cargo clippy"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
echo "==> tests"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-features --locked --no-fail-fast
else
    cargo test --workspace --all-features --locked --no-fail-fast
fi
if [ "${FUZZ_SECONDS:-15}" != 0 ]; then
    echo "==> fuzz smoke (${FUZZ_SECONDS:-15}s per target)"
    FUZZ_SECONDS="${FUZZ_SECONDS:-15}" bash fuzz/smoke.sh
fi
echo "==> all checks passed"
