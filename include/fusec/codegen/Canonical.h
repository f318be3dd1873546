/// The text a kernel is built from: what it computes, and nothing that only
/// names it.
///
/// Generated kernels carry their group's name (`g7_matmul_bias`), comments
/// naming the graph's nodes and values, and value identifiers numbered by
/// graph (`v103`). The twelve layers of an encoder generate twelve texts
/// that differ in those alone. The canonical program drops the comments,
/// calls the kernel `fusec_kernel`, and renumbers the `v<N>` identifiers in
/// order of first appearance: an alpha-renaming, so it computes what the
/// source computes, and two groups with the same ops, shapes, attributes
/// and folded-in constants get one text, one cache key and one binary. The
/// readable source stays what `--emit opencl`, reports and build errors
/// show; launches keep their own names in profiles.
///
/// Line structure is kept (a comment becomes nothing, the line stays), so
/// a build log's line numbers point into the readable source too.
#pragma once

#include <string>
#include <string_view>

namespace fusec::codegen {

/// The entry point of every canonical program whose source does not
/// already use this identifier.
inline constexpr std::string_view kCanonicalEntry = "fusec_kernel";

struct CanonicalProgram {
  std::string text;   ///< what is compiled and hashed
  std::string entry;  ///< the kernel's name in `text`
};

/// The canonical form of `source`, whose kernel is `kernelName`. Comments
/// are removed as the C preprocessor sees them (after line splicing);
/// string and character literals are kept as they are.
CanonicalProgram canonicalProgram(std::string_view source, std::string_view kernelName);

}  // namespace fusec::codegen
