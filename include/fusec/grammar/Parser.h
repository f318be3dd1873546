/// Parsing `.fuse` text into the AST, and printing the AST back as canonical
/// `.fuse` text.
#pragma once

#include <string>
#include <vector>

#include "fusec/grammar/Ast.h"
#include "fusec/grammar/Diagnostics.h"

namespace fusec::grammar {

/// Parses one registered source file. Syntax errors go to `diags` (each with a
/// location and a message a person can read); the returned AST holds what
/// could be parsed. Never throws, whatever the bytes.
ast::File* parseFile(ast::AstContext& context, const SourceManager& sources, uint32_t fileId,
                     DiagnosticEngine& diags);

/// The texts of `text`'s tokens, comments and layout left out: what a
/// printer must keep, whatever layout and clause order it chooses.
std::vector<std::string> lexTokens(const std::string& text);

/// Canonical `.fuse` text of a file: fixed indentation and spacing, clauses
/// in a fixed order, comments dropped. Parses back to the same AST.
std::string printFile(const ast::File& file);
std::string printExpr(const ast::Expr& expr);

}  // namespace fusec::grammar
