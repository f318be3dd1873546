/// How a kernel family registers itself. The family's file defines its spec:
///
///   FUSEC_KERNEL_FAMILY(squeeze_excite) {
///     return {"squeeze_excite", "what it builds", "what a group it refuses lacks",
///             {"#e0ecd4", "#5a7d2a"},                 // colour in reports
///             [](const Graph& g, const std::vector<NodeRef>& group, const OpCatalog&) { ... },  // claims
///             [](const EmitRequest& r) { ... }};      // emitter
///   }
///
/// and one line `squeeze_excite:SqueezeExcite.cpp` in codegen/CMakeLists.txt's
/// FUSEC_KERNEL_FAMILIES adds the file to the library and the family to the
/// registry (kernelFamilies(), Families.cpp), in that list's order of
/// preference for a node no rule fused. Nothing else names a family: the
/// HTML report takes its colour from the spec, docs/language.md's table is
/// checked against the registry by the tests.
#pragma once

#include "fusec/codegen/Families.h"

#define FUSEC_KERNEL_FAMILY(NAME) ::fusec::codegen::FunctionFamily::Spec NAME##_family()
