/// Pack loading: reads files, parses them, resolves imports depth-first
/// (reporting files that cannot be found and import cycles), then hands the
/// files, dependencies first, to the checker (Sema.cpp).
#include "fusec/grammar/PackLoader.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "Sema.h"
#include "fusec/engine/Files.h"
#include "fusec/grammar/Parser.h"

namespace fusec::grammar {
namespace fs = std::filesystem;
namespace {

class Loader {
 public:
  Loader(SourceManager& sources, ast::AstContext& context, DiagnosticEngine& diags,
         const PackLoadOptions& options)
      : sources_(sources), context_(context), diags_(diags), options_(options) {}

  /// Loads a root file given on the command line.
  void loadRoot(const std::string& path) {
    if (!fs::exists(path)) {
      diags_.emitError({}, "cannot open `" + path + "`: no such file");
      return;
    }
    load(fs::path(path), {});
  }

  /// Loads a root pack given as text.
  void loadText(const std::string& name, const std::string& text) { load(fs::path(name), {}, &text); }

  std::vector<ast::File*>& order() { return order_; }

 private:
  /// Loads a file unless already loaded; returns false on a cycle or error.
  void load(const fs::path& path, SourceRange importedAt, const std::string* text = nullptr) {
    std::error_code ec;
    const std::string key = fs::weakly_canonical(path, ec).string();
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i].first != key) continue;
      std::string chain;
      for (size_t k = i; k < stack_.size(); ++k) chain += "`" + fs::path(stack_[k].first).filename().string() + "` -> ";
      chain += "`" + fs::path(key).filename().string() + "`";
      auto d = diags_.emitError(importedAt, "import cycle: " + chain);
      for (size_t k = i + 1; k < stack_.size(); ++k) d.attachNote(stack_[k].second, "imported here");
      return;
    }
    if (done_.count(key)) return;
    std::string contents;
    if (text) {
      contents = *text;
    } else {
      Expected<std::string> read = readInputFile(path.string(), kMaxPackFileBytes);
      if (!read) {
        diags_.emitError(importedAt, read.error().message);
        return;
      }
      contents = std::move(read.value());
    }
    uint32_t id = sources_.addFile(path.string(), std::move(contents));
    ast::File* file = parseFile(context_, sources_, id, diags_);
    stack_.emplace_back(key, importedAt);
    for (const ast::Item& item : file->items) {
      auto* imp = std::get_if<ast::Import*>(&item);
      if (!imp) continue;
      if (auto target = resolve((*imp)->path, path.parent_path()))
        load(*target, (*imp)->range);
      else
        diags_.emitError((*imp)->range, "cannot find pack `" + (*imp)->path + "` (an import is a relative path to a `.fuse` "
                                        "file, without `..`; looked in " + searchedText(path.parent_path()) + ")");
    }
    stack_.pop_back();
    done_.insert(key);
    order_.push_back(file);
  }

  std::vector<fs::path> searchDirs(const fs::path& importerDir) const {
    std::vector<fs::path> dirs = {importerDir};
    for (const std::string& s : options_.searchPaths) dirs.emplace_back(s);
    return dirs;
  }

  /// An import names a `.fuse` file by a relative path without `..`; it
  /// resolves inside the importer's folder, the search folders or the
  /// shipped rules, and only to a file that stays inside that folder once
  /// links are followed. Nothing else is read (nor quoted in a message).
  std::optional<fs::path> resolve(const std::string& name, const fs::path& importerDir) const {
    const fs::path rel(name);
    if (name.empty() || rel.is_absolute() || rel.has_root_name()) return std::nullopt;
    for (const fs::path& part : rel)
      if (part == "..") return std::nullopt;
    const fs::path file = rel.extension() == ".fuse" ? rel : fs::path(name + ".fuse");
    for (const fs::path& dir : searchDirs(importerDir)) {
      std::error_code ec;
      const fs::path candidate = dir / file;
      if (!fs::is_regular_file(candidate, ec)) continue;
      const fs::path root = fs::weakly_canonical(dir.empty() ? fs::path(".") : dir, ec);
      const fs::path real = fs::weakly_canonical(candidate, ec);
      if (ec) continue;
      const std::string r = root.string(), f = real.string();
      if (f.compare(0, r.size(), r) == 0 && (f.size() == r.size() || f[r.size()] == '/')) return candidate;
    }
    return std::nullopt;
  }

  std::string searchedText(const fs::path& importerDir) const {
    std::string s;
    for (const fs::path& d : searchDirs(importerDir)) s += (s.empty() ? "`" : ", `") + (d.empty() ? std::string(".") : d.string()) + "`";
    return s;
  }

  SourceManager& sources_;
  ast::AstContext& context_;
  DiagnosticEngine& diags_;
  const PackLoadOptions& options_;
  std::vector<std::pair<std::string, SourceRange>> stack_;
  std::set<std::string> done_;
  std::vector<ast::File*> order_;
};

}  // namespace

std::string defaultRulesDir() {
  if (const char* env = std::getenv("FUSEC_RULES_DIR")) return env;
  return FUSEC_RULES_DIR;
}

namespace {

PackLoadResult finish(Loader& loader, SourceManager& sources, DiagnosticEngine& diags, const KernelFamilies* families) {
  PackLoadResult result;
  result.packCount = loader.order().size();
  auto rules = std::make_unique<RuleSet>();
  // Checking a file that did not parse would mostly report echoes of the
  // syntax errors; those come first.
  if (diags.errorCount() == 0) result.ruleCount = checkPacks(loader.order(), sources, diags, families, *rules);
  if (diags.errorCount() == 0) result.rules = std::move(rules);
  return result;
}

PackLoadOptions withShippedRules(PackLoadOptions options) {
  options.searchPaths.push_back(defaultRulesDir());
  return options;
}

}  // namespace

PackLoadResult loadPacks(const std::vector<std::string>& files, SourceManager& sources,
                         ast::AstContext& context, DiagnosticEngine& diags, const PackLoadOptions& options) {
  const PackLoadOptions withRules = withShippedRules(options);
  Loader loader(sources, context, diags, withRules);
  for (const std::string& f : files) loader.loadRoot(f);
  return finish(loader, sources, diags, options.families);
}

PackLoadResult loadPackText(const std::string& name, const std::string& text, SourceManager& sources,
                            ast::AstContext& context, DiagnosticEngine& diags, const PackLoadOptions& options) {
  const PackLoadOptions withRules = withShippedRules(options);
  Loader loader(sources, context, diags, withRules);
  loader.loadText(name, text);
  return finish(loader, sources, diags, options.families);
}

}  // namespace fusec::grammar
