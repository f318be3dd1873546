#!/usr/bin/env bash
# Usage: compile-builds.sh FUSEC STATIC_MODEL SYMBOLIC_MODEL WORK
# `fusec compile` builds what a run launches into the kernel cache, so the
# run after it compiles nothing: every program and every fusion timing
# from the cache. `--no-build` builds nothing; a model with symbolic input
# dims says why it was not built.
set -u
fusec=$1 model=$2 symbolic=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
unset XDG_CACHE_HOME
export FUSEC_CACHE_DIR="$work/cache"

out=$("$fusec" compile --no-build "$model" 2>&1) || fail "compile --no-build exited $?: $out"
grep -q "^build:" <<<"$out" && fail "compile --no-build built: $out"
grep -q "^entries: 0 " <<<"$("$fusec" cache info)" || fail "compile --no-build wrote cache entries"

out=$("$fusec" compile "$model" 2>&1) || fail "compile exited $?: $out"
line=$(grep "^build: " <<<"$out") || fail "compile printed no build line: $out"
programs=$(sed -n 's/^build: [0-9]* kernels from \([0-9]*\) distinct programs.*/\1/p' <<<"$line")
[ -n "$programs" ] && [ "$programs" -gt 0 ] || fail "no programs built: $line"

out=$("$fusec" run "$model" --check 2>&1) || fail "run after compile exited $?: $out"
grep -q "built in [0-9]* ms ($programs distinct programs, $programs of them from the cache)" <<<"$out" ||
  fail "the run after compile built programs again ($programs built by compile): $out"
grep -Eq "fusion\(s\) measured against their members unfused \(([0-9]+) from the cache\)" <<<"$out" || fail "$out"
measured=$(sed -n 's/.* \([0-9]*\) fusion(s) measured against their members unfused (\([0-9]*\) from the cache).*/\1 \2/p' <<<"$out")
[ "$(cut -d' ' -f1 <<<"$measured")" = "$(cut -d' ' -f2 <<<"$measured")" ] || fail "fusion timings not all cached: $out"
grep -q "matches the interpreter" <<<"$out" || fail "$out"
echo "ok: compile built $programs programs; the run took all of them, and every fusion timing, from the cache"

out=$("$fusec" compile "$symbolic" 2>&1) || fail "compile of a symbolic model exited $?: $out"
grep -q "^build: skipped: the model has symbolic input dims" <<<"$out" || fail "no reason given: $out"
echo "ok: a model with symbolic dims is not built, and says why"
