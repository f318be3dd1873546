/// Einsum equations resolved against operand shapes; see Einsum.h.
#include "fusec/engine/Einsum.h"

#include <map>

namespace fusec {

Expected<EinsumGeometry> einsumGeometry(const std::string& equation, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  if (eq.empty()) return Error{"attribute `equation` is required"};
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != shapes.size())
    return Error{"equation has " + std::to_string(terms.size()) + " operands but the node has " +
                 std::to_string(shapes.size())};
  // "..." becomes letters '0'.. that cannot clash with the equation's own.
  size_t ellipsisRank = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    if (terms[t].find("...") == std::string::npos) continue;
    const int64_t letters = static_cast<int64_t>(terms[t].size()) - 3;
    if (static_cast<int64_t>(shapes[t].size()) < letters)
      return Error{"operand " + std::to_string(t) + " has rank " + std::to_string(shapes[t].size()) +
                   " but the equation gives it " + std::to_string(letters) + " indices and an ellipsis"};
    ellipsisRank = std::max<size_t>(ellipsisRank, shapes[t].size() - static_cast<size_t>(letters));
  }
  auto expand = [&](std::string term, size_t rank) {
    const size_t pos = term.find("...");
    if (pos == std::string::npos) return term;
    std::string dots;
    for (size_t i = ellipsisRank - rank; i < ellipsisRank; ++i) dots += static_cast<char>('0' + i);
    return term.replace(pos, 3, dots);
  };
  std::map<char, int64_t> sizes;
  std::map<char, int> counts;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Shape& x = shapes[t];
    const size_t pos = terms[t].find("...");
    const size_t rank = pos == std::string::npos ? 0 : x.size() - (terms[t].size() - 3);
    terms[t] = expand(terms[t], rank);
    if (terms[t].size() != x.size())
      return Error{"operand " + std::to_string(t) + " has rank " + std::to_string(x.size()) +
                   " but the equation gives it " + std::to_string(terms[t].size()) + " indices"};
    for (size_t d = 0; d < terms[t].size(); ++d) {
      const char c = terms[t][d];
      ++counts[c];
      auto [it, fresh] = sizes.emplace(c, x[d]);
      if (fresh || it->second == x[d]) continue;
      if (c >= '0' && c <= '9' && (it->second == 1 || x[d] == 1)) it->second = std::max(it->second, x[d]);
      else
        return Error{std::string("index `") + c + "` has sizes " + std::to_string(it->second) + " and " +
                     std::to_string(x[d])};
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    if (out.find("...") != std::string::npos) out = expand(out, ellipsisRank);
  } else {  // implicit: the ellipsis, then letters used once, alphabetically
    for (size_t i = 0; i < ellipsisRank; ++i) out += static_cast<char>('0' + i);
    for (auto [c, n] : counts)
      if (n == 1 && !(c >= '0' && c <= '9')) out += c;
  }
  for (char c : out)
    if (!sizes.count(c)) return Error{std::string("output index `") + c + "` does not appear in any operand"};
  EinsumGeometry geo;
  geo.letters = out;
  geo.outputRank = out.size();
  for (auto [c, n] : sizes)
    if (out.find(c) == std::string::npos) geo.letters += c;
  for (char c : geo.letters) geo.sizes.push_back(sizes[c]);
  for (size_t t = 0; t < terms.size(); ++t) {
    const Shape own = stridesOf(shapes[t]);
    Shape s(geo.letters.size(), 0);
    for (size_t d = 0; d < terms[t].size(); ++d)
      if (shapes[t][d] != 1) s[geo.letters.find(terms[t][d])] += own[d];  // a repeated letter walks the diagonal
    geo.strides.push_back(std::move(s));
  }
  return geo;
}

}  // namespace fusec
