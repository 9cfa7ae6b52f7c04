#include "cluster/node_process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <sys/prctl.h>
#include <sys/wait.h>

namespace tally::cluster {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Forks and execs argv with stdout and stderr sent to the given files
// (empty: inherit), and no other descriptor of the harness: a node that
// inherited a proxy's socket would keep that connection open after the proxy
// closes it, and a cut path would stay up. Returns the child's pid, or -1.
pid_t ForkExec(const std::vector<std::string>& argv, const std::string& stdout_path,
               const std::string& stderr_path, const std::vector<std::string>& env = {}) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<char*> environment;  // made before fork: the child only execs
  for (char** variable = environ; *variable != nullptr; ++variable) {
    environment.push_back(*variable);
  }
  for (const std::string& variable : env)
    environment.push_back(const_cast<char*>(variable.c_str()));
  environment.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the harness or test
  const auto redirect = [](const std::string& path, int target) {
    if (path.empty()) return;
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, target);
  };
  redirect(stdout_path, STDOUT_FILENO);
  redirect(stderr_path, STDERR_FILENO);
  if (close_range(3, ~0U, 0) != 0) {
    for (int fd = 3; fd < 65'536; ++fd) close(fd);
  }
  execve(args[0], args.data(), environment.data());
  _exit(127);
}

// Waits up to timeout_ms for pid; returns its exit code (128 + signal), or -1.
int WaitFor(pid_t pid, int timeout_ms) {
  const auto deadline = steady_clock::now() + milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (done < 0 || steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Status NodeProcess::Spawn(const Options& options, std::unique_ptr<NodeProcess>* process) {
  std::string directory = options.directory;
  const bool owns_directory = directory.empty();
  if (owns_directory) {
    char directory_template[] = "/tmp/tallyd-XXXXXX";
    if (mkdtemp(directory_template) == nullptr) return Status::IOError("mkdtemp failed");
    directory = directory_template;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(directory, ec);
    if (ec) return Status::IOError("cannot create " + directory + ": " + ec.message());
  }
  for (const char* file : {"/port", "/gossip-port"}) std::filesystem::remove(directory + file);
  std::vector<std::string> argv = options.exec_prefix;
  argv.insert(argv.end(), {options.tallyd_path, "--address", options.address, "--port", "0",
                           "--port-file", directory + "/port", "--threads", "2"});
  if (options.gossip_port) {
    argv.insert(argv.end(), {"--gossip-port", std::to_string(options.gossip_port_number),
                             "--gossip-port-file", directory + "/gossip-port"});
  }
  for (const std::string& front : options.fronts) {
    std::filesystem::remove(directory + "/" + front + "-port");
    argv.insert(argv.end(), {"--" + front + "-port", "0", "--" + front + "-port-file",
                             directory + "/" + front + "-port"});
  }
  const auto given = [&](const std::string& flag) {
    return std::find(options.args.begin(), options.args.end(), flag) != options.args.end();
  };
  if (!given("--data-dir") && !given("--memory-only")) {
    argv.insert(argv.end(), {"--data-dir", directory + "/data"});
  }
  argv.insert(argv.end(), options.args.begin(), options.args.end());
  const pid_t pid = ForkExec(argv, "", directory + "/stderr.log", options.env);
  if (pid < 0) return Status::IOError("fork failed");
  process->reset(new NodeProcess(pid, directory, owns_directory, options.address));
  return Status::OK();
}

Status NodeProcess::Start(const Options& options, std::unique_ptr<NodeProcess>* process,
                          int start_timeout_ms) {
  if (Status status = Spawn(options, process); !status.ok()) return status;
  return (*process)->WaitForPort(start_timeout_ms);
}

Status NodeProcess::WaitForPort(int timeout_ms) { return WaitForFile("port", timeout_ms, &port_); }

Status NodeProcess::WaitForGossipPort(int timeout_ms) {
  return WaitForFile("gossip-port", timeout_ms, &gossip_port_);
}

Status NodeProcess::FrontPort(const std::string& front, int timeout_ms, uint16_t* port) {
  return WaitForFile(front + "-port", timeout_ms, port);
}

Status NodeProcess::WaitForFile(const std::string& name, int timeout_ms, uint16_t* port) {
  const std::string path = directory_ + "/" + name;
  const auto deadline = steady_clock::now() + milliseconds(timeout_ms);
  while (steady_clock::now() < deadline) {
    const std::string text = ReadFile(path);
    if (!text.empty()) {
      *port = static_cast<uint16_t>(std::stoi(text));
      return Status::OK();
    }
    int status = 0;
    if (!reaped_ && waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      return Status::Unavailable("tallyd exited during start: " + Log());
    }
    if (reaped_) return Status::Unavailable("tallyd is not running");
    std::this_thread::sleep_for(milliseconds(5));
  }
  return Status::Unavailable("tallyd wrote no " + name + " file within " +
                             std::to_string(timeout_ms) + " ms");
}

NodeProcess::~NodeProcess() {
  if (!reaped_) {
    kill(pid_, SIGKILL);
    WaitFor(pid_, 5'000);
  }
  std::error_code ignored;
  if (owns_directory_) std::filesystem::remove_all(directory_, ignored);
}

protocol::Client::Options NodeProcess::client_options() const {
  protocol::Client::Options options;
  options.host = address_;
  options.port = port_;
  options.timeout_ms = 5'000;
  return options;
}

Status NodeProcess::Connect(std::unique_ptr<protocol::Client>* client) const {
  return protocol::Client::Connect(client_options(), client);
}

int NodeProcess::SignalAndWait(int signal_number, int timeout_ms) {
  if (reaped_) return -1;
  kill(pid_, signal_number);
  const int code = WaitFor(pid_, timeout_ms);
  reaped_ = code >= 0;
  return code;
}

std::string NodeProcess::Log() const { return ReadFile(directory_ + "/stderr.log"); }

int RunCommand(const std::vector<std::string>& argv, std::string* stdout_text, int timeout_ms) {
  char path_template[] = "/tmp/tally-command-XXXXXX";
  const int fd = mkstemp(path_template);
  if (fd < 0) return -1;
  close(fd);
  const pid_t pid = ForkExec(argv, path_template, "/dev/null");
  const int code = pid < 0 ? -1 : WaitFor(pid, timeout_ms);
  if (pid > 0 && code < 0) {
    kill(pid, SIGKILL);
    WaitFor(pid, 5'000);
  }
  if (stdout_text) *stdout_text = ReadFile(path_template);
  unlink(path_template);
  return code;
}

}  // namespace tally::cluster
