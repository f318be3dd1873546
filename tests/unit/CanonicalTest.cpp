/// Canonical kernel programs (Canonical.h): what a kernel computes decides
/// its text; names and comments do not.
#include <doctest/doctest.h>

#include <algorithm>

#include "fusec/codegen/Canonical.h"

using namespace fusec;
using codegen::canonicalProgram;

TEST_CASE("canonical program: names, value numbers and comments do not count") {
  const std::string layer3 =
      "// fusec kernel g3_matmul_bias (rule matmul_bias): MatMul, Add\n"
      "#define N 768  // within this program only\n"
      "__kernel void g3_matmul_bias(__global const float* in0, __global float* out0) {\n"
      "  const float v103 = in0[get_global_id(0)];  // _ff1_Add_output_0\n"
      "  const float v104 = v103 * 0.707106769f; /* Div _Div_1 */\n"
      "  out0[get_global_id(0)] = v104 + v103;\n"
      "}\n";
  const std::string layer9 =
      "// fusec kernel g9_matmul_bias (rule matmul_bias): MatMul, Add\n"
      "#define N 768  // within this program only\n"
      "__kernel void g9_matmul_bias(__global const float* in0, __global float* out0) {\n"
      "  const float v871 = in0[get_global_id(0)];  // _ff7_Add_output_0\n"
      "  const float v872 = v871 * 0.707106769f; /* Div _Div_7 */\n"
      "  out0[get_global_id(0)] = v872 + v871;\n"
      "}\n";
  const codegen::CanonicalProgram a = canonicalProgram(layer3, "g3_matmul_bias");
  const codegen::CanonicalProgram b = canonicalProgram(layer9, "g9_matmul_bias");
  CHECK(a.text == b.text);
  CHECK(a.entry == "fusec_kernel");
  CHECK(b.entry == "fusec_kernel");
  CHECK(a.text.find("__kernel void fusec_kernel(") != std::string::npos);
  CHECK(a.text.find("const float v0 = in0[") != std::string::npos);
  CHECK(a.text.find("const float v1 = v0 * 0.707106769f;") != std::string::npos);
  CHECK(a.text.find("//") == std::string::npos);
  CHECK(a.text.find("Div") == std::string::npos);
  // Line structure kept: a build log's line numbers hold for the source.
  CHECK(std::count(a.text.begin(), a.text.end(), '\n') == std::count(layer3.begin(), layer3.end(), '\n'));

  // Anything that changes what is computed changes the text: a shape, a
  // folded-in constant, an operator, the order of values.
  auto differs = [&](const std::string& from, const std::string& to) {
    std::string changed = layer3;
    const size_t at = changed.find(from);
    REQUIRE(at != std::string::npos);
    changed.replace(at, from.size(), to);
    return canonicalProgram(changed, "g3_matmul_bias").text != a.text;
  };
  CHECK(differs("#define N 768", "#define N 769"));
  CHECK(differs("0.707106769f", "0.707106709f"));
  CHECK(differs("v104 + v103", "v104 - v103"));
  CHECK(differs("v104 + v103", "v103 + v104"));
  CHECK(differs("in0[get_global_id(0)];", "in0[get_global_id(0) + 1];"));
}

TEST_CASE("canonical program: literals, numbers and look-alike names are left alone") {
  const std::string src =
      "#define FUSEC_VMAX(a, b) select(b, a, (a) > (b))\n"
      "__kernel void k(__global float* out0) {\n"
      "  const float16 v7 = vload16(0, out0);\n"
      "  const float x = 1.5e-3f + 0x1p+4f + v7.s0; int v7x = 2; int _v7 = 3; int vv7 = 4;\n"
      "  printf(\"v7 // not a comment /* nor this */\\n\"); char c = '/';\n"
      "}\n";
  const codegen::CanonicalProgram p = canonicalProgram(src, "k");
  CHECK(p.text.find("FUSEC_VMAX") != std::string::npos);
  CHECK(p.text.find("vload16(0, out0)") != std::string::npos);
  CHECK(p.text.find("const float16 v0 =") != std::string::npos);
  CHECK(p.text.find("1.5e-3f + 0x1p+4f + v0.s0") != std::string::npos);
  CHECK(p.text.find("int v7x = 2; int _v7 = 3; int vv7 = 4;") != std::string::npos);
  CHECK(p.text.find("\"v7 // not a comment /* nor this */\\n\"") != std::string::npos);
  CHECK(p.text.find("char c = '/';") != std::string::npos);
  CHECK(p.text.find("void fusec_kernel(") != std::string::npos);
}

TEST_CASE("canonical program: comments as the preprocessor sees them") {
  // A line comment ending in a backslash swallows the next line; a block
  // comment is one space, even across lines.
  const codegen::CanonicalProgram p = canonicalProgram(
      "#define A 1 // two \\\n  lines\nint x = A;/* a\n b */int y;\n", "k");
  CHECK(p.text == "#define A 1\nint x = A; int y;\n");
  // A source that already uses the canonical entry's name keeps its own.
  const codegen::CanonicalProgram q =
      canonicalProgram("void fusec_kernel(void) {}\n__kernel void mine(void) { fusec_kernel(); }\n", "mine");
  CHECK(q.entry == "mine");
  CHECK(q.text.find("__kernel void mine(") != std::string::npos);
}
