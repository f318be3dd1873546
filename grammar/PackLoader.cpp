/// Pack loading: reads files, parses them, resolves imports depth-first
/// (reporting files that cannot be found and import cycles), then hands the
/// files, dependencies first, to the checker (Sema.cpp).
#include "fusec/grammar/PackLoader.h"

#include <dlfcn.h>

#include <algorithm>
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

  /// Loads a root pack given on the command line: a `.fuse` file, or a
  /// pack folder (every `.fuse` file directly in it, in name order).
  /// A path that does not exist names a pack as an import would, among the
  /// search paths and the shipped rules (`core/ops`, `cnn`, `vendor/npu`).
  void loadRoot(const std::string& name) {
    std::error_code ec;
    std::string path = name;
    if (!fs::exists(path, ec)) {
      std::vector<std::string> dirs;
      for (const fs::path& d : searchDirs({})) dirs.push_back(d.string());
      std::optional<std::string> found = resolvePackPath(name, dirs, /*allowFolder=*/true);
      if (!found) {
        if (loadAlias(name, {})) return;
        diags_.emitError({}, "cannot open `" + name + "`: no such file, nor a pack of that name (a shipped pack is "
                             "named as an import names it, `core/ops` or `cnn`; looked in " + searchedText({}) + ")");
        return;
      }
      path = *found;
    }
    if (!fs::is_directory(path, ec)) {
      load(fs::path(path), {});
      return;
    }
    std::vector<fs::path> files = packFolderFiles(path);
    if (files.empty()) diags_.emitError({}, "pack folder `" + path + "` holds no `.fuse` file");
    for (const fs::path& f : files) load(f, {});
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
      else if (!loadAlias((*imp)->path, (*imp)->range))
        diags_.emitError((*imp)->range, "cannot find pack `" + (*imp)->path + "` (an import is a relative path to a `.fuse` "
                                        "file, without `..`; looked in " + searchedText(path.parent_path()) + ")");
    }
    stack_.pop_back();
    done_.insert(key);
    order_.push_back(file);
  }

  /// A pack renamed in a release keeps its old name for one more: the
  /// packs it became are loaded, with a warning saying what to write.
  bool loadAlias(const std::string& name, SourceRange at) {
    struct Alias {
      const char* old;
      std::vector<std::string> now;
      const char* why;
    };
    static const std::vector<Alias> kAliases = {
        {"core", {"core/ops", "core/rewrites"}, "the op catalog and the core rewrites became two packs"},
    };
    const auto alias = std::find_if(kAliases.begin(), kAliases.end(), [&](const Alias& a) { return name == a.old; });
    if (alias == kAliases.end()) return false;
    std::vector<fs::path> targets;
    for (const std::string& n : alias->now) {
      std::optional<fs::path> found = resolve(n, {});
      if (!found) return false;
      targets.push_back(*found);
    }
    std::string spelled;
    for (const std::string& n : alias->now) spelled += (spelled.empty() ? "" : " and ") + std::string("`import \"") + n + "\"`";
    diags_.emitWarning(at, "pack `" + name + "` is now " + std::to_string(alias->now.size()) + " packs (" + alias->why +
                               "): loading them; write " + spelled + " instead (the old name goes in a later release)");
    for (const fs::path& t : targets) load(t, at);
    return true;
  }

  std::vector<fs::path> searchDirs(const fs::path& importerDir) const {
    std::vector<fs::path> dirs = {importerDir};
    for (const std::string& s : options_.searchPaths) dirs.emplace_back(s);
    return dirs;
  }

  std::optional<fs::path> resolve(const std::string& name, const fs::path& importerDir) const {
    std::vector<std::string> dirs;
    for (const fs::path& d : searchDirs(importerDir)) dirs.push_back(d.string());
    if (auto found = resolvePackPath(name, dirs, /*allowFolder=*/false)) return fs::path(*found);
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

std::vector<fs::path> packFolderFiles(const fs::path& folder) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec))
    if (e.path().extension() == ".fuse" && e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

/// A pack named by a relative path without `..` resolves inside one of the
/// folders, and only to a file (or pack folder) that stays inside that folder
/// once links are followed. Nothing else is read (nor quoted in a message).
std::optional<std::string> resolvePackPath(const std::string& name, const std::vector<std::string>& dirs,
                                           bool allowFolder) {
  const fs::path rel(name);
  if (name.empty() || rel.is_absolute() || rel.has_root_name()) return std::nullopt;
  for (const fs::path& part : rel)
    if (part == "..") return std::nullopt;
  const fs::path file = rel.extension() == ".fuse" ? rel : fs::path(name + ".fuse");
  for (const std::string& d : dirs) {
    const fs::path dir(d);
    std::error_code ec;
    fs::path candidate = dir / file;
    if (!fs::is_regular_file(candidate, ec)) {
      candidate = dir / rel;
      if (!allowFolder || !fs::is_directory(candidate, ec)) continue;
    }
    const fs::path root = fs::weakly_canonical(dir.empty() ? fs::path(".") : dir, ec);
    const fs::path real = fs::weakly_canonical(candidate, ec);
    if (ec) continue;
    const std::string r = root.string(), f = real.string();
    if (f.compare(0, r.size(), r) == 0 && (f.size() == r.size() || f[r.size()] == '/')) return candidate.string();
  }
  return std::nullopt;
}

Expected<std::vector<std::string>> defaultPackPaths(const Target& target) {
  const std::string profileDir = fs::path(target.path).parent_path().string();
  const std::vector<std::string> dirs = {profileDir.empty() ? std::string(".") : profileDir, defaultRulesDir()};
  std::vector<std::string> paths;
  for (const std::string& p : target.defaultPacks) {
    std::optional<std::string> found = resolvePackPath(p, dirs);
    if (!found)
      return Error{target.path + ": error: default pack `" + p + "` not found (a pack is a relative path without `..` "
                   "to a `.fuse` file or a pack folder; looked in `" + dirs[0] + "` and `" + dirs[1] + "`)"};
    paths.push_back(*found);
  }
  return paths;
}

namespace {

/// The shipped rules of an installed fusec, `<prefix>/share/fusec/rules`,
/// found from the file this code was loaded from: `<prefix>/lib/...` for the
/// library, `<prefix>/bin/fusec` when linked in, the Python module under
/// `<prefix>/lib/python3/...`. Empty when not installed.
std::string installedRulesDir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&installedRulesDir), &info) || !info.dli_fname) return {};
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) return {};
  std::filesystem::path dir = self.parent_path();
  for (int up = 0; up < 6 && dir.has_relative_path(); ++up, dir = dir.parent_path()) {
    const std::filesystem::path rules = dir / "share" / "fusec" / "rules";
    if (std::filesystem::is_regular_file(rules / "core" / "ops.fuse", ec)) return rules.string();
  }
  return {};
}

}  // namespace

std::string defaultRulesDir() {
  if (const char* env = std::getenv("FUSEC_RULES_DIR")) return env;
  // Installed, else the source tree this build came from.
  static const std::string installed = installedRulesDir();
  return installed.empty() ? std::string(FUSEC_RULES_DIR) : installed;
}

bool isShippedCatalogFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::equivalent(path, std::filesystem::path(defaultRulesDir()) / "core" / "ops.fuse", ec) && !ec;
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
