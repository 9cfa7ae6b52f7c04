#include "node/bin/tallyd_options.h"

#include <spdlog/spdlog.h>

namespace tally::tallyd {

std::optional<int> ParseOrExit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    spdlog::error("not starting: {}", e.what());
    return 1;
  }
  return std::nullopt;
}

}  // namespace tally::tallyd
