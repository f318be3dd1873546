#!/usr/bin/env bash
# install-test.sh BUILD_DIR SOURCE_DIR: installs the build into a temporary
# prefix, then, with the source and build trees hidden (empty folders
# mounted over them in a private mount namespace: as if renamed, without
# touching them), compiles and runs a model with the installed `fusec` and its
# default packs, imports the installed Python module, and builds a program
# against the installed package with find_package(fusec) and with pkg-config.
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
if ! unshare -m true 2>/dev/null; then
  echo "install-test: no private mount namespace here (unshare -m fails): cannot hide the trees; skipped"
  exit 77
fi
work=$(mktemp -d /tmp/fusec-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
cp -r "$src/tests/install/consumer" "$work/consumer"
cp "$src/examples/models/resblock.onnxtxt" "$work/"
mkdir -p "$work/tmp"
unset FUSEC_RULES_DIR
export FUSEC_CACHE_DIR="$work/cache" POCL_CACHE_DIR="$work/pocl" TMPDIR="$work/tmp"

unshare -m bash -s "$work" "$src" "$build" <<'INNER'
set -euo pipefail
work=$1 src=$2 build=$3
cd "$work"
# The build tree may lie inside the source tree: hide it first.
for tree in "$build" "$src"; do
  if [ -d "$tree" ]; then mount -t tmpfs -o size=1m fusec-hidden "$tree"; fi
done
[ -z "$(ls -A "$src")" ] || { echo "install-test: the source tree is still visible"; exit 1; }
prefix=$work/prefix
echo "== installed fusec compile (source and build trees hidden)"
"$prefix/bin/fusec" compile resblock.onnxtxt | tee compile.txt
grep -q "with core, cnn, transformer, layout" compile.txt
grep -q "conv_bias_activation  *1 of 1" compile.txt
echo "== installed fusec run --check"
"$prefix/bin/fusec" run resblock.onnxtxt --check | tee run.txt
grep -q "matches the interpreter" run.txt
echo "== installed Python module"
PYTHONPATH="$prefix/lib/python3/dist-packages" PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 - "$prefix" <<'PY'
import sys, numpy, fusec
prefix = sys.argv[1]
assert fusec.__file__.startswith(prefix), fusec.__file__
c = fusec.compile("resblock.onnxtxt", dims={"N": 1})
assert all(f.startswith(prefix + "/share/fusec/rules") for f in c.report["packs"]), c.report["packs"]
x = numpy.ones((1, 3, 32, 32), numpy.float32)
numpy.testing.assert_allclose(c.run({"image": x})["logits"], c.run({"image": x}, interpreter=True)["logits"],
                              rtol=1e-4, atol=1e-5)
print("python: fusec from", fusec.__file__, "packs from", c.report["packs"][0])
PY
echo "== a program built with find_package(fusec)"
cmake -S consumer -B consumer/build -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C consumer/build >/dev/null
consumer/build/fusec-consumer resblock.onnxtxt | tee consumer.txt
grep -q "^pack $prefix/share/fusec/rules/core" consumer.txt
echo "== a program built with pkg-config"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs fusec)
g++ consumer/main.cpp $flags -Wl,-rpath,"$prefix/lib" -o consumer-pc
./consumer-pc resblock.onnxtxt >/dev/null
echo "install-test: passed"
INNER
