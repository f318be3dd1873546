#!/usr/bin/env bash
# Usage: printable-names.sh FUSEC FOLDER (made by tests/hostile/make_names.py)
# Names with control characters and bytes that are not UTF-8 never reach
# the terminal, JSON or a report raw: every command's output, success or
# error, holds no ESC, BEL or CR and is valid UTF-8, and shows the names
# escaped.
set -u
fusec=$1 dir=$2
fail() { echo "FAIL: $*"; exit 1; }
clean() {  # stdin: text that must hold no control character but \n and \t, and be UTF-8
  /usr/bin/python3 -c '
import sys
b = sys.stdin.buffer.read()
b.decode("utf-8")
bad = [c for c in b if (c < 32 and c not in (9, 10)) or c == 127]
sys.exit(1 if bad else 0)'
}
for cmd in "run $dir/names.onnx --check" "compile $dir/names.onnx" "compile $dir/names.onnx --json -" \
           "run $dir/names-error.onnx" "explain $dir/names.onnx --rule elementwise_chain" "convert $dir/names.onnx -o -"; do
  # shellcheck disable=SC2086
  out=$("$fusec" $cmd 2>&1)
  printf '%s' "$out" | clean || fail "\`fusec $cmd\` printed a control character or bytes that are not UTF-8"
  grep -Fq 'x1b' <<<"$out" || fail "\`fusec $cmd\` does not show the escaped name: $out"
  echo "ok: fusec $cmd"
done
"$fusec" compile "$dir/names.onnx" --json - | /usr/bin/python3 -c 'import json, sys; json.load(sys.stdin)' || fail "the JSON does not parse"
"$fusec" compile "$dir/names.onnx" -o "$dir/out" --emit html,onnx,plan > /dev/null || fail "compile -o exited $?"
cat "$dir/out/"*.html "$dir/out/plan.json" | clean || fail "a written file holds a raw control character"
echo "ok: JSON, HTML, plan and the fused model hold the names escaped"
