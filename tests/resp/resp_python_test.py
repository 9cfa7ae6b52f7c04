#!/usr/bin/python3
"""tallyd's RESP front called by clients tally did not write: Python's redis
(Debian's python3-redis) for the commands, raw sockets for bytes no client
library would send.

Usage: resp_python_test.py TALLYD

Starts one tallyd on 127.0.0.1 (ports chosen by the kernel) with a RESP
password, small RESP limits, a policy directory and a connection cap; runs
every case, stops tallyd, and prints 'N passed, M failed'. Exit status 0 only
when every case passed. Every socket has a timeout; the whole run is bounded.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

import redis

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import cases as cases_lib  # noqa: E402

PASSWORD = "correct horse"
MAX_CONNECTIONS = 16
FRAME_TIMEOUT_MS = 400
POLICY = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2, name: per_user}
"""


class Node(cases_lib.Process):
    """One tallyd with a RESP port, on run-time ports."""

    def __init__(self, tallyd, root):
        self.root = root
        policy_dir = os.path.join(root, "policies")
        os.makedirs(policy_dir)
        with open(os.path.join(policy_dir, "api.yaml"), "w") as f:
            f.write(POLICY)
        password_file = os.path.join(root, "resp.password")
        with open(password_file, "w") as f:
            f.write(PASSWORD + "\n")
        os.chmod(password_file, 0o600)
        port_file = os.path.join(root, "resp.port")
        self.log_path = os.path.join(root, "tallyd.log")
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [tallyd, "--memory-only", "--address", "127.0.0.1", "--port", "0",
             "--resp-port", "0", "--resp-port-file", port_file,
             "--resp-password-file", password_file, "--resp-max-bulk-bytes", "1024",
             "--resp-max-args", "64", "--policy-dir", policy_dir,
             "--max-connections", str(MAX_CONNECTIONS),
             "--frame-timeout-ms", str(FRAME_TIMEOUT_MS)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("tallyd did not start: " + self.log_text())
            time.sleep(0.01)
        self.port = int(open(port_file).read())

    def client(self, password=PASSWORD):
        return redis.Redis(host="127.0.0.1", port=self.port, password=password,
                           socket_timeout=5, socket_connect_timeout=5)

    def raw(self):
        """A socket that has authenticated."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(PASSWORD), PASSWORD.encode()))
        assert recv_until_closed_or(s, b"\r\n") == b"+OK\r\n"
        return s



def recv_until_closed_or(s, end=None):
    """What the server sends until it closes the connection, or until the
    bytes end with `end`."""
    data = b""
    while end is None or not data.endswith(end):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def decision(reply):
    """TALLY.CHECK's and TALLY.POLICY's RESP2 reply (name, value pairs) as a dict."""
    return {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}


def main():
    tallyd = sys.argv[1]
    root = tempfile.mkdtemp(prefix="tally-resp-py-")
    node = None
    passed, failed = 0, 0
    try:
        node = Node(tallyd, root)
        r = node.client()

        def case_auth_is_required():
            try:
                node.client(password=None).ping()
                raise AssertionError("PING without AUTH passed")
            except redis.exceptions.AuthenticationError as e:
                assert "Authentication required" in str(e), e
            try:
                node.client(password="wrong").ping()
                raise AssertionError("a wrong password passed")
            except redis.exceptions.ResponseError as e:  # redis-py 4.3 maps no WRONGPASS
                assert str(e).startswith("WRONGPASS invalid username-password pair"), e
            assert r.ping() is True

        def case_cl_throttle_as_redis_cell():
            # redis-cell's README example, then the burst to its end.
            assert r.execute_command("CL.THROTTLE", "user123", 15, 30, 60) == [0, 16, 15, -1, 2]
            for remaining in range(14, -1, -1):
                reply = r.execute_command("CL.THROTTLE", "user123", 15, 30, 60, 1)
                assert reply[:3] == [0, 16, remaining] and reply[3] == -1, reply
            limited = r.execute_command("CL.THROTTLE", "user123", 15, 30, 60)
            # one token every 2 s: denied, retry within 2 s, full again within 32 s
            assert limited[:3] == [1, 16, 0] and 1 <= limited[3] <= 2 and limited[4] <= 32, limited
            peek = r.execute_command("CL.THROTTLE", "user123", 15, 30, 60, 0)
            assert peek[0] == 0 and peek[3] == -1, peek  # a peek is never limited
            never = r.execute_command("CL.THROTTLE", "user123", 15, 30, 60, 17)
            assert never[0] == 1 and never[3] == -1, never  # more than the burst: no wait helps

        def case_tally_check():
            for remaining in (2, 1, 0):
                d = decision(r.execute_command("TALLY.CHECK", "py:k", "sliding_counter", 3,
                                               3_600_000))
                assert d["allowed"] == 1 and d["limit"] == 3 and d["remaining"] == remaining, d
            d = decision(r.execute_command("TALLY.CHECK", "py:k", "sliding_counter", 3, 3_600_000))
            assert d["allowed"] == 0 and d["retry_after_ms"] > 0 and d["never_allowed"] == 0, d
            try:
                r.execute_command("TALLY.CHECK", "py:k", "sliding_counter", "three", 3_600_000)
                raise AssertionError("a non-numeric limit passed")
            except redis.exceptions.ResponseError as e:
                assert "not an integer" in str(e), e

        def case_tally_policy():
            first = decision(r.execute_command("TALLY.POLICY", "api", "user", "ann", "HITS", 2))
            assert first["allowed"] == 1 and first["remaining"] == 0, first
            assert first["kind"] == b"limited" and first["rule"] == b"per_user", first
            second = decision(r.execute_command("TALLY.POLICY", "api", "user", "ann"))
            assert second["allowed"] == 0 and second["retry_after_ms"] > 0, second
            other = decision(r.execute_command("TALLY.POLICY", "web", "user", "ann"))
            assert other["allowed"] == 1 and other["kind"] == b"no_limit", other

        def case_pipelined():
            pipe = r.pipeline(transaction=False)
            for i in range(200):
                pipe.execute_command("CL.THROTTLE", "pipe", 99, 100, 3600)
            replies = pipe.execute()
            assert [reply[2] for reply in replies[:100]] == list(range(99, -1, -1))
            assert all(reply[0] == 1 for reply in replies[100:]), replies[100]

        def case_unknown_command_keeps_the_connection():
            try:
                r.execute_command("SET", "a", "b")
                raise AssertionError("SET passed")
            except redis.exceptions.ResponseError as e:
                assert "unknown command 'SET'" in str(e), e
            assert r.echo("still here") == b"still here"
            assert r.execute_command("SELECT", 0) is True

        def case_info():
            info = r.info()
            assert info["total_commands_processed"] > 0 and info["keys"] > 0, info
            assert r.info("stats")["resp_throttled"] >= 1
            r.client_setname("pytest")
            assert r.client_getname() == "pytest"

        def case_bad_bytes_close_only_their_connection():
            bad = [
                b"PING\r\n",                                 # inline
                b"*1\r\n*1\r\n$4\r\nPING\r\n",               # nested array
                b"*1\r\n$2000\r\n",                          # bulk over --resp-max-bulk-bytes
                b"*99999999999\r\n",                         # absurd array count
                b"*-7\r\n",                                  # negative count
                b"*1\r\n$4\r\nPINGxx\r\n",                   # length mismatch
                b"*1\r\n:12\r\n",                            # not a bulk string
            ]
            for payload in bad:
                s = node.raw()
                s.sendall(payload)
                reply = recv_until_closed_or(s)
                assert reply.startswith(b"-ERR Protocol error"), (payload, reply)
                s.close()
            assert r.ping() is True

        def case_half_sent_command_times_out():
            s = node.raw()
            s.sendall(b"*2\r\n$4\r\nECHO\r\n$10\r\nab")
            started = time.monotonic()
            assert recv_until_closed_or(s) == b""  # closed without an answer
            waited = time.monotonic() - started
            assert FRAME_TIMEOUT_MS / 1000 * 0.8 <= waited < 5, waited
            assert r.ping() is True

        def case_flood_of_connections():
            # One at a time, each answered before the next, so that the cap
            # counts every earlier one.
            flood = []
            refused = 0
            for _ in range(MAX_CONNECTIONS + 8):
                s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = recv_until_closed_or(s, b"\r\n")
                if reply == b"-ERR max number of clients reached\r\n":
                    refused += 1
                else:
                    assert reply == b"-NOAUTH Authentication required.\r\n", reply
                flood.append(s)
            assert refused >= 8, refused
            assert r.ping() is True  # a client connected before the flood is served
            for s in flood:
                s.close()
            deadline = time.monotonic() + 5
            while True:  # the cap frees as the flood's connections close
                try:
                    assert node.client().ping() is True
                    break
                except (redis.exceptions.ConnectionError, AssertionError):
                    assert time.monotonic() < deadline
                    time.sleep(0.05)

        cases = [case_auth_is_required, case_cl_throttle_as_redis_cell, case_tally_check,
                 case_tally_policy, case_pipelined, case_unknown_command_keeps_the_connection,
                 case_info, case_bad_bytes_close_only_their_connection,
                 case_half_sent_command_times_out, case_flood_of_connections]
        passed, failed = cases_lib.run(cases)
        assert node.process.poll() is None, "tallyd died"
        r.close()
    finally:
        status = cases_lib.finish(node, root, passed, failed)
    return status


if __name__ == "__main__":
    sys.exit(main())
