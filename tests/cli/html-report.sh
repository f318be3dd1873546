#!/usr/bin/env bash
# html-report.sh FUSEC MODEL DIR: `fusec run --html` on MODEL, then the page
# in headless Chromium: it must draw every fused group (the page's own count
# of the group boxes with a size, read back from the DOM) and fetch nothing.
set -euo pipefail
fusec=$1 model=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir/home"
"$fusec" run "$model" --html "$dir/report.html" >/dev/null
page=$dir/report.html
# Self-contained: no scripts, styles or images from elsewhere.
if grep -Eo '(src|href)="[a-z]+:[^"]*"|<link|@import' "$page" | grep -v '^href="#' | head -1 | grep -q .; then
  echo "html-report: the page refers to something outside itself"; exit 1
fi
# Chromium keeps its profile and caches under HOME: a private one.
HOME="$dir/home" chromium --headless --no-sandbox --disable-gpu --user-data-dir="$dir/home/profile" \
  --dump-dom "file://$page" 2>/dev/null >"$dir/dom.html"
rendered=$(grep -o '<p id="rendered"[^>]*>[^<]*' "$dir/dom.html" || true)
echo "$rendered"
expected=$(sed -n 's/.*data-expected="\([0-9]*\)".*/\1/p' <<<"$rendered")
drawn=$(sed -n 's/.*data-drawn="\([0-9]*\)".*/\1/p' <<<"$rendered")
[ -n "$expected" ] && [ -n "$drawn" ] || { echo "html-report: the page's script did not run"; exit 1; }
[ "$expected" -gt 0 ] || { echo "html-report: no fused groups to draw"; exit 1; }
[ "$drawn" = "$expected" ] || { echo "html-report: $drawn of $expected groups drawn"; exit 1; }
grep -q 'class="measured"' "$page" || { echo "html-report: no measured point on the roofline"; exit 1; }
echo "html-report: $drawn fused groups drawn"
