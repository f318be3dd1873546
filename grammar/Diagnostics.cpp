/// Source files and the diagnostic engine.
#include "fusec/grammar/Diagnostics.h"
#include "fusec/engine/Printable.h"

#include <algorithm>
#include <cassert>
#include <ostream>

namespace fusec::grammar {

uint32_t SourceManager::addFile(std::string path, std::string contents) {
  File f{std::move(path), std::move(contents), {0}};
  for (size_t i = 0; i < f.contents.size(); ++i)
    if (f.contents[i] == '\n') f.lineStarts.push_back(i + 1);
  files_.push_back(std::move(f));
  return static_cast<uint32_t>(files_.size());
}

const std::string& SourceManager::path(uint32_t fileId) const {
  assert(fileId >= 1 && fileId <= files_.size() && "unknown file id");
  return files_[fileId - 1].path;
}

const std::string& SourceManager::contents(uint32_t fileId) const {
  assert(fileId >= 1 && fileId <= files_.size() && "unknown file id");
  return files_[fileId - 1].contents;
}

std::string_view SourceManager::line(uint32_t fileId, uint32_t line) const {
  const File& f = files_[fileId - 1];
  if (line == 0 || line > f.lineStarts.size()) return {};
  size_t begin = f.lineStarts[line - 1];
  size_t end = line < f.lineStarts.size() ? f.lineStarts[line] - 1 : f.contents.size();
  std::string_view text(f.contents);
  text = text.substr(begin, end - begin);
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  return text;
}

InFlightDiagnostic::~InFlightDiagnostic() {
  if (engine_) engine_->record(std::move(diag_));
}

InFlightDiagnostic& InFlightDiagnostic::attachNote(SourceRange range, std::string message) {
  diag_.notes.push_back(Diagnostic{Severity::Note, range, std::move(message), {}});
  return *this;
}

InFlightDiagnostic DiagnosticEngine::emitError(SourceRange range, std::string message) {
  return InFlightDiagnostic(*this, Diagnostic{Severity::Error, range, std::move(message), {}});
}

InFlightDiagnostic DiagnosticEngine::emitWarning(SourceRange range, std::string message) {
  return InFlightDiagnostic(*this, Diagnostic{Severity::Warning, range, std::move(message), {}});
}

void DiagnosticEngine::record(Diagnostic d) {
  if (d.severity == Severity::Error) ++errors_;
  if (d.severity == Severity::Warning) ++warnings_;
  diags_.push_back(std::move(d));
}

std::string_view DiagnosticEngine::sourceLine(const Diagnostic& d) const {
  return d.range.valid() ? sources_.line(d.range.fileId, d.range.line) : std::string_view();
}

std::string DiagnosticEngine::caret(const Diagnostic& d) const {
  if (!d.range.valid()) return {};
  std::string_view text = sourceLine(d);
  // Caret under the first character, tildes under the rest of the range on this line.
  uint32_t end = d.range.endLine == d.range.line ? std::max(d.range.endCol, d.range.col)
                                                 : static_cast<uint32_t>(text.size());
  std::string out;
  for (uint32_t c = 1; c < d.range.col; ++c) out += c - 1 < text.size() && text[c - 1] == '\t' ? '\t' : ' ';
  out += '^';
  for (uint32_t c = d.range.col + 1; c <= end && c <= text.size(); ++c) out += '~';
  return out;
}

const std::string& DiagnosticEngine::path(const Diagnostic& d) const {
  static const std::string none;
  return d.range.valid() ? sources_.path(d.range.fileId) : none;
}

const char* severityName(Severity s) {
  static const char* kLabels[] = {"error", "warning", "note"};
  return kLabels[static_cast<int>(s)];
}

void DiagnosticEngine::print(std::ostream& os, const Diagnostic& d) const {
  const char* label = severityName(d.severity);
  if (!d.range.valid())
    os << label << ": " << printable(d.message, "\n") << "\n";
  else
    os << path(d) << ":" << d.range.line << ":" << d.range.col << ": " << label << ": " << printable(d.message, "\n") << "\n  "
       << printable(sourceLine(d), "\t") << "\n  " << caret(d) << "\n";
  for (const Diagnostic& n : d.notes) print(os, n);
}

void DiagnosticEngine::print(std::ostream& os) const {
  for (const Diagnostic& d : diags_) print(os, d);
}

}  // namespace fusec::grammar
