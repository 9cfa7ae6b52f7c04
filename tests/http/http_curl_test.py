#!/usr/bin/python3
"""tallyd's HTTP front and admin port, asked by curl (and by raw sockets for
what curl will not send): checks by policy and by explicit limit, exact
RateLimit headers on 200 and 429, bad input, slow and idle clients, stats,
and /readyz while a node waits for its peers.

Usage: http_curl_test.py TALLYD TALLYCTL

Each tallyd runs on 127.0.0.1 with ports chosen by the kernel and is
stopped at the end; every socket and request has a timeout.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from prometheus_client.parser import text_string_to_metric_families

from tally_http import Node, curl, run_cases

HOUR_S = 3600


def raw_exchange(port, data, timeout=5):
    """Sends `data` on a new connection and reads until tallyd closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return received.decode("utf-8", "replace")
            received += chunk


def main():
    tallyd, tallyctl = sys.argv[1], sys.argv[2]
    root = tempfile.mkdtemp(prefix="tally-http-")
    node = Node(tallyd, os.path.join(root, "a"),
                extra=["--memory-only", "--frame-timeout-ms", "1000", "--idle-timeout-ms", "3000",
                       "--http-max-header-bytes", "4096", "--http-max-body-bytes", "8192"])
    http_port = node.ports["http"]

    def case_policy_get_allows_then_429_with_exact_headers():
        url = node.url("/v1/policy?domain=edge&remote_address=10.0.0.1")
        first, second, third = curl(url), curl(url), curl(url)
        assert (first.status, second.status, third.status) == (200, 200, 429), \
            (first.status, second.status, third.status)
        for answer, remaining in ((first, 1), (second, 0), (third, 0)):
            reset = int(answer.header("X-RateLimit-Reset"))
            assert 0 < reset <= HOUR_S, reset
            assert answer.header("RateLimit-Policy") == '"per_ip";q=2;w=3600', answer.headers
            assert answer.header("RateLimit") == f'"per_ip";r={remaining};t={reset}', answer.headers
            assert answer.header("X-RateLimit-Limit") == "2"
            assert answer.header("X-RateLimit-Remaining") == str(remaining)
            assert answer.header("Content-Type") == "application/json"
        assert first.header("Retry-After") is None
        # A fixed window's denial passes when the window resets.
        assert third.header("Retry-After") == third.header("X-RateLimit-Reset"), third.headers
        body = json.loads(third.body)
        assert body["allowed"] is False and body["descriptors"][0]["rule"] == "per_ip", body
        assert body["descriptors"][0]["retry_after_ms"] > 0

    def case_policy_post_shares_the_counter_and_auth_says_403():
        request = {"domain": "edge",
                   "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.2"}],
                                    "hits_addend": 2}]}
        answer = curl(node.url("/v1/policy"), "-H", "Content-Type: application/json",
                      "--data-binary", json.dumps(request))
        assert answer.status == 200 and answer.header("X-RateLimit-Remaining") == "0", \
            (answer.status, answer.headers)
        denied = curl(node.url("/v1/auth?domain=edge&remote_address=10.0.0.2"))
        assert denied.status == 403 and denied.header("Retry-After") is not None, denied.headers
        blocked = curl(node.url("/v1/policy?domain=edge&blocked=yes"))
        assert blocked.status == 403 and blocked.header("Retry-After") is None, blocked.headers

    def case_shadow_mode_answers_200_and_says_so():
        url = node.url("/v1/policy?domain=edge&trial=t1")
        assert curl(url).status == 200
        answer = curl(url)
        assert answer.status == 200, answer.status
        assert answer.header("Tally-Shadow-Denied") == "1", answer.headers
        assert json.loads(answer.body)["shadow_denied"] is True

    def case_explicit_limit_post_and_get():
        spec = {"key": "api:42", "algorithm": "fixed_window", "limit": 1, "window_ms": 3_600_000}
        allowed = curl(node.url("/v1/check"), "--data-binary", json.dumps(spec))
        assert allowed.status == 200, (allowed.status, allowed.body)
        assert allowed.header("RateLimit-Policy") == '"api:42";q=1;w=3600', allowed.headers
        denied = curl(node.url("/v1/check?key=api:42&algorithm=fixed_window&limit=1"
                               "&window_ms=3600000"))
        assert denied.status == 429 and int(denied.header("Retry-After")) > 0, denied.headers
        body = json.loads(denied.body)
        assert body["allowed"] is False and body["key"] == "api:42" and body["limit"] == 1, body

    def case_bad_json_unknown_domain_bad_limit_are_400_with_json():
        for answer in (curl(node.url("/v1/check"), "--data-binary", "{oops"),
                       curl(node.url("/v1/policy?domain=nope&a=b")),
                       curl(node.url("/v1/check?key=k&limit=1&window_ms=0")),
                       curl(node.url("/v1/check?key=k&algorithm=lol&limit=1&window_ms=10"))):
            assert answer.status == 400, (answer.status, answer.body)
            assert "error" in json.loads(answer.body)
        assert curl(node.url("/v2/anything")).status == 404
        assert curl(node.url("/v1/check"), "-X", "DELETE").status == 405

    def case_malformed_request_line_is_400_and_closed():
        answer = raw_exchange(http_port, b"HELLO WORLD\r\n\r\n")
        assert answer.startswith("HTTP/1.1 400 Bad Request\r\n"), answer
        assert "Connection: close" in answer

    def case_huge_headers_are_431_huge_bodies_413():
        big = curl(node.url("/v1/check"), "-H", "X-Big: " + "a" * 5000)
        assert big.status == 431, big.status
        body_path = os.path.join(root, "body.json")
        with open(body_path, "w") as f:
            f.write('{"key":"' + "k" * 20000 + '"}')
        huge = curl(node.url("/v1/check"), "--data-binary", "@" + body_path)
        assert huge.status == 413, huge.status

    def case_pipelined_requests_answered_in_order():
        requests = b"".join(
            f"GET /v1/check?key=pipe&limit=100&window_ms=3600000&cost={cost} HTTP/1.1\r\n"
            f"Host: x\r\n\r\n".encode() for cost in (1, 2, 3))
        answer = raw_exchange(http_port, requests + b"GET /v1/check HTTP/1.1\r\n"
                              b"Connection: close\r\n\r\n")
        remainings = [line.split(": ")[1] for line in answer.split("\r\n")
                      if line.startswith("X-RateLimit-Remaining")]
        assert remainings == ["99", "97", "94"], remainings
        assert answer.count("HTTP/1.1 ") == 4 and answer.rstrip().endswith("}"), answer

    def case_slowloris_is_closed_others_served():
        with socket.create_connection(("127.0.0.1", http_port), timeout=5) as slow:
            started = time.monotonic()
            slow.sendall(b"GET /v1/check?key=slow HTTP/1.1\r\n")
            closed = False
            while time.monotonic() - started < 5:
                assert curl(node.url("/v1/check?key=fast&limit=100000&window_ms=3600000"),
                            timeout=2).status == 200
                try:
                    slow.sendall(b"X: y\r\n")
                    if slow.recv(1, socket.MSG_DONTWAIT) == b"":
                        closed = True
                        break
                except BlockingIOError:
                    pass
                except OSError:
                    closed = True
                    break
                time.sleep(0.1)
            elapsed = time.monotonic() - started
            assert closed and elapsed < 3, f"closed={closed} after {elapsed:.1f} s"

    def case_many_idle_keepalive_connections_others_served():
        idle = []
        try:
            for _ in range(1000):
                sock = socket.create_connection(("127.0.0.1", http_port), timeout=5)
                idle.append(sock)
            for sock in idle[:200]:  # some have had an answer and wait on keep-alive
                sock.sendall(b"GET /v1/policy?domain=edge&trial=idle HTTP/1.1\r\n\r\n")
            for sock in idle[:200]:
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            answer = curl(node.url("/v1/check?key=busy&limit=10&window_ms=3600000"), timeout=2)
            assert answer.status == 200 and time.monotonic() - started < 1
            # The idle timeout (3 s) closes them all.
            for sock in idle:
                sock.settimeout(6)
                assert sock.recv(1) == b""
        finally:
            for sock in idle:
                sock.close()

    def case_stats_count_the_http_front():
        stats = json.loads(subprocess.run(
            [tallyctl, "--port", str(node.ports["port"]), "--json", "stats"],
            capture_output=True, check=True, timeout=10).stdout)
        assert stats["http_requests"] > 20, stats
        assert stats["http_allowed"] > 0 and stats["http_denied"] > 0, stats
        assert stats["http_refused"] >= 8, stats
        assert stats["shadow_denied"] >= 1, stats

    def case_admin_healthz_readyz_metrics_on_a_ready_node():
        assert curl(node.url("/healthz", "admin")).body == "ok\n"
        ready = curl(node.url("/readyz", "admin"))
        assert (ready.status, ready.body) == (200, "ready\n"), (ready.status, ready.body)
        # /metrics as a Prometheus server reads it: prometheus_client's parser (Debian's
        # python3-prometheus-client), with the checks this run made by front.
        metrics = curl(node.url("/metrics", "admin"))
        assert metrics.status == 200, metrics.status
        assert metrics.header("content-type").startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(metrics.body)}
        assert families["tally_ready"].samples[0].value == 1
        checks = [s for s in families["tally_checks"].samples if s.name == "tally_checks_total"]
        by_front = {s.labels["front"] for s in checks if s.value > 0}
        assert "http" in by_front, checks
        latency = [s for s in families["tally_decision_duration_seconds"].samples
                   if s.name.endswith("_count") and s.labels["front"] == "http"]
        assert latency and latency[0].value > 0, latency
        assert families["tally_keys"].samples[0].value >= 1

    def case_readyz_is_503_while_waiting_for_peers():
        # A seed that never answers and a long recovery: the client port stays shut, the admin
        # port says why.
        secret = os.path.join(root, "secret")
        with open(secret, "w") as f:
            f.write("0123456789abcdef0123456789abcdef")
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        seed = f"127.0.0.1:{closed.getsockname()[1]}"
        waiting = Node(tallyd, os.path.join(root, "waiting"), wait_for=("admin",),
                       extra=["--memory-only", "--seed", seed, "--cluster-secret-file", secret,
                              "--gossip-port", "0", "--recovery-timeout-ms", "60000"])
        try:
            assert curl(waiting.url("/healthz", "admin")).status == 200
            ready = curl(waiting.url("/readyz", "admin"))
            assert ready.status == 503, ready.status
            # What it waits for, in the start-up's own words (no seed answers).
            assert ready.body.startswith("not ready: joining"), ready.body
            assert not os.path.exists(os.path.join(waiting.root, "port.port"))
        finally:
            waiting.process.kill()
            waiting.process.wait()
            waiting.log.close()
            closed.close()

    cases = [case_policy_get_allows_then_429_with_exact_headers,
             case_policy_post_shares_the_counter_and_auth_says_403,
             case_shadow_mode_answers_200_and_says_so,
             case_explicit_limit_post_and_get,
             case_bad_json_unknown_domain_bad_limit_are_400_with_json,
             case_malformed_request_line_is_400_and_closed,
             case_huge_headers_are_431_huge_bodies_413,
             case_pipelined_requests_answered_in_order,
             case_slowloris_is_closed_others_served,
             case_many_idle_keepalive_connections_others_served,
             case_stats_count_the_http_front,
             case_admin_healthz_readyz_metrics_on_a_ready_node,
             case_readyz_is_503_while_waiting_for_peers]

    def stop():
        node.stop()
        shutil.rmtree(root, ignore_errors=True)

    return run_cases(cases, stop)


if __name__ == "__main__":
    sys.exit(main())
