#!/usr/bin/python3
"""envoyproxy/ratelimit's configuration format, every current key and unit,
through a real tallyd's gRPC front, called by Python's grpcio (a client tally
did not write). The policies are this test's own, written from what
envoyproxy/ratelimit documents and tests for each key.

Usage: rls_format_python_test.py TALLYD PROTO_DIR

Starts one tallyd on 127.0.0.1 (ports chosen by the kernel) with
--policy-merge-domains and --grpc-response-metadata, runs every case, stops
tallyd, and prints 'N passed, M failed'. Exit status 0 only when every case
passed.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import cases as cases_lib  # noqa: E402
import rls_protos  # noqa: E402

FORMAT = """
domain: fmt
descriptors:
  - {key: weekly, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: monthly, rate_limit: {unit: month, requests_per_unit: 1}}
  - {key: yearly, rate_limit: {unit: year, requests_per_unit: 1}}
  # share_threshold: every files/* value on one counter; own/* one counter each
  - {key: files, value: files/*, share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 2}}
  - {key: own, value: own/*, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: path, value: /api/*/action, rate_limit: {unit: hour, requests_per_unit: 1}}
  # quota_mode, with metadata returned for the descriptors within their limits
  - {key: regular, rate_limit: {unit: hour, requests_per_unit: 1}, metadata: {name: regular}}
  - {key: quota_a, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1},
     metadata: {name: service_a, owner: {team: edge}}}
  - {key: quota_b, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 2},
     metadata: {name: service_b, port: 8080, owner: {pager: true}}}
  # shadow_mode covers its own limit, not the one nested below it
  - key: service
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
    descriptors:
      - {key: user, rate_limit: {unit: hour, requests_per_unit: 0}}
  # metric names
  - {key: ip, detailed_metric: true, rate_limit: {unit: hour, requests_per_unit: 100}}
  - key: route
    value_to_metric: true
    descriptors:
      - {key: method, rate_limit: {unit: hour, requests_per_unit: 100}}
"""
MERGE_A = "domain: merged\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 1}}\n"
MERGE_B = "domain: merged\ndescriptors:\n  - {key: b, rate_limit: {unit: minute, requests_per_unit: 2}}\n"

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
DAY_S = 86400


class Node(cases_lib.Process):
    """One tallyd with a policy directory, the gRPC front and the admin port."""

    def __init__(self, tallyd, root):
        self.policy_dir = os.path.join(root, "policies")
        os.makedirs(self.policy_dir)
        for name, text in [("format.yaml", FORMAT), ("merge_a.yaml", MERGE_A), ("merge_b.yaml", MERGE_B)]:
            self.write_policy(name, text)
        self.log_path = os.path.join(root, "tallyd.log")
        self.log = open(self.log_path, "w")
        ports = {front: os.path.join(root, front + ".port") for front in ("grpc", "admin")}
        self.process = subprocess.Popen(
            [tallyd, "--memory-only", "--address", "127.0.0.1", "--port", "0",
             "--grpc-port", "0", "--grpc-port-file", ports["grpc"],
             "--admin-port", "0", "--admin-port-file", ports["admin"],
             "--policy-dir", self.policy_dir, "--policy-poll-ms", "50",
             "--grpc-response-metadata"],
            stdout=self.log, stderr=subprocess.STDOUT,
            env=dict(os.environ, TALLY_POLICY_MERGE_DOMAINS="true"))
        deadline = time.monotonic() + 10
        while not all(os.path.exists(p) and open(p).read().strip() for p in ports.values()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("tallyd did not start: " + open(self.log_path).read())
            time.sleep(0.01)
        self.grpc_port, self.admin_port = (int(open(ports[f]).read()) for f in ("grpc", "admin"))

    def write_policy(self, name, text):
        path = os.path.join(self.policy_dir, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as answer:
            return answer.read().decode()


def main():
    tallyd, proto_dir = sys.argv[1], sys.argv[2]
    root = tempfile.mkdtemp(prefix="tally-rls-format-py-")
    rls_pb2 = rls_protos.generate(proto_dir, root)
    from envoy.type.v3 import ratelimit_unit_pb2  # noqa: E402 (generated above)
    from google.protobuf import json_format  # noqa: E402

    node = None
    passed, failed = 0, 0
    try:
        node = Node(tallyd, root)
        channel = grpc.insecure_channel(f"127.0.0.1:{node.grpc_port}")
        call = channel.unary_unary(METHOD, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                   response_deserializer=rls_pb2.RateLimitResponse.FromString)
        OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
        Unit = rls_pb2.RateLimitResponse.RateLimit

        def request(domain, *descriptors, hits=0):
            message = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits)
            for entries in descriptors:
                descriptor = message.descriptors.add()
                for key, value in entries:
                    descriptor.entries.add(key=key, value=value)
            return message

        def should(message):
            return call(message, timeout=5)

        def codes(response):
            return response.overall_code, [status.code for status in response.statuses]

        def case_week_month_year():
            # envoyproxy/ratelimit's units: 7, 30 and 365 days, windows aligned to the epoch.
            for key, unit, days in [("weekly", Unit.WEEK, 7), ("monthly", Unit.MONTH, 30),
                                    ("yearly", Unit.YEAR, 365)]:
                status = should(request("fmt", [(key, "k")])).statuses[0]
                window_s = days * DAY_S
                expected = window_s - int(time.time()) % window_s
                assert status.code == OK and status.current_limit.unit == unit, (key, status)
                assert abs(status.duration_until_reset.seconds - expected) <= 2, (key, status, expected)
                assert should(request("fmt", [(key, "k")])).overall_code == OVER, key
            # A descriptor's own limit override may name them too.
            message = request("fmt", [("override", "x")])
            message.descriptors[0].limit.requests_per_unit = 4
            message.descriptors[0].limit.unit = ratelimit_unit_pb2.YEAR
            status = should(message).statuses[0]
            assert status.current_limit.unit == Unit.YEAR and status.limit_remaining == 3, status

        def case_share_threshold():
            got = [should(request("fmt", [("files", v)])).overall_code
                   for v in ("files/a.pdf", "files/b.csv", "files/c.txt")]
            assert got == [OK, OK, OVER], got  # one counter of 2 for every files/*
            got = [should(request("fmt", [("own", v)])).overall_code for v in ("own/a", "own/a", "own/b")]
            assert got == [OK, OVER, OK], got  # without it, a counter per value

        def case_wildcard_inside_a_value():
            assert should(request("fmt", [("path", "/api/7/action")])).statuses[0].current_limit \
                .requests_per_unit == 1
            assert not should(request("fmt", [("path", "/api/7/other")])).statuses[0].HasField("current_limit")

        def case_quota_mode_and_metadata():
            # Within every limit: the metadata of each, merged, the first value winning.
            response = should(request("fmt", [("quota_a", "q")], [("quota_b", "q")], hits=1))
            assert codes(response) == (OK, [OK, OK]), response
            metadata = json_format.MessageToDict(response.dynamic_metadata)
            assert metadata["domain"] == "fmt" and metadata["hitsAddend"] == 1, metadata
            assert metadata["descriptors"] == [{"entries": ["quota_a=q"]}, {"entries": ["quota_b=q"]}]
            assert metadata["metadata"] == {"name": "service_a", "owner": {"team": "edge", "pager": True},
                                            "port": 8080}, metadata
            # quota_a over, quota_b within: the request passes, quota_a is marked, its metadata left out.
            response = should(request("fmt", [("quota_a", "q")], [("quota_b", "q")]))
            assert codes(response) == (OK, [OVER, OK]), response
            metadata = json_format.MessageToDict(response.dynamic_metadata)
            assert metadata["metadata"] == {"name": "service_b", "port": 8080, "owner": {"pager": True}}
            assert "hitsAddend" not in metadata
            # Every quota over: over the limit, as a regular limit.
            response = should(request("fmt", [("quota_a", "q")], [("quota_b", "q")]))
            assert codes(response) == (OVER, [OVER, OVER]), response
            assert "metadata" not in json_format.MessageToDict(response.dynamic_metadata)
            # A regular limit over denies whatever the quotas say.
            should(request("fmt", [("regular", "r")]))
            response = should(request("fmt", [("regular", "r")], [("quota_a", "new")]))
            assert codes(response) == (OVER, [OVER, OK]), response
            metrics = node.metrics()
            assert re.search(r'tally_quota_exceeded_total\{domain="fmt",front="grpc"\} 1', metrics), metrics
            assert 'tally_rule_quota_exceeded_total{rule="fmt.quota_a"} 1' in metrics, metrics

        def case_shadow_mode_is_per_descriptor():
            assert codes(should(request("fmt", [("service", "s")]))) == (OK, [OK])
            assert codes(should(request("fmt", [("service", "s"), ("user", "u")]))) == (OVER, [OVER])

        def case_merged_domain():
            got = [should(request("merged", [("a", "1")], [("b", "1")])).statuses[i].current_limit
                   .requests_per_unit for i in (0, 1)]
            assert got == [1, 2], got
            node.write_policy("merge_c.yaml", MERGE_B)  # b again: refused, the set in force stays
            deadline = time.monotonic() + 5
            while "merge_c.yaml:3: duplicate descriptor 'merged.b'" not in node.log_text():
                assert time.monotonic() < deadline, node.log_text()
                time.sleep(0.02)
            assert should(request("merged", [("a", "2")])).overall_code == OK
            os.remove(os.path.join(node.policy_dir, "merge_c.yaml"))

        def case_metric_names():
            for ip in ("10.0.0.1", "10.0.0.2"):
                should(request("fmt", [("ip", ip)]))
            should(request("fmt", [("route", "api"), ("method", "GET")]))
            metrics = node.metrics()
            for rule in ("fmt.ip_10.0.0.1", "fmt.ip_10.0.0.2", "fmt.route_api.method", "fmt.files_files/*"):
                assert f'tally_rule_checks_total{{outcome="allowed",rule="{rule}"}}' in metrics, (rule, metrics)

        cases = [case_week_month_year, case_share_threshold, case_wildcard_inside_a_value,
                 case_quota_mode_and_metadata, case_shadow_mode_is_per_descriptor, case_merged_domain,
                 case_metric_names]
        passed, failed = cases_lib.run(cases)
        assert node.process.poll() is None, "tallyd died"
        channel.close()
    finally:
        status = cases_lib.finish(node, root, passed, failed)
    return status


if __name__ == "__main__":
    sys.exit(main())
