#include "node/bin/help_format.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace tally::bin {
namespace {

// A section's name and its options.
using Section = std::pair<std::string, std::vector<const CLI::Option*>>;

// `app`'s options by section: those of `order` first, then the other groups as
// CLI11 meets them. Sections without options, and options in no group, are
// left out.
std::vector<Section> Sections(const CLI::App& app, const std::vector<std::string>& order) {
  std::vector<std::string> names = order;
  for (const std::string& group : app.get_groups()) {
    if (std::find(names.begin(), names.end(), group) == names.end()) names.push_back(group);
  }
  std::vector<Section> sections;
  for (const std::string& name : names) {
    if (name.empty()) continue;
    std::vector<const CLI::Option*> options = app.get_options([&name](const CLI::Option* option) {
      return option->get_group() == name && option->nonpositional();
    });
    if (!options.empty()) sections.emplace_back(name, std::move(options));
  }
  return sections;
}

// --help: CLI11's own format, the sections in order.
class SectionFormatter : public CLI::Formatter {
 public:
  explicit SectionFormatter(std::vector<std::string> order) : order_(std::move(order)) {}

  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode /*mode*/) const override {
    std::string help = make_description(app) + make_usage(app, name);
    for (const auto& [section, options] : Sections(*app, order_)) {
      help += make_group(section, false, options);
    }
    return help + "\n" + make_footer(app);
  }

 private:
  std::vector<std::string> order_;
};

// `text` in a Markdown table cell: `|` would end the cell, `*` may start
// emphasis.
std::string Cell(const std::string& text) {
  std::string cell;
  for (const char c : text) {
    if (c == '|' || c == '*') cell += '\\';
    cell += c;
  }
  return cell;
}

// `text` as code, or nothing when it is empty.
std::string Code(const std::string& text) { return text.empty() ? "" : "`" + text + "`"; }

// "`-h`, `--help`"
std::string Names(const CLI::Option& option) {
  std::vector<std::string> names;
  for (const std::string& name : option.get_snames()) names.push_back(Code("-" + name));
  for (const std::string& name : option.get_lnames()) names.push_back(Code("--" + name));
  return CLI::detail::join(names, ", ");
}

// Whether the option takes no value (--sync, --help).
bool IsFlag(const CLI::Option& option) { return option.get_expected_max() == 0; }

// The default as --help shows it; "off" for a flag one may set.
std::string Default(const CLI::Option& option) {
  if (!option.get_default_str().empty()) return Code(option.get_default_str());
  return IsFlag(option) && option.get_configurable() ? "off" : "";
}

// The values the option takes, as its validators describe them ("0..65535",
// "{off,psk,cert}"): what --help shows after the type.
std::string Range(const CLI::Option& option) {
  if (IsFlag(option)) return "";
  const std::string type = option.get_type_name();
  const size_t colon = type.find(':');
  std::string range = colon == std::string::npos ? "" : type.substr(colon + 1);
  if (option.get_items_expected_max() > 1) range += range.empty() ? "a list" : ", a list";
  return range;
}

// --help-format markdown: a table per section.
class MarkdownFormatter : public CLI::FormatterBase {
 public:
  explicit MarkdownFormatter(std::vector<std::string> order) : order_(std::move(order)) {}

  std::string make_help(const CLI::App* app, std::string /*name*/,
                        CLI::AppFormatMode /*mode*/) const override {
    std::ostringstream out;
    for (const auto& [section, options] : Sections(*app, order_)) {
      out << "\n## " << section << "\n\n"
          << "| option | variable | TOML key | default | range | what |\n"
          << "| --- | --- | --- | --- | --- | --- |\n";
      for (const CLI::Option* option : options) {
        const std::string key = option->get_configurable() ? option->get_lnames().front() : "";
        out << "| " << Names(*option) << " | " << Code(option->get_envname()) << " | " << Code(key)
            << " | " << Default(*option) << " | " << Cell(Range(*option)) << " | "
            << Cell(option->get_description()) << " |\n";
      }
    }
    return out.str();
  }

 private:
  std::vector<std::string> order_;
};

}  // namespace

void AddHelpFormats(CLI::App* app, std::vector<std::string> sections) {
  app->formatter(std::make_shared<SectionFormatter>(sections));
  app->add_option_function<std::string>(
         "--help-format",
         [app, sections](const std::string& format) {
           if (format == "markdown") app->formatter(std::make_shared<MarkdownFormatter>(sections));
           throw CLI::CallForHelp();
         },
         "Print this help and exit: text, or markdown (docs/configuration.md's tables)")
      ->check(CLI::IsMember({"text", "markdown"}))
      ->configurable(false)
      ->trigger_on_parse();
}

}  // namespace tally::bin
