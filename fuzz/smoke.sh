#!/usr/bin/env bash
# Fuzz smoke test: runs every target in fuzz/fuzz_targets (sni, proxy,
# altsvc, connect, connect_response, endpointslice, authority, kube_patch,
# token_file, gateway_api, tunnel: a new file there is
# picked up) for FUZZ_SECONDS each (default 20), seeded from
# crates/wire/testdata/<target>/ when that folder exists, and fails if any
# target crashes, hangs or runs out of memory.
#
#   fuzz/smoke.sh                # every target
#   FUZZ_SECONDS=120 fuzz/smoke.sh sni
#
# Works on a stable toolchain: `-s none` builds without a sanitizer, which
# would need nightly, and the wire crate forbids unsafe code anyway.
set -euo pipefail

fuzz_dir=$(cd "$(dirname "$0")" && pwd)
testdata="$fuzz_dir/../crates/wire/testdata"
seconds=${FUZZ_SECONDS:-20}
cargo_fuzz_version=${CARGO_FUZZ_VERSION:-0.13.2}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "smoke: installing cargo-fuzz $cargo_fuzz_version" >&2
    cargo install --locked "cargo-fuzz@$cargo_fuzz_version"
fi

cd "$fuzz_dir"
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for file in fuzz_targets/*.rs; do
        targets+=("$(basename "$file" .rs)")
    done
fi

failed=()
for target in "${targets[@]}"; do
    corpus="corpus/$target"
    mkdir -p "$corpus"
    if [ -d "$testdata/$target" ]; then
        find "$testdata/$target" -maxdepth 1 -type f ! -name '*.md' -exec cp {} "$corpus/" \;
    fi
    if ! cargo fuzz build -s none "$target"; then
        failed+=("$target (does not build)")
        continue
    fi
    echo "smoke: fuzzing $target for ${seconds}s from $(find "$corpus" -type f | wc -l) corpus files" >&2
    # -timeout: one input taking 10 s is a hang. Crashing inputs are written
    # to artifacts/<target>/.
    if ! cargo fuzz run -s none "$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1; then
        failed+=("$target (crashed: see artifacts/$target/)")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    printf 'smoke: FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "smoke: all ${#targets[@]} targets ran ${seconds}s without a crash" >&2
