// tallyd's help in two formats: text for --help, its options by section, and
// Markdown for docs/configuration.md (--help-format markdown), one table per
// section giving each option's flag, TALLY_* variable, config file key,
// default, range and description. Both come from the options as they are
// added to the CLI::App, so the reference cannot drift from the binary; a
// test compares docs/configuration.md with the Markdown.
//
// A section is an option's CLI11 group. Both formats list the sections named
// first, in that order, then any other in the order CLI11 meets it; within a
// section, the options in the order they were added. Options in no group
// (CLI11's hidden ones) are left out. For apps without subcommands or
// positional arguments.
//
// Thread safety: call from main's thread, before parsing.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tally::bin {

// Makes --help list `app`'s options by section, `sections` first, and adds
// --help-format text|markdown: print the help in that format and exit 0 (a
// command, not configuration: no config key; for no variable, see
// AddEnvironmentNames), in the group option_defaults() gives at the call.
// `app` must outlive its parsing.
void AddHelpFormats(CLI::App* app, std::vector<std::string> sections);

}  // namespace tally::bin
