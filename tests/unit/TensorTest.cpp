#include <doctest/doctest.h>

#include "TestUtil.h"
#include "fusec/engine/Tensor.h"

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
