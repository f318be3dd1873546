/// A small FileCheck, after LLVM's: a test file carries the expected output
/// in comments next to its input.
///
///   // CHECK: text        some later output line contains `text`
///   // CHECK-NEXT: text   the line right after the previous match contains it
///   // CHECK-NOT: text    no line between the previous and next match has it
///   // CHECK-SAME-LINE: text   the line of the previous match contains it too
///   // CHECK-EMPTY:       the line right after the previous match is empty
///   // -----              splits the file into independent cases
///
/// Cases keep their line numbers (other cases are blanked out), so expected
/// diagnostics name the lines as the file shows them.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace fusec::test {

struct CheckLine {
  enum class Kind { Check, Next, Not, Same, Empty };
  Kind kind;
  std::string text;
  int line;  ///< in the test file, for messages
};

struct CheckCase {
  std::string input;  ///< the whole file with other cases blanked out
  std::vector<CheckLine> checks;
  int firstLine;
};

inline std::vector<CheckCase> splitCases(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<std::pair<size_t, size_t>> ranges;  // [begin, end) line indexes
  size_t begin = 0;
  for (size_t i = 0; i <= lines.size(); ++i) {
    if (i == lines.size() || lines[i].rfind("// -----", 0) == 0) {
      ranges.emplace_back(begin, i);
      begin = i + 1;
    }
  }
  std::vector<CheckCase> cases;
  for (auto [b, e] : ranges) {
    CheckCase c;
    c.firstLine = static_cast<int>(b) + 1;
    for (size_t i = 0; i < lines.size(); ++i) {
      const bool mine = i >= b && i < e;
      c.input += (mine ? lines[i] : std::string()) + "\n";
      if (!mine) continue;
      const std::string& l = lines[i];
      struct Prefix {
        const char* text;
        CheckLine::Kind kind;
      };
      for (Prefix p : {Prefix{"// CHECK-NEXT:", CheckLine::Kind::Next}, Prefix{"// CHECK-NOT:", CheckLine::Kind::Not},
                       Prefix{"// CHECK-EMPTY:", CheckLine::Kind::Empty},
                       Prefix{"// CHECK-SAME-LINE:", CheckLine::Kind::Same}, Prefix{"// CHECK:", CheckLine::Kind::Check}}) {
        size_t at = l.find(p.text);
        if (at == std::string::npos) continue;
        std::string rest = l.substr(at + std::string(p.text).size());
        if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
        c.checks.push_back(CheckLine{p.kind, rest, static_cast<int>(i) + 1});
        break;
      }
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

/// Matches `checks` against `output`; returns an empty string on success or
/// a message naming the check that failed.
inline std::string fileCheck(const std::string& output, const std::vector<CheckLine>& checks) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  size_t next = 0;  // first line a CHECK may match
  long last = -1;   // line of the previous match
  std::vector<const CheckLine*> pendingNot;
  for (const CheckLine& c : checks) {
    if (c.kind == CheckLine::Kind::Not) {
      pendingNot.push_back(&c);
      continue;
    }
    long found = -1;
    if (c.kind == CheckLine::Kind::Same) {
      if (last >= 0 && lines[static_cast<size_t>(last)].find(c.text) != std::string::npos) continue;
      return "line " + std::to_string(c.line) + ": expected `" + c.text + "` on the line of the previous match\n--- output ---\n" + output;
    }
    if (c.kind == CheckLine::Kind::Next || c.kind == CheckLine::Kind::Empty) {
      const bool fits = last >= 0 && static_cast<size_t>(last + 1) < lines.size() &&
                        (c.kind == CheckLine::Kind::Empty ? lines[last + 1].empty()
                                                          : lines[last + 1].find(c.text) != std::string::npos);
      if (fits) found = last + 1;
    } else {
      for (size_t i = next; i < lines.size(); ++i)
        if (lines[i].find(c.text) != std::string::npos) {
          found = static_cast<long>(i);
          break;
        }
    }
    if (found < 0)
      return "line " + std::to_string(c.line) + ": expected `" + c.text + "` " +
             (c.kind == CheckLine::Kind::Empty ? "an empty line next"
              : c.kind == CheckLine::Kind::Next ? "on the next line" : "in the output") + "\n--- output ---\n" + output;
    for (const CheckLine* n : pendingNot)
      for (long i = last + 1; i < found; ++i)
        if (lines[static_cast<size_t>(i)].find(n->text) != std::string::npos)
          return "line " + std::to_string(n->line) + ": `" + n->text + "` appears but must not\n--- output ---\n" + output;
    pendingNot.clear();
    last = found;
    next = static_cast<size_t>(found) + 1;
  }
  for (const CheckLine* n : pendingNot)
    for (size_t i = static_cast<size_t>(last + 1); i < lines.size(); ++i)
      if (lines[i].find(n->text) != std::string::npos)
        return "line " + std::to_string(n->line) + ": `" + n->text + "` appears but must not\n--- output ---\n" + output;
  return {};
}

}  // namespace fusec::test
