#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every test with
# ctest; then the same suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (skip that with FUSEC_SKIP_SANITIZE=1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
jobs=$(nproc)

"$root/scripts/build.sh" "$root/build"
(cd "$root/build" && ctest --output-on-failure --parallel "$jobs")

if [ "${FUSEC_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== sanitizer build (ASan + UBSan) =="
  "$root/scripts/build.sh" "$root/build-asan" -DFUSEC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
    -DFUSEC_TEST_CACHE_DIR="$root/build/test-cache"
  # Leak checking is off: protobuf and libonnx keep static registries alive at exit.
  # Tests labelled `long` (verifying every shipped pack) and `seeds` (each
  # wrong rule on ten seeds) run in the plain build only, and the correct
  # rules on seed 1: the smaller verify tests take the same code through
  # the sanitizers.
  (cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 FUSEC_VERIFY_SEEDS=1 \
     ctest --output-on-failure --parallel "$jobs" --label-exclude 'long|seeds')
fi
