#!/usr/bin/env bash
# Usage: hostile-files.sh FUSEC MODEL WORK
# Files fusec writes stay in their place: a link planted at an output is
# replaced, not followed; a corrupted kernel cache is rebuilt, not trusted;
# an empty FUSEC_CACHE_DIR does not mean the current folder.
set -u
fusec=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work/out" "$work/cwd" "$work/cache"
fail() { echo "FAIL: $*"; exit 1; }

# 1. A link at DIR/plan.json pointing elsewhere.
echo "precious" > "$work/victim"
ln -s "$work/victim" "$work/out/plan.json"
"$fusec" compile "$model" -o "$work/out" > /dev/null || fail "compile exited $?"
[ "$(cat "$work/victim")" = "precious" ] || fail "the link was followed: the victim file was overwritten"
[ -f "$work/out/plan.json" ] && [ ! -L "$work/out/plan.json" ] || fail "plan.json is not a regular file"
echo "ok: a link at the output is replaced, its target untouched"

# 2. Corrupted cache entries: truncated, flipped, another kernel's binary.
export FUSEC_CACHE_DIR="$work/cache"
"$fusec" run "$model" --check > /dev/null || fail "first run exited $?"
entries=("$work"/cache/*.bin)
[ -e "${entries[0]}" ] || fail "no cache entries were written"
i=0
for f in "${entries[@]}"; do
  case $((i % 3)) in
    0) head -c 100 "$f" > "$f.t" && mv "$f.t" "$f" ;;
    1) printf '\xff\xff\xff\xff' | dd of="$f" bs=1 seek=200 conv=notrunc 2> /dev/null ;;
    2) cp "${entries[0]}" "$f" ;;
  esac
  i=$((i + 1))
done
out=$("$fusec" run "$model" --check 2>&1) || fail "run on a corrupted cache exited $?: $out"
grep -q "matches the interpreter" <<<"$out" || fail "run on a corrupted cache did not check: $out"
"$fusec" run "$model" --check 2>&1 | grep -q "of them from the cache" || fail "the cache was not rebuilt"
echo "ok: ${#entries[@]} corrupted cache entries rebuilt, outputs checked"

# 3. An empty FUSEC_CACHE_DIR.
(cd "$work/cwd" && HOME="$work/home" FUSEC_CACHE_DIR="" "$fusec" run "$model" > /dev/null) || fail "run with an empty cache dir exited $?"
[ -z "$(ls -A "$work/cwd")" ] || fail "files were written into the current folder: $(ls "$work/cwd")"
echo "ok: an empty FUSEC_CACHE_DIR writes nothing into the current folder"

# 4. A binary model is parsed as it is read: cut short anywhere, it is
# refused in one line (never a crash, never a model made of what was read).
"$fusec" convert "$model" -o "$work/model.onnx" > /dev/null || fail "convert exited $?"
"$fusec" compile "$work/model.onnx" > /dev/null || fail "compile of the binary model exited $?"
size=$(stat -c %s "$work/model.onnx")
for cut in 1 2 7 $((size / 3)) $((size / 2)) $((size - 5)) $((size - 1)); do
  head -c "$cut" "$work/model.onnx" > "$work/cut.onnx"
  out=$("$fusec" compile "$work/cut.onnx" 2>&1)
  rc=$?
  [ $rc -eq 1 ] || fail "a model cut to $cut of $size bytes: exit $rc: $out"
  [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "^error: " <<<"$out" || fail "a model cut to $cut bytes: not one error line: $out"
done
echo "ok: a binary model cut short at 7 places is refused in one line"
