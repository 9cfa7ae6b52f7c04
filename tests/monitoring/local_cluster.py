"""Three tallyd nodes on 127.0.0.1 with every front on a port chosen at run
time, for the monitoring tests: one node starts the cluster, the others join
through its gossip port. Each node's ports are read from its --*-port-file.
"""
import os
import signal
import subprocess
import time
import urllib.request

FRONTS = ("port", "gossip", "http", "grpc", "resp", "admin")


def wait_for(predicate, timeout, what):
    """Polls predicate() until it is true; raises naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError("timed out waiting for " + what)


def http_get(url, timeout=5):
    """(status, body) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Node:
    def __init__(self, tallyd, root, secret, policy_dir, seed=None):
        self.root = root
        os.makedirs(root)
        self.files = {front: os.path.join(root, front + ".port") for front in FRONTS}
        args = [tallyd, "--address", "127.0.0.1", "--data-dir", os.path.join(root, "data"),
                "--cluster-secret-file", secret, "--policy-dir", policy_dir,
                "--gossip-interval-ms", "50", "--recovery-timeout-ms", "2000"]
        for front in FRONTS:
            flag = "--port" if front == "port" else f"--{front}-port"
            args += [flag, "0", flag + "-file", self.files[front]]
        if seed:
            args += ["--seed", seed]
        self.log_path = os.path.join(root, "tallyd.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.ports = {}

    def read_ports(self, timeout):
        def written():
            if self.process.poll() is not None:
                raise RuntimeError("tallyd exited: " + self.log())
            return all(os.path.exists(f) and open(f).read().strip() for f in self.files.values())
        wait_for(written, timeout, "the ports of " + self.root)
        self.ports = {front: int(open(path).read()) for front, path in self.files.items()}

    def metrics(self):
        return http_get(f"http://127.0.0.1:{self.ports['admin']}/metrics")[1]

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_cluster(tallyd, root, policy_dir, started, nodes=3, timeout=30):
    """Starts `nodes` tallyd processes under root, appending each to
    `started` as it starts (the caller stops them, also when this raises), and
    waits until each is ready and sees every member alive."""
    secret = os.path.join(root, "cluster.secret")
    with open(secret, "w") as f:
        f.write("a secret the monitoring test's nodes share\n")
    os.chmod(secret, 0o600)
    first = Node(tallyd, os.path.join(root, "node1"), secret, policy_dir)
    started.append(first)
    first.read_ports(timeout)
    seed = f"127.0.0.1:{first.ports['gossip']}"
    for n in range(2, nodes + 1):
        started.append(Node(tallyd, os.path.join(root, f"node{n}"), secret, policy_dir, seed))
    for node in started[1:]:
        node.read_ports(timeout)
    alive = f'tally_members{{state="alive"}} {nodes}'
    for node in started:
        wait_for(lambda: alive in node.metrics().splitlines(), timeout,
                 f"{node.root} to see {nodes} members alive")
        wait_for(lambda: http_get(f"http://127.0.0.1:{node.ports['admin']}/readyz")[0] == 200,
                 timeout, node.root + " to be ready")
