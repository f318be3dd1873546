#!/usr/bin/env bash
# Builds the .fuse front-end fuzzer with clang-14 (libFuzzer + ASan + UBSan)
# and runs it for SECONDS (default 600), seeded with every shipped and test
# pack. New crashers land in fuzz/crashers/; add them to tests/fuzz-regressions/.
#   scripts/fuzz.sh [SECONDS] [JOBS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-600}
jobs=${2:-1}
build=$root/build-fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFUSEC_FUZZ=ON >/dev/null
fi
cmake --build "$build" --target fuse_fuzzer
corpus=$build/corpus
mkdir -p "$corpus" "$root/fuzz/crashers"
find "$root/rules" "$root/examples/packs" "$root/tests/golden" "$root/tests/fuzz-regressions" -name '*.fuse' \
  -exec cp {} "$corpus/" \; 2>/dev/null || true
cd "$root/fuzz/crashers"
"$build/fuzz/fuse_fuzzer" "$corpus" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -jobs="$jobs" -workers="$jobs" 2>&1 | tail -n 30
