/// One diagnostic engine for everything said about `.fuse` files: syntax
/// errors from the parser, semantic errors, warnings and notes. Printed as
///
///   rules/x.fuse:3:7: error: unknown op `Conve`
///     c = Conve(x, w)
///         ^~~~~
///
/// Messages are lower-case and quote source tokens with backticks. Errors are
/// collected, never thrown: a run reports all of them.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace fusec::grammar {

/// A span in a source file; lines and columns are 1-based, `end` is the last
/// character (inclusive). fileId 0 means "no location".
struct SourceRange {
  uint32_t fileId = 0;
  uint32_t line = 0, col = 0;
  uint32_t endLine = 0, endCol = 0;
  bool valid() const { return fileId != 0; }
};

/// Owns the text of every loaded file, for diagnostics to quote.
class SourceManager {
 public:
  /// Registers a file's contents; returns its id (>= 1).
  uint32_t addFile(std::string path, std::string contents);
  const std::string& path(uint32_t fileId) const;
  const std::string& contents(uint32_t fileId) const;
  /// Line `line` (1-based) of a file without its newline; empty past the end.
  std::string_view line(uint32_t fileId, uint32_t line) const;

 private:
  struct File {
    std::string path, contents;
    std::vector<size_t> lineStarts;
  };
  std::vector<File> files_;
};

enum class Severity { Error, Warning, Note };
/// `error`, `warning`, `note`.
const char* severityName(Severity s);

struct Diagnostic {
  Severity severity;
  SourceRange range;
  std::string message;
  std::vector<Diagnostic> notes;
};

class DiagnosticEngine;

/// A diagnostic being built; notes attach to it. It is recorded when this
/// object goes away. Converts to `false`, so `return emitError(...);` reads
/// as failure.
class InFlightDiagnostic {
 public:
  InFlightDiagnostic(DiagnosticEngine& engine, Diagnostic d) : engine_(&engine), diag_(std::move(d)) {}
  InFlightDiagnostic(InFlightDiagnostic&& o) noexcept : engine_(o.engine_), diag_(std::move(o.diag_)) {
    o.engine_ = nullptr;
  }
  InFlightDiagnostic(const InFlightDiagnostic&) = delete;
  ~InFlightDiagnostic();
  InFlightDiagnostic& attachNote(SourceRange range, std::string message);
  operator bool() const { return false; }

 private:
  DiagnosticEngine* engine_;
  Diagnostic diag_;
};

class DiagnosticEngine {
 public:
  explicit DiagnosticEngine(const SourceManager& sources) : sources_(sources) {}
  InFlightDiagnostic emitError(SourceRange range, std::string message);
  InFlightDiagnostic emitWarning(SourceRange range, std::string message);

  void record(Diagnostic d);
  const std::vector<Diagnostic>& diagnostics() const { return diags_; }
  size_t errorCount() const { return errors_; }
  size_t warningCount() const { return warnings_; }

  /// Prints every diagnostic, in the order emitted, with source line and caret.
  void print(std::ostream& os) const;
  /// Prints one diagnostic (and its notes).
  void print(std::ostream& os, const Diagnostic& d) const;

  /// The file a located diagnostic is in; empty without a location.
  const std::string& path(const Diagnostic& d) const;
  /// The source line a located diagnostic points into, without its newline.
  std::string_view sourceLine(const Diagnostic& d) const;
  /// The line under it that marks the range: `^` under its first character,
  /// `~` under the rest (tabs kept, so it lines up).
  std::string caret(const Diagnostic& d) const;

 private:
  const SourceManager& sources_;
  std::vector<Diagnostic> diags_;
  size_t errors_ = 0, warnings_ = 0;
};

}  // namespace fusec::grammar
