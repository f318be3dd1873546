#!/usr/bin/env bash
# Usage: hostile-writers.sh FUSEC MODEL ONNX_CASE WORK
# Every writer refuses to replace what is not a regular file: a device node
# (a FIFO where mknod is not allowed), a FIFO and a folder at the output path
# survive each one with a one-line error, and `-` writes to stdout.
set -u
fusec=$1 model=$2 onnxcase=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

if mknod "$work/device" c 1 3 2> /dev/null; then devkind="character special file"; else
  mkfifo "$work/device"; devkind="fifo"
fi
mkfifo "$work/fifo"
mkdir "$work/folder"
kinds=("$devkind" "fifo" "directory")

# Each writer, given a target path; the target must keep its kind.
writers=(
  "convert $model -o TARGET"
  "compile $model --json TARGET"
  "run $model --json TARGET"
  "run $model --html TARGET"
  "onnx-test $onnxcase --write-passes TARGET"
)
for w in "${writers[@]}"; do
  i=0
  for t in device fifo folder; do
    # shellcheck disable=SC2086
    out=$(timeout 120 "$fusec" ${w//TARGET/$work/$t} 2>&1 > /dev/null)
    rc=$?
    [ $rc -eq 1 ] || fail "\`fusec $w\` on a $t exited $rc: $out"
    grep -q "error: .*$work/$t: .*not a regular file" <<<"$out" || fail "\`fusec $w\` on a $t: no one-line reason: $out"
    [ "$(stat -c %F "$work/$t")" = "${kinds[$i]}" ] || fail "\`fusec $w\` replaced the $t: now $(stat -c %F "$work/$t")"
    i=$((i + 1))
  done
  flag=${w% TARGET}
  echo "ok: fusec ${w%% *} ... ${flag##* }: a device, a fifo and a folder survive"
done

# A folder of outputs whose file is a FIFO.
mkdir -p "$work/out" && mkfifo "$work/out/plan.json"
out=$(timeout 120 "$fusec" compile "$model" -o "$work/out" --emit plan 2>&1 > /dev/null)
[ $? -eq 1 ] && [ -p "$work/out/plan.json" ] || fail "compile -o wrote over a FIFO in its folder: $out"
echo "ok: a FIFO inside the output folder survives"

# `-` is stdout: the data alone there, the text for people on stderr.
timeout 300 "$fusec" run "$model" --json - 2> /dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["runs"]' \
  || fail "run --json - did not print JSON alone on stdout"
[ ! -e ./- ] || fail "run --json - wrote a file named -"
timeout 120 "$fusec" compile "$model" --json - | python3 -c 'import json,sys; json.load(sys.stdin)' || fail "compile --json -"
timeout 120 "$fusec" convert "$model" -o - | grep -q "ir_version" || fail "convert -o -"
echo "ok: - writes to stdout"
