/// Text from a model or a pack, made safe to print: names are chosen by
/// whoever wrote the file, and a terminal obeys the control characters in
/// them (ESC sequences retitle a window, clear the screen, forge coloured
/// text; CR overwrites a line), while JSON and Python need UTF-8.
#pragma once

#include <string>
#include <string_view>

namespace fusec {

/// `text` with every control character (C0, DEL, C1), bidirectional
/// override and byte that is not part of valid UTF-8 written as an escape
/// (`\x1b`, `\u202e`); the rest, valid UTF-8, unchanged. The control
/// characters listed in `keep` stay (a tab in a source line echoed under a
/// diagnostic keeps its columns; a message of several lines keeps `\n`).
std::string printable(std::string_view text, std::string_view keep = {});

/// Whether printable(text) == text.
bool isPrintable(std::string_view text);

}  // namespace fusec
