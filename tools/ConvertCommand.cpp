/// `fusec convert IN -o OUT`: import a model (binary or text) and export it;
/// the output format follows OUT's extension (.onnx binary, .txt/.onnxtxt
/// text). Exit status 1 on any import or verification error.
#include <iostream>

#include "Commands.h"
#include "fusec/engine/OnnxIO.h"

namespace fusec::tools {

CommandRunner addConvertCommand(CLI::App& sub) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  sub.add_option("model", *in, "model file (.onnx or ONNX text)")->required();
  sub.add_option("-o,--output", *out, "output file; `-` prints ONNX text to stdout")->required();
  return [in, out] {
    Expected<Graph> g = importOnnxFile(*in);
    if (!g) {
      std::cerr << "error: " << g.error().message << "\n";
      return 1;
    }
    if (*out == "-") {
      std::cout << exportOnnxText(g.value());
      return 0;
    }
    Status st = exportOnnxFile(g.value(), *out);
    if (!st) {
      std::cerr << "error: " << st.error().message << "\n";
      return 1;
    }
    return 0;
  };
}

}  // namespace fusec::tools
