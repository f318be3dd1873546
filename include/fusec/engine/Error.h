/// User errors versus internal bugs.
///
/// A mistake in a model or rule file is a user error: it travels as an `Error`
/// value (inside `Expected<T>`) up to the tool, which prints it and exits 1.
/// A broken invariant is an `assert`.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace fusec {

/// A user-facing error message, already phrased for a person
/// (`model.onnx: node 'conv1' (Conv): ...`).
struct Error {
  std::string message;
  /// Set when the input is valid but uses something fusec does not support
  /// (an op without a kernel, an element type); conformance runs count these
  /// apart from failures.
  bool unsupported = false;
};

/// Either a value or an Error. A small stand-in for C++23's std::expected.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}
  Expected(Error error) : state_(std::move(error)) {}

  explicit operator bool() const { return state_.index() == 0; }
  bool ok() const { return state_.index() == 0; }

  T& value() & {
    assert(ok() && "value() on an Expected holding an error");
    return std::get<0>(state_);
  }
  const T& value() const& {
    assert(ok() && "value() on an Expected holding an error");
    return std::get<0>(state_);
  }
  T&& value() && {
    assert(ok() && "value() on an Expected holding an error");
    return std::get<0>(std::move(state_));
  }
  const Error& error() const {
    assert(!ok() && "error() on an Expected holding a value");
    return std::get<1>(state_);
  }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Error> state_;
};

/// Expected<void>: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), failed_(true) {}
  static Status success() { return {}; }
  explicit operator bool() const { return !failed_; }
  bool ok() const { return !failed_; }
  const Error& error() const {
    assert(failed_ && "error() on a successful Status");
    return error_;
  }

 private:
  Error error_;
  bool failed_ = false;
};

/// Thrown inside a stage (interpreter kernels, importer) and caught at the
/// stage's public entry point, where it becomes an Error value. Never crosses
/// a public API.
struct UserError {
  std::string message;
  bool unsupported = false;
};

}  // namespace fusec
