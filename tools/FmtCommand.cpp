/// `fusec fmt FILE...`: parse `.fuse` files and print them in canonical form.
/// Syntax errors are reported (all of them) and the exit status is 1.
#include <fstream>
#include <iostream>
#include <sstream>

#include "Commands.h"
#include "fusec/grammar/Parser.h"

namespace fusec::tools {

CommandRunner addFmtCommand(CLI::App& sub) {
  auto files = std::make_shared<std::vector<std::string>>();
  sub.add_option("files", *files, ".fuse files")->required();
  return [files] {
    grammar::SourceManager sources;
    grammar::DiagnosticEngine diags(sources);
    grammar::ast::AstContext context;
    std::string out;
    for (const std::string& path : *files) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        std::cerr << "error: " << path << ": cannot open file\n";
        return 1;
      }
      std::ostringstream text;
      text << in.rdbuf();
      uint32_t id = sources.addFile(path, text.str());
      grammar::ast::File* file = grammar::parseFile(context, sources, id, diags);
      out += grammar::printFile(*file);
    }
    diags.print(std::cerr);
    if (diags.errorCount()) return 1;
    std::cout << out;
    return 0;
  };
}

}  // namespace fusec::tools
