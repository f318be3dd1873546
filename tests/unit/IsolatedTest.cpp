#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <string>

#include "fusec/engine/Isolated.h"

using namespace fusec;

TEST_CASE("runIsolated returns the child's answer, however long") {
  // Larger than a pipe's buffer (64 KiB), so the parent must read while the
  // child writes; every byte is checked, not just the length.
  const std::string big = [] {
    std::string s(300000, '\0');
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7919 % 251);
    return s;
  }();
  Expected<std::string> got = runIsolated("work", [&] { return big; });
  REQUIRE(got.ok());
  CHECK(got.value() == big);
  Expected<std::string> empty = runIsolated("work", [] { return std::string(); });
  REQUIRE(empty.ok());
  CHECK(empty.value().empty());
}

TEST_CASE("runIsolated keeps the child's changes in the child") {
  int counter = 1;
  Expected<std::string> got = runIsolated("work", [&] {
    counter = 42;
    return std::to_string(counter);
  });
  REQUIRE(got.ok());
  CHECK(got.value() == "42");
  CHECK(counter == 1);
}

TEST_CASE("runIsolated turns a crash, an exception, a hang and a flood into errors") {
  Expected<std::string> crashed = runIsolated("inference", [] {
    ::raise(SIGABRT);
    return std::string("unreachable");
  });
  REQUIRE_FALSE(crashed.ok());
  CHECK(crashed.error().message == "inference crashed (signal 6, Aborted)");

  Expected<std::string> threw = runIsolated("inference", []() -> std::string { throw UserError{"bad node"}; });
  REQUIRE_FALSE(threw.ok());
  CHECK(threw.error().message == "inference: bad node");

  Expected<std::string> quit = runIsolated("inference", []() -> std::string { ::_exit(7); });
  REQUIRE_FALSE(quit.ok());
  CHECK(quit.error().message == "inference exited with status 7");

  IsolationLimits quick;
  quick.timeoutSeconds = 1;
  Expected<std::string> hung = runIsolated(
      "inference",
      [] {
        for (;;) ::pause();
        return std::string();
      },
      quick);
  REQUIRE_FALSE(hung.ok());
  CHECK(hung.error().message == "inference ran longer than 1 s");

  IsolationLimits small;
  small.maxResultBytes = 1000;
  Expected<std::string> flood = runIsolated("inference", [] { return std::string(100000, 'x'); }, small);
  REQUIRE_FALSE(flood.ok());
  CHECK(flood.error().message == "inference answered more than 1000 bytes");
  Expected<std::string> fits = runIsolated("inference", [] { return std::string(1000, 'x'); }, small);
  CHECK(fits.ok());
}
