// Compiles a model through fusec's library with the target's default packs
// and prints the report; exits 1 unless fusion left fewer kernels than
// the model has nodes.
#include <iostream>

#include "fusec/driver/Pipeline.h"
#include "fusec/driver/Report.h"
#include "fusec/driver/Session.h"
#include "fusec/engine/OnnxIO.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fusec-consumer MODEL\n";
    return 2;
  }
  fusec::Expected<fusec::Target> target = fusec::driver::loadTargetOrDefault("");
  if (!target) {
    std::cerr << target.error().message << "\n";
    return 1;
  }
  fusec::driver::LoadedPacks packs = fusec::driver::loadPacks({}, *target);
  std::cerr << packs.printed << packs.error;
  if (!packs.rules) return 1;
  fusec::Expected<fusec::Graph> model = fusec::importOnnxFile(argv[1]);
  if (!model) {
    std::cerr << model.error().message << "\n";
    return 1;
  }
  const size_t nodes = model->numNodes();
  auto compiled = fusec::driver::compile(std::move(model.value()), *packs.rules, *target);
  if (!compiled) {
    std::cerr << compiled.error().message << "\n";
    return 1;
  }
  std::cout << fusec::driver::reportText(*compiled.value(), {argv[1], target->name, packs.files});
  for (const std::string& f : packs.files) std::cout << "pack " << f << "\n";
  return compiled.value()->plan.after.kernels < static_cast<int64_t>(nodes) ? 0 : 1;
}
