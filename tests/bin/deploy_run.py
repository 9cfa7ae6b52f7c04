"""Running a tallyd as a deployment file would, on this machine: on
127.0.0.1, ports chosen at run time, files in a temporary directory. Used by
deploy_test.py.
"""
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

# The fronts, by the name the Kubernetes example gives each port, with the
# flag that sets it (the TOML key; TALLY_ + its upper case is the variable).
FRONTS = {"client": "port", "gossip": "gossip-port", "http": "http-port",
          "grpc": "grpc-port", "resp": "resp-port", "admin": "admin-port"}


def env_name(flag):
    return "TALLY_" + flag.upper().replace("-", "_")


def free_port():
    """A loopback port free a moment ago (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2):
    """(status, headers, body); (0, {}, why) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()
    except OSError as error:
        return 0, {}, str(error)


def resp_ping(port):
    """What a RESP PING on the port answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        return s.recv(64).decode(errors="replace")


def accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


class Tallyd:
    """A tallyd started with argv and exactly `env` (no TALLY_* of the
    caller's), logging to root/tallyd.log."""

    def __init__(self, argv, env, root):
        self.log_path = os.path.join(root, "tallyd.log")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
        clean.update(env)
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(argv, env=clean, stdout=log, stderr=subprocess.STDOUT)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, admin_port, timeout=15):
        """True once /readyz answers 200; False when tallyd exits or time is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if http_get(f"http://127.0.0.1:{admin_port}/readyz")[0] == 200:
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def configmap_mount(directory, files):
    """Lays out `files` ({name: text}) as the kubelet mounts a ConfigMap: the
    files in a timestamped directory, ..data pointing at it, and one symlink
    per file through ..data."""
    stamped = os.path.join(directory, "..2026_01_01_00_00_00.000000000")
    os.makedirs(stamped)
    for name, text in files.items():
        with open(os.path.join(stamped, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(stamped, name), 0o644)
    os.symlink(os.path.basename(stamped), os.path.join(directory, "..data"))
    for name in files:
        os.symlink(os.path.join("..data", name), os.path.join(directory, name))
