"""What the HTTP process tests share: a tallyd on run-time loopback ports with
a policy directory, curl as the client (a client tally did not write), and a
runner that prints 'N passed, M failed'."""
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import cases as cases_lib  # noqa: E402

POLICY_PATH = os.path.join(os.path.dirname(__file__), "edge_policy.yaml")


def wait_for_file(path, process, log_path, timeout=10):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) or not open(path).read().strip():
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"tallyd did not write {path}: " + open(log_path).read())
        time.sleep(0.01)
    return int(open(path).read())


class Node(cases_lib.Process):
    """One tallyd with the policy of edge_policy.yaml, an HTTP front and an admin port.
    `wait_for` names the port files to wait for (the client port's is written
    only once the node is ready)."""

    def __init__(self, tallyd, root, extra=(), wait_for=("port", "http", "admin")):
        self.root = root
        policy_dir = os.path.join(root, "policies")
        os.makedirs(policy_dir, exist_ok=True)
        shutil.copyfile(POLICY_PATH, os.path.join(policy_dir, "edge.yaml"))
        self.log_path = os.path.join(root, "tallyd.log")
        self.log = open(self.log_path, "w")
        files = {name: os.path.join(root, name + ".port") for name in ("port", "http", "admin")}
        for path in files.values():
            if os.path.exists(path):
                os.remove(path)
        self.process = subprocess.Popen(
            [tallyd, "--address", "127.0.0.1", "--port", "0", "--port-file", files["port"],
             "--http-port", "0", "--http-port-file", files["http"],
             "--admin-port", "0", "--admin-port-file", files["admin"],
             "--policy-dir", policy_dir] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        self.ports = {name: wait_for_file(files[name], self.process, self.log_path)
                      for name in wait_for}

    def url(self, path, port="http"):
        return f"http://127.0.0.1:{self.ports[port]}{path}"


class Answer:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        return self.headers.get(name.lower())


def curl(url, *args, timeout=10):
    """One request with curl; the last answer's status, headers (lower-case
    names; a repeated name keeps its last value) and body."""
    result = subprocess.run(["curl", "-sS", "-i", "--max-time", str(timeout)] + list(args) + [url],
                            capture_output=True, timeout=timeout + 5)
    if result.returncode != 0:
        raise AssertionError(f"curl {url} failed: {result.stderr.decode()}")
    raw = result.stdout.decode("utf-8", "replace")
    # Interim answers (100 Continue) come first; the last head is the answer.
    blocks = raw.split("\r\n\r\n")
    head_index = 0
    while blocks[head_index].startswith("HTTP/1.1 100"):
        head_index += 1
    head = blocks[head_index].split("\r\n")
    body = "\r\n\r\n".join(blocks[head_index + 1:])
    status = int(re.match(r"HTTP/1\.[01] (\d{3})", head[0]).group(1))
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(status, headers, body)


def run_cases(cases, stop):
    """Runs every case (cases_lib.run), then `stop`; prints the tally. The exit status."""
    try:
        passed, failed = cases_lib.run(cases)
    finally:
        stop()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1
