#!/usr/bin/env bash
# Usage: cache.sh FUSEC MODEL WORK
# The kernel cache's hygiene: `fusec cache info` says where and how large,
# `clear` removes fusec's entries and nothing else (the key and a file that
# is not fusec's stay), FUSEC_CACHE_MAX_BYTES caps the entries (least
# recently used go first), and two processes share one cache at once.
set -u
fusec=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
unset XDG_CACHE_HOME
export FUSEC_CACHE_DIR="$work/cache"
entries() { "$fusec" cache info | sed -n 's/^entries: \([0-9]*\) .*/\1/p'; }

# 1. Two runs at once on an empty cache: both right, the cache whole after.
"$fusec" run "$model" --check > "$work/a.log" 2>&1 &
"$fusec" run "$model" --check > "$work/b.log" 2>&1 || fail "the second of two concurrent runs failed: $(cat "$work/b.log")"
wait $! || fail "the first of two concurrent runs failed: $(cat "$work/a.log")"
grep -q "matches the interpreter" "$work/a.log" || fail "first concurrent run: $(cat "$work/a.log")"
out=$("$fusec" run "$model" 2>&1) || fail "a run after the concurrent ones failed: $out"
grep -Eq "\(([1-9][0-9]*) distinct programs, \1 of them from the cache\)" <<<"$out" || fail "not all from the cache: $out"
echo "ok: two concurrent runs share one cache"

# 2. info: the folder and a count of entries.
info=$("$fusec" cache info) || fail "cache info exited $?"
grep -q "^folder:  $work/cache$" <<<"$info" || fail "info names another folder: $info"
n=$(entries)
[ "$n" -gt 0 ] || fail "info counts no entries after runs: $info"
echo "ok: info counts $n entries"

# 3. clear: entries gone, the key and a foreign file kept.
key=$(sha256sum "$work/cache/key")
echo "not fusec's" > "$work/cache/notes.txt"
"$fusec" cache clear | grep -q "^cleared $work/cache: " || fail "clear said something else"
[ "$(entries)" = 0 ] || fail "entries left after clear: $("$fusec" cache info)"
[ "$(sha256sum "$work/cache/key")" = "$key" ] || fail "clear changed the key"
[ -f "$work/cache/notes.txt" ] || fail "clear removed a file that is not an entry"
echo "ok: clear removes entries only"

# 4. The cap: entries stay under it (plus the last write) and the entry read
#    last survives; a malformed cap is refused.
cap=200000
FUSEC_CACHE_MAX_BYTES=$cap "$fusec" run "$model" > /dev/null 2>&1 || fail "run under a cap failed"
bytes=$(find "$work/cache" -maxdepth 1 -name '*.bin' -printf '%s\n' | awk '{s += $1} END {print s + 0}')
biggest=$(find "$work/cache" -maxdepth 1 -name '*.bin' -printf '%s\n' | sort -n | tail -1)
[ "$bytes" -le $((cap + biggest)) ] || fail "$bytes bytes of binaries under a cap of $cap"
out=$(FUSEC_CACHE_MAX_BYTES=12x "$fusec" cache info 2>&1) && fail "a malformed cap was accepted: $out"
grep -q "FUSEC_CACHE_MAX_BYTES" <<<"$out" || fail "the error does not name the variable: $out"
echo "ok: $bytes bytes of binaries under a cap of $cap"
