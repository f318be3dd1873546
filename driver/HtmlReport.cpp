/// The HTML report; see Report.h. Everything on the page is generated here:
/// the graph's layout by Graphviz (`dot -Tsvg`, run from an argument vector
/// in a private folder, with a time limit), the roofline chart as SVG drawn
/// from the target's peak and bandwidth.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>

#include "fusec/driver/Report.h"
#include "fusec/codegen/Families.h"
#include "Units.h"
#include "fusec/engine/Process.h"

namespace fusec::driver {
namespace {

std::string html(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

/// A DOT string literal's contents.
std::string dot(std::string_view s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out;
}

/// An HTML id / URL fragment: letters, digits, `_` and `-` only.
std::string anchor(std::string_view s) {
  std::string out;
  for (char ch : s) out += std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ? ch : '_';
  return out;
}

/// Each kernel family's colour (its spec's, codegen/FamilyRegistry.h); a
/// group no family built is grey.
codegen::FamilyColour familyColour(const std::string& family) {
  const codegen::CodegenFamily* f = codegen::findFamily(family);
  return f ? f->colour() : codegen::FamilyColour{};
}

/// The graph in DOT: nodes by group, fused groups as clusters.
std::string graphDot(const Compiled& c) {
  const Graph& g = c.graph;
  std::map<NodeRef, std::string> id;
  size_t k = 0;
  for (NodeRef n : g.nodes()) id[n] = fmt::format("n{}", k++);
  std::string out = "digraph fusec {\n  rankdir=TB; bgcolor=\"transparent\"; nodesep=0.25; ranksep=0.3;\n"
                    "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10, "
                    "fillcolor=\"#ffffff\", height=0.3];\n  edge [color=\"#777777\", arrowsize=0.6];\n";
  auto nodeLine = [&](NodeRef n, const std::string& fill, const std::string& rule) {
    const NodeData& d = g.node(n);
    std::string type;
    if (!d.outputs.empty() && d.outputs[0] != kNoValue) type = g.value(d.outputs[0]).type.str();
    return fmt::format("    {} [label=\"{}\", tooltip=\"{} ({}) {}\", fillcolor=\"{}\"{}];\n", id[n], dot(d.op.str()),
                       dot(d.name), dot(d.op.str()), dot(type), fill,
                       rule.empty() ? "" : ", URL=\"#rule-" + anchor(rule) + "\"");
  };
  for (const Group& grp : c.plan.groups) {
    const codegen::FamilyColour colour = familyColour(grp.kernel);
    const std::string rule = grp.rule ? grp.rule->name : "";
    if (grp.nodes.size() < 2) {
      for (NodeRef n : grp.nodes) out += nodeLine(n, std::string(colour.fill), "");
      continue;
    }
    out += fmt::format("  subgraph cluster_{} {{\n    id=\"group_{}\"; label=\"{}\\n{}\"; tooltip=\"{}: rule {}\"; "
                       "URL=\"#rule-{}\"; style=\"filled,rounded\"; fillcolor=\"{}\"; color=\"{}\"; penwidth=1.6; "
                       "fontname=\"Helvetica\"; fontsize=10; fontcolor=\"{}\";\n",
                       grp.id, anchor(grp.name), dot(grp.name), dot(grp.kernel), dot(grp.name), dot(rule), anchor(rule),
                       colour.fill, colour.line, colour.line);
    for (NodeRef n : grp.nodes) out += nodeLine(n, "#ffffff", rule);
    out += "  }\n";
  }
  // Nodes outside any group (a plan without fusion).
  if (c.plan.groups.empty())
    for (NodeRef n : g.nodes()) out += nodeLine(n, "#ffffff", "");
  std::map<ValueId, std::string> inputs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value& v = g.value(g.inputs()[i]);
    inputs[g.inputs()[i]] = fmt::format("in{}", i);
    out += fmt::format("  in{} [shape=ellipse, style=filled, fillcolor=\"#fff7d6\", label=\"{}\\n{}\"];\n", i, dot(v.name),
                       dot(v.type.str()));
  }
  for (NodeRef n : g.nodes())
    for (ValueId v : g.node(n).inputs) {
      if (v == kNoValue) continue;
      if (auto p = g.producer(v)) out += fmt::format("  {} -> {};\n", id[*p], id[n]);
      else if (inputs.count(v)) out += fmt::format("  {} -> {};\n", inputs[v], id[n]);
    }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.value(g.outputs()[i]);
    out += fmt::format("  out{} [shape=ellipse, style=filled, fillcolor=\"#fff7d6\", label=\"{}\\n{}\"];\n", i,
                       dot(v.name), dot(v.type.str()));
    if (auto p = g.producer(g.outputs()[i])) out += fmt::format("  {} -> out{};\n", id[*p], i);
  }
  return out + "}\n";
}

/// The drawing, or a paragraph saying why there is none.
std::string graphSvg(const Compiled& c, const HtmlOptions& options) {
  if (c.graph.numNodes() > options.maxGraphNodes)
    return fmt::format("<p class=note>The graph has {} nodes, more than the {} drawn.</p>", c.graph.numNodes(),
                       options.maxGraphNodes);
  const PrivateDir dir("fusec-html");
  if (dir.path().empty()) return "<p class=note>No private temporary folder for Graphviz: the graph is not drawn.</p>";
  const auto in = dir.path() / "graph.dot", svg = dir.path() / "graph.svg", log = dir.path() / "log.txt";
  {
    std::ofstream f(in, std::ios::binary);
    f << graphDot(c);
  }
  const int status = runProgram({"dot", "-Tsvg", "-o", svg.string(), in.string()}, log, options.dotTimeoutSeconds);
  if (status != 0)
    return "<p class=note>Graphviz's <code>dot</code> did not draw the graph (" +
           html(status < 0 ? "not found, killed, or past its time limit" : readWholeFile(log)) + ").</p>";
  std::string text = readWholeFile(svg);
  // Inline: from the <svg> element on (no XML prolog or doctype).
  const size_t start = text.find("<svg");
  return start == std::string::npos ? std::string("<p class=note>dot wrote no SVG.</p>") : text.substr(start);
}

/// The groups on the target's roofline: x arithmetic intensity (FLOP per
/// DRAM byte), y GFLOP/s, both log scale; estimates filled, measurements hollow.
std::string rooflineSvg(const Compiled& c, const Target& target, const HtmlOptions& options) {
  const double peak = target.peakFlopsFp32 / 1e9, bandwidth = target.dramBandwidth / 1e9;  // GFLOP/s, GB/s
  struct Point {
    std::string name, family;
    double intensity, gflops;
    bool measured;
  };
  std::vector<Point> points;
  size_t movement = 0;
  for (const Group& grp : c.plan.groups) {
    const Estimate& e = grp.estimate;
    if (e.flops <= 0 || e.bytes <= 0 || e.seconds <= 0) {
      ++movement;
      continue;
    }
    points.push_back({grp.name, grp.kernel, e.flops / e.bytes, e.flops / e.seconds / 1e9, false});
    if (auto m = options.measuredSeconds.find(grp.name); m != options.measuredSeconds.end() && m->second > 0)
      points.push_back({grp.name, grp.kernel, e.flops / e.bytes, e.flops / m->second / 1e9, true});
  }
  if (peak <= 0 || bandwidth <= 0) return "<p class=note>The target profile gives no peak or bandwidth.</p>";
  double xlo = peak / bandwidth / 10, xhi = peak / bandwidth * 10, ylo = peak / 1000, yhi = peak * 2;
  for (const Point& p : points) {
    xlo = std::min(xlo, p.intensity / 2), xhi = std::max(xhi, p.intensity * 2);
    ylo = std::min(ylo, p.gflops / 2), yhi = std::max(yhi, p.gflops * 2);
  }
  const double W = 760, H = 440, left = 70, right = 20, top = 20, bottom = 50;
  auto X = [&](double v) { return left + (std::log10(v) - std::log10(xlo)) / (std::log10(xhi) - std::log10(xlo)) * (W - left - right); };
  auto Y = [&](double v) { return H - bottom - (std::log10(v) - std::log10(ylo)) / (std::log10(yhi) - std::log10(ylo)) * (H - top - bottom); };
  std::string out = fmt::format("<svg class=roofline xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                "viewBox=\"0 0 {} {}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n",
                                W, H, W, H);
  // Decade grid lines and labels.
  for (double d = std::pow(10, std::floor(std::log10(xlo))); d <= xhi; d *= 10)
    if (d >= xlo)
      out += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/><text x=\"{0:.1f}\" "
                         "y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
                         X(d), top, H - bottom, H - bottom + 15, d);
  for (double d = std::pow(10, std::floor(std::log10(ylo))); d <= yhi; d *= 10)
    if (d >= ylo)
      out += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#eee\"/><text x=\"{3}\" "
                         "y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
                         left, Y(d), W - right, left - 6, Y(d) + 4, d);
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", left, top,
                     W - left - right, H - top - bottom);
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">arithmetic intensity (FLOP per DRAM byte)</text>\n",
                     (left + W - right) / 2, H - 12);
  out += fmt::format("<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">GFLOP/s</text>\n",
                     (top + H - bottom) / 2);
  // The roof: bandwidth-bound up to the ridge, then the peak.
  const double ridge = peak / bandwidth, x0 = std::max(xlo, ylo / bandwidth);
  out += fmt::format("<polyline fill=\"none\" stroke=\"#c0392b\" stroke-width=\"2\" points=\"{:.1f},{:.1f} {:.1f},{:.1f} "
                     "{:.1f},{:.1f}\"><title>roof: {:.3g} GB/s DRAM, {:.3g} GFLOP/s peak</title></polyline>\n",
                     X(x0), Y(x0 * bandwidth), X(ridge), Y(peak), X(xhi), Y(peak), bandwidth, peak);
  out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#c0392b\">{:.3g} GFLOP/s, {:.3g} GB/s ({})</text>\n",
                     X(ridge) + 6, Y(peak) - 6, peak, bandwidth, html(target.name));
  for (const Point& p : points) {
    const codegen::FamilyColour colour = familyColour(p.family);
    out += fmt::format("<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\" stroke=\"{}\" "
                       "stroke-width=\"1.5\"><title>{} ({}): {:.3g} FLOP/B, {:.3g} GFLOP/s {}</title></circle>\n",
                       p.measured ? "measured" : "estimated", X(p.intensity), Y(p.gflops), p.measured ? 5 : 4,
                       p.measured ? "none" : colour.line, colour.line, html(p.name), html(p.family), p.intensity,
                       p.gflops, p.measured ? "measured" : "estimated");
  }
  out += "</svg>\n";
  if (movement)
    out += fmt::format("<p class=note>{} group(s) move data without arithmetic and are not on the chart.</p>", movement);
  return out;
}

const char* kStyle = R"(
body { font: 14px/1.45 Helvetica, Arial, sans-serif; margin: 24px 32px; color: #222; max-width: 1400px; }
h1 { font-size: 20px; margin-bottom: 4px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; } td, th { padding: 3px 10px; text-align: left; border-bottom: 1px solid #eee; }
th { background: #f6f6f6; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #777; font-style: italic; } .legend span { display: inline-block; padding: 1px 8px; margin: 2px 4px 2px 0;
border: 1.5px solid; border-radius: 4px; font-size: 12px; } .graph { overflow: auto; border: 1px solid #eee; max-height: 900px; }
tr:target { background: #fff3b0; } code { font-size: 12px; } #rendered { color: #2f6ea8; }
)";

}  // namespace

std::string htmlReport(const Compiled& c, const ReportContext& context, const RuleSet& rules, const Target& target,
                       const HtmlOptions& options) {
  const Estimate &imported = c.imported, &rewritten = c.plan.before, &fused = c.plan.after;
  size_t fusedGroups = 0;
  std::set<std::string> families;
  for (const Group& grp : c.plan.groups) {
    fusedGroups += grp.nodes.size() > 1;
    if (!grp.kernel.empty()) families.insert(grp.kernel);
  }
  std::string packs;
  for (const std::string& p : context.packs) packs += (packs.empty() ? "" : ", ") + p;
  std::string out = "<!doctype html>\n<html lang=en><head><meta charset=utf-8>\n<title>fusec: " + html(context.model) +
                    "</title>\n<style>" + kStyle + "</style></head><body>\n";
  out += fmt::format("<h1>fusec: {} for {}</h1>\n<p>packs: {}</p>\n", html(context.model), html(context.target),
                     html(packs));
  out += "<table><tr><th></th><th class=num>imported</th><th class=num>rewritten</th><th class=num>fused</th></tr>\n";
  auto row = [&](const char* what, const std::string& a, const std::string& b, const std::string& f) {
    out += fmt::format("<tr><td>{}</td><td class=num>{}</td><td class=num>{}</td><td class=num>{}</td></tr>\n", what, a, b, f);
  };
  row("kernels", std::to_string(imported.kernels), std::to_string(rewritten.kernels), std::to_string(fused.kernels));
  row("DRAM traffic", human(imported.bytes, "B"), human(rewritten.bytes, "B"), human(fused.bytes, "B"));
  row("FLOPs", human(imported.flops, "FLOP"), human(rewritten.flops, "FLOP"), human(fused.flops, "FLOP"));
  row("time (est.)", seconds(imported.seconds), seconds(rewritten.seconds), seconds(fused.seconds));
  row("energy (est.)", human(imported.joules, "J"), human(rewritten.joules, "J"), human(fused.joules, "J"));
  out += "</table>\n";

  out += fmt::format("<h2 id=graph>Graph: {} fused groups</h2>\n<p id=rendered data-expected=\"{}\">(the fused groups "
                     "are boxed; each links to its rule)</p>\n<p class=legend>",
                     fusedGroups, fusedGroups);
  for (const std::string& f : families) {
    const codegen::FamilyColour colour = familyColour(f);
    out += fmt::format("<span style=\"background:{};border-color:{}\">{}</span>", colour.fill, colour.line, html(f));
  }
  out += "</p>\n<div class=graph>" + graphSvg(c, options) + "</div>\n";

  out += "<h2 id=roofline>Roofline</h2>\n<p>Each group at its arithmetic intensity and the speed the cost model "
         "expects (filled)" +
         std::string(options.measuredSeconds.empty() ? "" : " and the speed measured (hollow)") +
         "; the red line is the target's roof.</p>\n" + rooflineSvg(c, target, options);

  // Rules: rewrites that fired, fusion rules with candidates.
  const std::map<std::string, std::pair<size_t, size_t>> fusions = fusionCounts(c.plan);  // rule -> (chosen, candidates)
  std::map<std::string, std::string> firstRefusal;
  for (const Candidate& cand : c.plan.candidates)
    if (cand.status != Candidate::Status::Chosen && !cand.why.empty()) firstRefusal.emplace(cand.rule->name, cand.why);
  out += "<h2 id=rules>Rules</h2>\n<table><tr><th>rule</th><th>kind</th><th>where</th><th class=num>fired / chosen</th>"
         "<th class=num>candidates</th><th>a reason one was not chosen</th></tr>\n";
  for (const Rule& r : rules.rules) {
    const bool fusion = r.kind == Rule::Kind::Fusion;
    auto fired = c.rewrites.fired.find(r.name);
    auto f = fusions.find(r.name);
    if (!fusion && fired == c.rewrites.fired.end()) continue;
    if (fusion && f == fusions.end()) continue;
    auto why = firstRefusal.find(r.name);
    out += fmt::format("<tr id=\"rule-{}\"><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td class=num>{}"
                       "</td><td class=num>{}</td><td>{}</td></tr>\n",
                       anchor(r.name), html(r.name), fusion ? "fusion" : "rewrite", html(r.loc.str()),
                       fusion ? f->second.first : fired->second, fusion ? std::to_string(f->second.second) : "",
                       why == firstRefusal.end() ? "" : html(why->second));
  }
  out += "</table>\n";

  // Top kernels: by measured time when there is one, else by estimate.
  std::vector<const Group*> groups;
  for (const Group& grp : c.plan.groups) groups.push_back(&grp);
  auto timeOf = [&](const Group* grp) {
    auto m = options.measuredSeconds.find(grp->name);
    return m != options.measuredSeconds.end() ? m->second : grp->estimate.seconds;
  };
  std::stable_sort(groups.begin(), groups.end(), [&](auto* a, auto* b) { return timeOf(a) > timeOf(b); });
  const bool measured = !options.measuredSeconds.empty();
  out += fmt::format("<h2 id=kernels>Top kernels ({})</h2>\n<table><tr><th>kernel</th><th>family</th><th>rule</th>"
                     "<th>ops</th><th class=num>est.</th>{}<th class=num>FLOPs</th><th class=num>DRAM</th>"
                     "<th class=num>FLOP/B</th></tr>\n",
                     measured ? "by measured time" : "by estimated time",
                     measured ? "<th class=num>measured</th><th class=num>of roof</th>" : "");
  for (size_t i = 0; i < groups.size() && i < 20; ++i) {
    const Group& grp = *groups[i];
    std::string ops;
    for (size_t k = 0; k < grp.nodes.size() && k < 6; ++k) ops += (k ? " " : "") + c.graph.node(grp.nodes[k]).op.str();
    if (grp.nodes.size() > 6) ops += fmt::format(" ... ({})", grp.nodes.size());
    std::string measuredCells;
    if (measured) {
      auto m = options.measuredSeconds.find(grp.name);
      if (m == options.measuredSeconds.end() || m->second <= 0) {
        measuredCells = "<td class=num></td><td class=num></td>";
      } else {
        const double intensity = grp.estimate.bytes > 0 ? grp.estimate.flops / grp.estimate.bytes : 0;
        const double roof = std::min(target.peakFlopsFp32, target.dramBandwidth * intensity);
        const double rate = grp.estimate.flops / m->second;
        // Data movement: its share of the bandwidth roof.
        const double fraction = roof > 0 && grp.estimate.flops > 0 ? rate / roof
                                : target.dramBandwidth > 0 ? grp.estimate.bytes / m->second / target.dramBandwidth
                                                           : 0;
        measuredCells = fmt::format("<td class=num>{}</td><td class=num>{:.0f}%</td>", seconds(m->second), 100 * fraction);
      }
    }
    out += fmt::format("<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=num>{}</td>{}<td "
                       "class=num>{}</td><td class=num>{}</td><td class=num>{:.3g}</td></tr>\n",
                       html(grp.name), html(grp.kernel),
                       grp.rule ? "<a href=\"#rule-" + anchor(grp.rule->name) + "\">" + html(grp.rule->name) + "</a>" : "",
                       html(ops), seconds(grp.estimate.seconds), measuredCells, human(grp.estimate.flops, "FLOP"),
                       human(grp.estimate.bytes, "B"), grp.estimate.bytes > 0 ? grp.estimate.flops / grp.estimate.bytes : 0.0);
  }
  out += "</table>\n";
  // Says how many group boxes the browser drew (and the tests read it).
  out += R"(<script>
(function () {
  var drawn = 0;
  document.querySelectorAll('.graph g.cluster').forEach(function (g) { var b = g.getBBox(); if (b.width > 0 && b.height > 0) drawn++; });
  var p = document.getElementById('rendered');
  p.textContent = drawn + ' of ' + p.dataset.expected + ' fused groups drawn; each box links to the rule that formed it.';
  p.dataset.drawn = drawn;
})();
</script>
</body></html>
)";
  return out;
}

}  // namespace fusec::driver
