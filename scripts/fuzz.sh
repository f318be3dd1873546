#!/usr/bin/env bash
# Builds a fuzzer with clang-14 (libFuzzer + ASan + UBSan) and runs it for
# SECONDS (default 600), seeded from the project's own inputs. New crashers
# land in fuzz/crashers/; add them to tests/fuzz-regressions/ or tests/hostile/.
#   scripts/fuzz.sh [fuse|onnx|target|bundle] [SECONDS] [JOBS]
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
extra=()
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
  bundle)
    # A real bundle (made by the plain build's fusec) whose program.txt each
    # input replaces; the corpus starts from its program.txt and the other
    # bundles' of the examples.
    "$root/scripts/build.sh" "$root/build" >/dev/null
    for m in resblock encoder_layer; do
      "$root/build/tools/fusec" compile "$root/examples/models/$m.onnxtxt" -o "$build/bundle-$m" --emit bundle >/dev/null
      cp "$build/bundle-$m/bundle/program.txt" "$corpus/$m.txt"
    done
    export FUSEC_FUZZ_BUNDLE=$build/bundle-resblock/bundle
    extra=(-detect_leaks=0)  # PoCL keeps its compiler's allocations to the end
    max_len=8192 ;;
  *) echo "unknown fuzzer \`$which\`: fuse, onnx, target or bundle" >&2; exit 2 ;;
esac
mkdir -p "$root/fuzz/crashers/$which"
cd "$root/fuzz/crashers/$which"
parallel=()
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
"$build/fuzz/${which}_fuzzer" "$corpus" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 "${parallel[@]}" "${extra[@]}" 2>&1 | tail -n 30
