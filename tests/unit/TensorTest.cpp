#include <doctest/doctest.h>

#include "TestUtil.h"
#include "fusec/engine/OutputCheck.h"
#include "fusec/engine/Tensor.h"

#include <limits>

using namespace fusec;

TEST_CASE("tensor shape, size and zero fill") {
  Tensor t(DType::Float32, {2, 3});
  CHECK(t.numel() == 6);
  CHECK(t.byteSize() == 24);
  CHECK(t.data<float>()[5] == 0.f);
  Tensor scalar = Tensor::scalar<int64_t>(7);
  CHECK(scalar.rank() == 0);
  CHECK(scalar.numel() == 1);
  Tensor empty(DType::Float32, {0, 4});
  CHECK(empty.numel() == 0);
  CHECK(empty.byteSize() == 0);
}

TEST_CASE("tensor casts follow C++ conversion, saturating out-of-range floats") {
  Tensor f = test::floats({4}, {1.7f, -2.5f, 0.f, 3e10f});
  Tensor i = f.castTo(DType::Int32);
  CHECK(i.data<int32_t>()[0] == 1);
  CHECK(i.data<int32_t>()[1] == -2);
  CHECK(i.data<int32_t>()[3] == std::numeric_limits<int32_t>::max());
  Tensor b = f.castTo(DType::Bool);
  CHECK(b.data<bool>()[0]);
  CHECK_FALSE(b.data<bool>()[2]);
  CHECK(test::ints({2}, {3, 4}).toFloats() == std::vector<float>{3.f, 4.f});
}

TEST_CASE("dtype names round trip") {
  for (DType t : {DType::Float32, DType::Int64, DType::Bool, DType::Float64, DType::UInt8}) {
    auto back = dtypeFromName(dtypeName(t));
    REQUIRE(back.has_value());
    CHECK(*back == t);
  }
  CHECK_FALSE(dtypeFromName("quaternion").has_value());
}

TEST_CASE("16-bit floats convert through float32 with rounding to nearest even") {
  Tensor f = test::floats({5}, {1.f, -2.5f, 65504.f, 1e-7f, 1.f + 1.f / 2048});
  Tensor h = f.castTo(DType::Float16);
  const auto* bits = reinterpret_cast<const uint16_t*>(h.raw());
  CHECK(bits[0] == 0x3c00);
  CHECK(bits[1] == 0xc100);
  CHECK(bits[2] == 0x7bff);  // largest finite half
  CHECK(bits[3] == 0x0002);  // subnormal: 1e-7 / 2^-24 = 1.68 -> 2
  CHECK(bits[4] == 0x3c00);  // exactly halfway between 1 and 1+2^-10: ties to even
  Tensor back = h.castTo(DType::Float32);
  CHECK(back.data<float>()[1] == -2.5f);
  CHECK(back.data<float>()[2] == 65504.f);
  Tensor b = test::floats({2}, {1.f + 1.f / 256, 3.f}).castTo(DType::BFloat16);
  CHECK(b.castTo(DType::Float32).toFloats() == std::vector<float>{1.f, 3.f});  // halfway: ties to even
  CHECK(b.scalarAt(1) == 3.0);
}

TEST_CASE("outputs compare against their scale: |got - want| <= atol + rtol * max|want|") {
  using fusec::checkOutput;
  // An element three decades below the output's largest: off by 0.5 % of
  // itself, 3e-7 of the scale. A per-element test would fail it.
  Tensor want = Tensor::fromVector<float>({3}, {1285.0f, 0.08172f, -3.0f});
  Tensor got = Tensor::fromVector<float>({3}, {1285.0f, 0.08149f, -3.0f});
  OutputCheck ok = checkOutput(got, want);
  CHECK(ok.ok);
  CHECK(ok.figures.scale == doctest::Approx(1285.0));
  CHECK(ok.figures.worst == 1);
  // Off by more than rtol of the scale: fails, naming the element.
  Tensor bad = Tensor::fromVector<float>({3}, {1285.0f, 2.0f, -3.0f});
  OutputCheck no = checkOutput(bad, want);
  CHECK_FALSE(no.ok);
  CHECK(no.summary.find("element 1: 2, expected 0.08172") == 0);
  CHECK(checkOutput(bad, want, Tolerance{1e-5, 2e-3}).ok);
  // Infinities of one sign and NaNs are equal to themselves only.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor special = Tensor::fromVector<float>({3}, {inf, -inf, nan});
  CHECK(checkOutput(special, special).ok);
  CHECK_FALSE(checkOutput(Tensor::fromVector<float>({3}, {inf, inf, nan}), special).ok);
  CHECK_FALSE(checkOutput(Tensor::fromVector<float>({3}, {inf, -inf, 0.0f}), special).ok);
  CHECK_FALSE(checkOutput(special, Tensor::fromVector<float>({3}, {1e38f, -inf, nan})).ok);
  // Integers compare exactly, however large the scale; shapes and types first.
  CHECK_FALSE(checkOutput(Tensor::fromVector<int64_t>({2}, {1000000, 1}), Tensor::fromVector<int64_t>({2}, {1000000, 2})).ok);
  CHECK(checkOutput(Tensor::fromVector<float>({1, 3}, {1, 2, 3}), Tensor::fromVector<float>({3}, {1, 2, 3})).summary ==
        "shape [1, 3], expected [3]");
}
