#include "node/resp/resp_session.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "node/common/version.h"

namespace tally {
namespace {

using protocol::AppendArrayHeader;
using protocol::AppendBulkString;
using protocol::AppendInteger;
using protocol::AppendMapHeader;
using protocol::AppendNull;
using protocol::AppendSimpleString;

// Arguments quoted back in an error are cut to this many bytes.
constexpr size_t kQuotedBytes = 128;
// Scratch kept between commands; a huge command's is freed once answered.
constexpr size_t kKeptArgs = 64;

// What COMMAND, COMMAND INFO and COMMAND DOCS say of each command (arity as
// Redis counts it: negative means at least that many, the name included).
struct CommandDoc {
  std::string_view name;
  int arity;
  std::string_view flags;  // space-separated
  int first_key;
  std::string_view summary;
};
constexpr CommandDoc kCommands[] = {
    {"cl.throttle", -5, "write fast", 1, "redis-cell's GCRA rate limit on tally's token bucket"},
    {"tally.check", -5, "write fast", 1, "decides a check with an explicit limit"},
    {"tally.policy", -4, "write fast", 0, "decides a descriptor under the node's policies"},
    {"ping", -1, "fast", 0, "returns PONG, or the argument"},
    {"echo", 2, "fast", 0, "returns the argument"},
    {"hello", -1, "noauth fast", 0, "chooses RESP2 or RESP3, authenticates, names"},
    {"auth", -2, "noauth fast", 0, "authenticates the connection"},
    {"client", -2, "fast", 0, "SETNAME, GETNAME, ID, SETINFO"},
    {"command", -1, "", 0, "describes the commands"},
    {"info", -1, "", 0, "the node's state and counters"},
    {"select", 2, "fast", 0, "selects database 0, the only one"},
    {"quit", -1, "noauth fast", 0, "closes the connection"},
};

const CommandDoc* FindCommand(std::string_view name) {
  for (const CommandDoc& doc : kCommands) {
    if (EqualsIgnoreCase(doc.name, name)) return &doc;
  }
  return nullptr;
}

void AppendCommandInfo(const CommandDoc& doc, std::string* out) {
  AppendArrayHeader(10, out);
  AppendBulkString(doc.name, out);
  AppendInteger(doc.arity, out);
  const size_t flags =
      doc.flags.empty() ? 0 : std::count(doc.flags.begin(), doc.flags.end(), ' ') + 1;
  AppendArrayHeader(flags, out);
  for (size_t start = 0; start < doc.flags.size();) {
    const size_t end = std::min(doc.flags.find(' ', start), doc.flags.size());
    AppendSimpleString(doc.flags.substr(start, end - start), out);
    start = end + 1;
  }
  AppendInteger(doc.first_key, out);  // first key
  AppendInteger(doc.first_key, out);  // last key
  AppendInteger(doc.first_key, out);  // key step
  for (int i = 0; i < 4; ++i)
    AppendArrayHeader(0, out);  // ACL categories, tips, key specs, subcommands
}

std::string Quoted(std::string_view text) {
  std::string quoted(1, '\'');
  quoted.append(text.substr(0, kQuotedBytes)).push_back('\'');
  return quoted;
}

}  // namespace

bool ParseInt64(std::string_view text, int64_t* value) {
  const auto result = std::from_chars(text.data(), text.data() + text.size(), *value);
  return !text.empty() && result.ec == std::errc() && result.ptr == text.data() + text.size();
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return (x >= 'A' && x <= 'Z' ? x - 'A' + 'a' : x) == (y >= 'A' && y <= 'Z' ? y - 'A' + 'a' : y);
  });
}

RespSession::RespSession(const SessionContext& context, const Shared& shared, uint64_t client_id)
    : peer_(context.peer),
      log_(context.log),
      shared_(shared),
      client_id_(client_id),
      authenticated_(shared.options->password.empty()) {}

StreamProgress RespSession::Answer(std::span<const std::byte> received, std::string* out) {
  StreamProgress progress;
  const std::string_view bytes(reinterpret_cast<const char*>(received.data()), received.size());
  while (progress.consumed_bytes < bytes.size() && !progress.close) {
    const protocol::RespCommandParse parse = protocol::ParseCommand(
        bytes.substr(progress.consumed_bytes), shared_.options->limits, &args_);
    if (parse.state == protocol::RespCommandParse::State::kNeedMore) {
      progress.wanted_bytes = parse.wanted_bytes;
      break;
    }
    if (parse.state == protocol::RespCommandParse::State::kInvalid) {
      log_->Warn("closing RESP connection from " + peer_ + ": " + parse.error_message);
      Error("ERR Protocol error: " + parse.error_message, out);
      progress.close = true;
      break;
    }
    progress.consumed_bytes += parse.consumed_bytes;
    if (args_.empty()) continue;  // *0 or *-1: nothing to answer, as in Redis
    RespFront::Counters::Add(shared_.counters->commands, 1);
    progress.close = !Dispatch(args_, out);
  }
  DecideQueued(out);  // the keys are views into `received`: decided before it changes
  return progress;
}

void RespSession::Refuse(StreamRefusal, std::string_view message, std::string* out) {
  Error("ERR " + std::string(message), out);
}

void RespSession::TrimMemory() {
  if (args_.capacity() > kKeptArgs) std::vector<std::string_view>().swap(args_);
  if (entries_.capacity() > kKeptArgs) std::vector<DescriptorEntry>().swap(entries_);
}

bool RespSession::Dispatch(Args args, std::string* out) {
  const std::string_view name = args[0];
  if (authenticated_ && EqualsIgnoreCase(name, "CL.THROTTLE")) {
    Throttle(args, out);
    return true;
  }
  if (authenticated_ && EqualsIgnoreCase(name, "TALLY.CHECK")) {
    Check(args, out);
    return true;
  }
  DecideQueued(out);  // every reply below comes after those of the checks before it
  const bool always_allowed = EqualsIgnoreCase(name, "AUTH") || EqualsIgnoreCase(name, "HELLO") ||
                              EqualsIgnoreCase(name, "QUIT");
  if (!authenticated_ && !always_allowed) {
    Error("NOAUTH Authentication required.", out);
  } else if (EqualsIgnoreCase(name, "TALLY.POLICY")) {
    PolicyCheck(args, out);
  } else if (EqualsIgnoreCase(name, "PING")) {
    if (args.size() > 2) {
      WrongArity("ping", out);
    } else if (args.size() == 1) {
      AppendSimpleString("PONG", out);
    } else {
      AppendBulkString(args[1], out);
    }
  } else if (EqualsIgnoreCase(name, "ECHO")) {
    if (args.size() != 2) {
      WrongArity("echo", out);
    } else {
      AppendBulkString(args[1], out);
    }
  } else if (EqualsIgnoreCase(name, "HELLO")) {
    Hello(args, out);
  } else if (EqualsIgnoreCase(name, "AUTH")) {
    Auth(args, out);
  } else if (EqualsIgnoreCase(name, "CLIENT")) {
    Client(args, out);
  } else if (EqualsIgnoreCase(name, "COMMAND")) {
    Command(args, out);
  } else if (EqualsIgnoreCase(name, "INFO")) {
    Info(args, out);
  } else if (EqualsIgnoreCase(name, "SELECT")) {
    int64_t db = 0;
    if (args.size() != 2) {
      WrongArity("select", out);
    } else if (!ParseInt64(args[1], &db)) {
      Error("ERR value is not an integer or out of range", out);
    } else if (db != 0) {
      Error("ERR DB index is out of range", out);
    } else {
      AppendSimpleString("OK", out);
    }
  } else if (EqualsIgnoreCase(name, "QUIT")) {
    AppendSimpleString("OK", out);
    return false;
  } else {
    std::string message = "ERR unknown command " + Quoted(name) + ", with args beginning with: ";
    for (size_t i = 1; i < args.size() && i <= 8; ++i) message += Quoted(args[i]) + " ";
    Error(message, out);
  }
  return true;
}

void RespSession::Error(std::string_view text, std::string* out) {
  DecideQueued(out);
  AppendErrorReply(text, out);
}

void RespSession::AppendErrorReply(std::string_view text, std::string* out) {
  RespFront::Counters::Add(shared_.counters->errors, 1);
  protocol::AppendError(text, out);
}

void RespSession::WrongArity(std::string_view name, std::string* out) {
  Error("ERR wrong number of arguments for '" + std::string(name) + "' command", out);
}

void RespSession::Hello(Args args, std::string* out) {
  int64_t version = resp_version_;
  if (args.size() >= 2 && !ParseInt64(args[1], &version)) {
    return Error("ERR Protocol version is not an integer or out of range", out);
  }
  if (version != 2 && version != 3) return Error("NOPROTO unsupported protocol version", out);
  std::string_view user, password, name;
  bool auth = false, setname = false;
  for (size_t i = 2; i < args.size(); ++i) {
    if (EqualsIgnoreCase(args[i], "AUTH") && i + 2 < args.size()) {
      auth = true;
      user = args[i + 1];
      password = args[i + 2];
      i += 2;
    } else if (EqualsIgnoreCase(args[i], "SETNAME") && i + 1 < args.size()) {
      setname = true;
      name = args[++i];
    } else {
      return Error("ERR Syntax error in HELLO option " + Quoted(args[i]), out);
    }
  }
  if (auth) {
    if (Status status = CheckPassword(user, password); !status.ok()) {
      return Error(status.message(), out);
    }
    authenticated_ = true;
  }
  if (!authenticated_) {
    return Error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
        "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
        "select the RESP protocol version at the same time",
        out);
  }
  resp_version_ = static_cast<int>(version);
  if (setname) name_ = name;
  AppendMapHeader(7, resp_version_, out);
  AppendBulkString("server", out);
  AppendBulkString("tally", out);
  AppendBulkString("version", out);
  AppendBulkString(Version(), out);
  AppendBulkString("proto", out);
  AppendInteger(resp_version_, out);
  AppendBulkString("id", out);
  AppendInteger(static_cast<int64_t>(client_id_), out);
  AppendBulkString("mode", out);
  AppendBulkString("standalone", out);
  AppendBulkString("role", out);
  AppendBulkString("master", out);
  AppendBulkString("modules", out);
  AppendArrayHeader(0, out);
}

void RespSession::Auth(Args args, std::string* out) {
  if (args.size() != 2 && args.size() != 3) return WrongArity("auth", out);
  if (shared_.options->password.empty()) {
    return Error(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?",
        out);
  }
  const std::string_view user = args.size() == 3 ? args[1] : "default";
  if (Status status = CheckPassword(user, args.back()); !status.ok()) {
    return Error(status.message(), out);
  }
  authenticated_ = true;
  AppendSimpleString("OK", out);
}

Status RespSession::CheckPassword(std::string_view user, std::string_view password) const {
  // Compares every byte whatever the first difference, so that the time
  // taken says nothing about how much of a guess was right.
  const std::string& expected = shared_.options->password;
  unsigned char differ = password.size() == expected.size() && !expected.empty() ? 0 : 1;
  for (size_t i = 0; !expected.empty() && i < password.size(); ++i) {
    differ |= static_cast<unsigned char>(password[i] ^ expected[i % expected.size()]);
  }
  if (differ != 0 || user != "default") {
    return Status::InvalidArgument("WRONGPASS invalid username-password pair or user is disabled.");
  }
  return Status::OK();
}

void RespSession::Client(Args args, std::string* out) {
  if (args.size() < 2) return WrongArity("client", out);
  const std::string_view sub = args[1];
  if (EqualsIgnoreCase(sub, "SETNAME") && args.size() == 3) {
    if (std::any_of(args[2].begin(), args[2].end(), [](char c) { return c <= ' ' || c > '~'; })) {
      return Error("ERR Client names cannot contain spaces, newlines or special characters.", out);
    }
    name_ = args[2];
    AppendSimpleString("OK", out);
  } else if (EqualsIgnoreCase(sub, "GETNAME") && args.size() == 2) {
    if (name_.empty()) return AppendNull(resp_version_, out);
    AppendBulkString(name_, out);
  } else if (EqualsIgnoreCase(sub, "ID") && args.size() == 2) {
    AppendInteger(static_cast<int64_t>(client_id_), out);
  } else if (EqualsIgnoreCase(sub, "SETINFO") && args.size() == 4) {
    if (!EqualsIgnoreCase(args[2], "LIB-NAME") && !EqualsIgnoreCase(args[2], "LIB-VER")) {
      return Error("ERR Unrecognized option " + Quoted(args[2]), out);
    }
    AppendSimpleString("OK", out);
  } else {
    Error("ERR unknown subcommand or wrong number of arguments for " + Quoted(sub) +
              ". Try CLIENT SETNAME, GETNAME, ID or SETINFO.",
          out);
  }
}

void RespSession::Command(Args args, std::string* out) {
  if (args.size() == 1) {
    AppendArrayHeader(std::size(kCommands), out);
    for (const CommandDoc& doc : kCommands) AppendCommandInfo(doc, out);
  } else if (EqualsIgnoreCase(args[1], "COUNT") && args.size() == 2) {
    AppendInteger(static_cast<int64_t>(std::size(kCommands)), out);
  } else if (EqualsIgnoreCase(args[1], "INFO")) {
    AppendArrayHeader(args.size() - 2, out);
    for (size_t i = 2; i < args.size(); ++i) {
      const CommandDoc* doc = FindCommand(args[i]);
      doc == nullptr ? AppendNull(resp_version_, out) : AppendCommandInfo(*doc, out);
    }
  } else if (EqualsIgnoreCase(args[1], "DOCS")) {
    std::vector<const CommandDoc*> docs;
    for (const CommandDoc& doc : kCommands) {
      const bool asked = args.size() == 2 ||
                         std::any_of(args.begin() + 2, args.end(), [&doc](std::string_view name) {
                           return EqualsIgnoreCase(name, doc.name);
                         });
      if (asked) docs.push_back(&doc);
    }
    AppendMapHeader(docs.size(), resp_version_, out);
    for (const CommandDoc* doc : docs) {
      AppendBulkString(doc->name, out);
      AppendMapHeader(3, resp_version_, out);
      AppendBulkString("summary", out);
      AppendBulkString(doc->summary, out);
      AppendBulkString("since", out);
      AppendBulkString(Version(), out);
      AppendBulkString("group", out);
      AppendBulkString(doc->name.find('.') == std::string_view::npos ? "connection" : "module",
                       out);
    }
  } else {
    Error("ERR unknown subcommand " + Quoted(args[1]) + ". Try COMMAND, COMMAND COUNT, " +
              "COMMAND INFO or COMMAND DOCS.",
          out);
  }
}

void RespSession::Info(Args args, std::string* out) {
  auto wanted = [&args](std::string_view section) {
    if (args.size() == 1) return true;
    return std::any_of(args.begin() + 1, args.end(), [section](std::string_view asked) {
      return EqualsIgnoreCase(asked, section) || EqualsIgnoreCase(asked, "all") ||
             EqualsIgnoreCase(asked, "everything") || EqualsIgnoreCase(asked, "default");
    });
  };
  const protocol::StatsReply stats = *shared_.stats ? (*shared_.stats)() : protocol::StatsReply();
  std::string text;
  auto field = [&text](std::string_view key, const auto& value) {
    text.append(key).append(":");
    if constexpr (std::is_convertible_v<decltype(value), std::string_view>) {
      text.append(value);
    } else {
      text.append(std::to_string(value));
    }
    text.append("\r\n");
  };
  if (wanted("server")) {
    text += "# Server\r\n";
    field("tally_version", Version());
    field("resp_protocols", "2,3");
    field("process_id", static_cast<int64_t>(getpid()));
    field("uptime_in_seconds", stats.uptime_ms / 1000);
    text += "\r\n";
  }
  if (wanted("clients")) {
    text += "# Clients\r\n";
    field("connected_clients", stats.connections_open);
    field("total_connections_received", stats.connections_total);
    field("client_name", name_.empty() ? std::string_view("-") : std::string_view(name_));
    text += "\r\n";
  }
  if (wanted("stats")) {
    text += "# Stats\r\n";
    field("total_commands_processed", stats.resp_commands);
    field("resp_throttled", stats.resp_throttled);
    field("resp_errors", stats.resp_errors);
    text += "\r\n";
  }
  if (wanted("tally")) {
    text += "# Tally\r\n";
    field("keys", stats.keys);
    field("checks", stats.checks);
    field("allowed", stats.allowed);
    field("denied", stats.denied);
    field("errors", stats.errors);
    field("shadow_denied", stats.shadow_denied);
    field("policy_domains", stats.policy_domains);
    field("policy_rules", stats.policy_rules);
    field("grpc_requests", stats.grpc_requests);
    field("storage_flushes", stats.storage_flushes);
    field("storage_degraded", stats.storage_degraded ? 1 : 0);
    field("members", stats.members.size());
    field("gossip_rounds", stats.gossip_rounds);
    text += "\r\n";
  }
  AppendBulkString(text, out);
}

}  // namespace tally
