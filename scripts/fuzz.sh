#!/usr/bin/env bash
# Builds a fuzzer with clang-14 (libFuzzer + ASan + UBSan) and runs it for
# SECONDS (default 600), seeded from the project's own inputs. New crashers
# land in fuzz/crashers/; add them to tests/fuzz-regressions/ or tests/hostile/.
#   scripts/fuzz.sh [fuse|onnx|target] [SECONDS] [JOBS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
which=${1:-fuse}
seconds=${2:-600}
jobs=${3:-1}
build=$root/build-fuzz
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFUSEC_FUZZ=ON >/dev/null
fi
cmake --build "$build" --target "${which}_fuzzer"
corpus=$build/corpus-$which
mkdir -p "$corpus" "$root/fuzz/crashers"
case $which in
  fuse)
    find "$root/rules" "$root/examples/packs" "$root/tests/golden" "$root/tests/fuzz-regressions" -name '*.fuse' \
      -exec cp {} "$corpus/" \; 2>/dev/null || true
    max_len=4096 ;;
  onnx)
    # ONNX's backend test models (binary), one per case.
    for d in /usr/share/libonnx-testdata/data/node/*/; do
      [ -f "$d/model.onnx" ] && cp "$d/model.onnx" "$corpus/$(basename "$d").onnx"
    done
    max_len=65536 ;;
  target)
    cp "$root"/rules/targets/*.toml "$corpus/" 2>/dev/null || true
    cp "$root"/../shared/targets/*.toml "$corpus/" 2>/dev/null || true
    max_len=8192 ;;
  *) echo "unknown fuzzer \`$which\`: fuse, onnx or target" >&2; exit 2 ;;
esac
mkdir -p "$root/fuzz/crashers/$which"
cd "$root/fuzz/crashers/$which"
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
"$build/fuzz/${which}_fuzzer" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "${parallel[@]}" 2>&1 | tail -n 30
