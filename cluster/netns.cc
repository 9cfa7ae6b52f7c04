#include "cluster/netns.h"

#include <unistd.h>

#include <filesystem>

#include "cluster/node_process.h"

namespace tally::cluster {
namespace {

constexpr char kIp[] = "/usr/sbin/ip";
constexpr char kNft[] = "/usr/sbin/nft";

}  // namespace

Status NetnsLab::Run(const std::vector<std::string>& argv) {
  std::string output;
  // 2>&1 through sh, so that the error says what the tool said.
  std::string command;
  for (const std::string& arg : argv) command += "'" + arg + "' ";
  const int code = RunCommand({"/bin/sh", "-c", command + "2>&1"}, &output);
  if (code == 0) return Status::OK();
  return Status::Unavailable(command + "failed (" + std::to_string(code) + "): " + output);
}

Status NetnsLab::Available() {
  if (geteuid() != 0) return Status::Unavailable("network namespaces need root");
  for (const char* tool : {kIp, kNft}) {
    if (!std::filesystem::exists(tool)) {
      return Status::Unavailable(std::string(tool) + " is missing (iproute2, nftables)");
    }
  }
  const std::string probe = "tally-probe-" + std::to_string(getpid());
  if (Status status = Run({kIp, "netns", "add", probe}); !status.ok()) return status;
  Status status = Run({kIp, "netns", "exec", probe, kNft, "add", "table", "inet", "probe"});
  static_cast<void>(Run({kIp, "netns", "del", probe}));  // the table goes with it
  return status;
}

Status NetnsLab::Create(size_t nodes, std::unique_ptr<NetnsLab>* lab) {
  std::unique_ptr<NetnsLab> made(new NetnsLab());
  const std::string id = std::to_string(getpid());
  made->bridge_ = "tb" + id;
  made->subnet_prefix_ = "10.77." + std::to_string(getpid() % 250) + ".";
  if (Status status = Run({kIp, "link", "add", made->bridge_, "type", "bridge"}); !status.ok()) {
    return status;
  }
  if (Status status =
          Run({kIp, "addr", "add", made->subnet_prefix_ + "1/24", "dev", made->bridge_});
      !status.ok()) {
    return status;
  }
  if (Status status = Run({kIp, "link", "set", made->bridge_, "up"}); !status.ok()) return status;
  for (size_t node = 0; node < nodes; ++node) {
    const std::string ns = "tally-" + id + "-" + std::to_string(node);
    const std::string veth = "tv" + id + "n" + std::to_string(node);
    const std::string address = made->subnet_prefix_ + std::to_string(node + 2);
    made->namespaces_.push_back(ns);  // the destructor removes what was made
    if (Status status = Run({kIp, "netns", "add", ns}); !status.ok()) return status;
    made->veths_.push_back(veth);
    for (const std::vector<std::string>& step : std::vector<std::vector<std::string>>{
             {kIp, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
             {kIp, "link", "set", veth, "master", made->bridge_},
             {kIp, "link", "set", veth, "up"},
             {kIp, "-n", ns, "addr", "add", address + "/24", "dev", "eth0"},
             {kIp, "-n", ns, "link", "set", "eth0", "up"},
             {kIp, "-n", ns, "link", "set", "lo", "up"},
             {kIp, "netns", "exec", ns, kNft, "add", "table", "inet", "tally"},
             {kIp, "netns", "exec", ns, kNft, "add", "chain", "inet", "tally", "out",
              "{ type filter hook output priority 0; }"}}) {
      if (Status status = Run(step); !status.ok()) return status;
    }
    made->addresses_.push_back(address);
  }
  *lab = std::move(made);
  return Status::OK();
}

NetnsLab::~NetnsLab() {
  for (const std::string& ns : namespaces_) static_cast<void>(Run({kIp, "netns", "del", ns}));
  if (!bridge_.empty()) static_cast<void>(Run({kIp, "link", "del", bridge_}));
}

std::vector<std::string> NetnsLab::Exec(size_t node) const {
  return {kIp, "netns", "exec", namespaces_[node]};
}

Status NetnsLab::Block(size_t from, size_t to) {
  return Run({kIp, "netns", "exec", namespaces_[from], kNft, "add", "rule", "inet", "tally", "out",
              "ip", "daddr", addresses_[to], "drop"});
}

Status NetnsLab::Heal() {
  for (const std::string& ns : namespaces_) {
    if (Status status =
            Run({kIp, "netns", "exec", ns, kNft, "flush", "chain", "inet", "tally", "out"});
        !status.ok()) {
      return status;
    }
  }
  return Status::OK();
}

}  // namespace tally::cluster
