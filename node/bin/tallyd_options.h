// tallyd's start: reading its flags, and the files it reads before it does
// anything else. Whatever is refused is logged as one line,
// "not starting: ...", saying which flag, file or value is wrong, and tallyd
// then exits 1 without having touched its data directory or a port.
//
// Thread safety: call from main's thread, before any other thread starts.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "node/common/status.h"

namespace tally::bin {

// Adds --config to `app`: a TOML file whose keys are the long flags' names
// (`max-keys = 1000`). Flags given and environment variables set override
// the file (see ParseOrExit). The file is refused
// whole, naming the line where known, when a key names no flag of `app`, sits
// in a [section] or is set twice, or when it is over 1 MiB. `app` must
// outlive its parsing.
void AddConfigOption(CLI::App* app);

// Parses argv into the options added to `app`, after giving each its
// environment variable (AddEnvironmentNames, prefix TALLY_: TALLY_CONFIG
// names the config file too). Precedence: command line, then environment,
// then the config file, then the default. Then refuses two ports tallyd
// would listen on (--port; --gossip-port when clustered or set; --grpc-port,
// --http-port, --admin-port, --resp-port when set) set to the same nonzero
// number on addresses that clash (the same one, or a wildcard, 0.0.0.0 or ::,
// beside one of its family), naming both flags: port 0 never clashes.
// Returns nullopt when tallyd goes on; otherwise the exit code: 0 once
// --help is printed, 1 once an error is logged, naming the variable when the
// value came from one (spdlog's default logger must be set up).
std::optional<int> ParseOrExit(CLI::App& app, int argc, char** argv);

// The secret held in the file at `path`, without trailing whitespace; `what`
// names it in errors ("the cluster secret"). The file may be anything that
// reads (a pipe too) but must hold at least min_bytes and at most 4096
// bytes. A read that fails (a directory) is an IOError saying why; a wrong
// size, InvalidArgument. Warns when others than the owner may read the file.
Status ReadSecretFile(const std::string& path, const std::string& what, size_t min_bytes,
                      std::string* secret);
// ReadSecretFile of the cluster secret: at least protocol::kMinSecretBytes.
Status ReadClusterSecret(const std::string& path, std::string* secret);

// What tallyd --version prints: the version, the peer protocol version it
// speaks and the data directory format marker it writes, a line each, e.g.
//   tallyd 0.9.0
//   peer protocol: 2
//   data directory format: tally-4
// (CHANGELOG.md says, per version, which upgrades and downgrades work).
std::string VersionText();

// Writes a bound port to `path` (for --port 0 and its kin) atomically, so a
// reader never sees half a number. False when it cannot be written.
bool WritePortFile(const std::string& path, uint16_t port);

}  // namespace tally::bin
