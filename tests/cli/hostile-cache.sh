#!/usr/bin/env bash
# Usage: hostile-cache.sh FUSEC MODEL_A MODEL_B WORK
# The kernel cache cannot be planted: entries written under another key
# (another user's cache, a copy of another model's binary) are rebuilt, not
# run; a cache folder others can write, or that belongs to someone else, or
# whose key is readable by others, is not used; no folder is made outside
# an existing home.
set -u
fusec=$1 a=$2 b=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
unset XDG_CACHE_HOME

# 1. A fresh cache: folder 0700, key 0600, entries read back.
export FUSEC_CACHE_DIR="$work/cache"
"$fusec" run "$a" > /dev/null 2>&1 || fail "first run of A exited $?"
[ "$(stat -c %a "$work/cache")" = 700 ] || fail "the cache folder is mode $(stat -c %a "$work/cache"), not 700"
[ "$(stat -c %a "$work/cache/key")" = 600 ] || fail "the key is mode $(stat -c %a "$work/cache/key"), not 600"
out=$("$fusec" run "$a" 2>&1) || fail "second run of A exited $?"
grep -Eq "\(([1-9][0-9]*) distinct programs, \1 of them from the cache\)" <<<"$out" || fail "the cache was not read back: $out"
echo "ok: a new cache is private (0700, key 0600) and read back"

# 2. Another cache's entries (another key: as another user would write them)
#    planted under A's names: rebuilt, outputs right.
FUSEC_CACHE_DIR="$work/other" "$fusec" run "$b" > /dev/null 2>&1 || fail "run of B exited $?"
planted=("$work"/other/*.bin)
i=0
for f in "$work"/cache/*.bin; do
  cp "${planted[$((i % ${#planted[@]}))]}" "$f"
  i=$((i + 1))
done
out=$("$fusec" run "$a" --check 2>&1) || fail "run of A on planted entries exited $?: $out"
grep -q "matches the interpreter" <<<"$out" || fail "A on planted entries did not check: $out"
grep -q "distinct programs, 0 of them from the cache)" <<<"$out" || fail "a planted entry was used: $out"
echo "ok: $i entries planted from another key: none used, outputs checked"

# 3. A cache folder that others may write: not used, with a warning.
chmod 0777 "$work/cache"
out=$("$fusec" run "$a" --check 2>&1) || fail "run with a world-writable cache exited $?: $out"
grep -q "warning: no kernel cache: .*writable by other users" <<<"$out" || fail "no warning for a world-writable cache: $out"
grep -q "distinct programs, 0 of them from the cache)" <<<"$out" || fail "a world-writable cache was read: $out"
chmod 0700 "$work/cache"

# 4. A key others can read: not used.
chmod 0644 "$work/cache/key"
out=$("$fusec" run "$a" 2>&1) || fail "run with a readable key exited $?"
grep -q "warning: no kernel cache: .*key.*not a private key" <<<"$out" || fail "no warning for a readable key: $out"
chmod 0600 "$work/cache/key"

# 5. A folder of another user's, or reached through another user's link.
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$work/theirs" && chown nobody "$work/theirs" && chmod 0700 "$work/theirs"
  out=$(FUSEC_CACHE_DIR="$work/theirs" "$fusec" run "$a" 2>&1) || fail "run with another user's cache exited $?"
  grep -q "warning: no kernel cache: .*belongs to another user" <<<"$out" || fail "no warning for another user's cache: $out"
  mkdir -p "$work/sticky" && chmod 1777 "$work/sticky" && ln -s "$work/cache" "$work/sticky/link" && chown -h nobody "$work/sticky/link"
  out=$(FUSEC_CACHE_DIR="$work/sticky/link" "$fusec" run "$a" 2>&1) || fail "run through another user's link exited $?"
  grep -q "warning: no kernel cache: .*link belongs to another user" <<<"$out" || fail "no warning for another user's link: $out"
  echo "ok: writable, readable-key, another user's and linked caches are not used"
else
  echo "ok: writable and readable-key caches are not used (not root: ownership cases skipped)"
fi

# 6. No home: nothing is created (by fusec, nor by PoCL, whose cache would
#    be there too), the run goes on without a cache.
unset FUSEC_CACHE_DIR
out=$(env -u POCL_CACHE_DIR HOME="$work/nonexistent" "$fusec" run "$a" --check 2>&1) || fail "run with a missing home exited $?: $out"
grep -q "warning: no kernel cache: the home folder .* does not exist" <<<"$out" || fail "no warning for a missing home: $out"
[ ! -e "$work/nonexistent" ] || fail "a folder was created for a home that does not exist"
echo "ok: a missing home creates nothing"
