#!/usr/bin/python3
"""A real Prometheus scrapes a real 3-node tally cluster, and every metric
name the Grafana dashboard and the alerting rules use exists in it.

  prometheus_scrape_test.py TALLYD SOURCE_DIR

Starts three tallyd nodes on 127.0.0.1 (ports chosen at run time, data in a
temporary directory), a Prometheus on a free loopback port with its own
config and --storage.tsdb.path in that directory, scraping the nodes' admin
ports every second with cluster/deploy/monitoring/tally-alerts.yaml loaded.
Sends a few checks (shadow denials among them), then asks Prometheus's HTTP
API for each name, and whether each rule evaluates without error. Everything
stops and the directory is removed at the end, pass or fail. Prints
"SKIPPED: why" and exits 0 when Prometheus is not installed (Debian's
prometheus package) or does not start here.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import http_get, start_cluster, wait_for  # noqa: E402

DEADLINE_S = 90  # the whole test, so that a hang fails instead of waiting for ctest

# A domain with a shadow-mode limit, so that tally_shadow_denied_total counts.
POLICY = """domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_counter}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
"""


def metric_names(expr):
    """The metric names in a PromQL expression: tally's, and Prometheus's `up`."""
    return set(re.findall(r"(?<![\w:])(tally_[a-z0-9_]+|up)(?![\w:])", expr))


def names_used(source):
    """{name: [where]} of every metric the dashboard and the rules name."""
    import yaml
    used = {}
    monitoring = os.path.join(source, "cluster/deploy/monitoring")
    dashboard = json.load(open(os.path.join(monitoring, "tally-dashboard.json")))
    exprs = [("dashboard: " + p["title"], t["expr"]) for p in dashboard["panels"]
             for t in p.get("targets", [])]
    exprs += [("dashboard: $" + v["name"], v["definition"])
              for v in dashboard["templating"]["list"] if v["type"] == "query"]
    rules = yaml.safe_load(open(os.path.join(monitoring, "tally-alerts.yaml")))
    exprs += [("rules: " + r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]
    for where, expr in exprs:
        for name in metric_names(expr):
            used.setdefault(name, []).append(where)
    return used


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CannotRun(Exception):
    """Prometheus is installed but cannot run here: the test is skipped."""


class Prometheus:
    """Prometheus on 127.0.0.1, its files under root."""

    def __init__(self, root, targets, rules):
        self.root = root
        config = os.path.join(root, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    f"rule_files: [{json.dumps(rules)}]\n"
                    "scrape_configs:\n"
                    "  - job_name: tally\n"
                    f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n")
        self.log_path = os.path.join(root, "prometheus.log")
        self.process = None
        # A port free a moment ago may be taken before Prometheus binds it: try another.
        for _ in range(3):
            self.port = free_port()
            with open(self.log_path, "w") as log:
                self.process = subprocess.Popen(
                    ["prometheus", "--config.file", config,
                     "--storage.tsdb.path", os.path.join(root, "tsdb"),
                     "--web.listen-address", f"127.0.0.1:{self.port}"],
                    stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_for(self.ready, 30, "Prometheus to be ready")
                return
            except (TimeoutError, RuntimeError):
                self.stop()
        raise CannotRun("Prometheus did not start: " + open(self.log_path).read()[-1500:])

    def ready(self):
        if self.process.poll() is not None:
            raise RuntimeError("Prometheus exited")
        try:
            return http_get(f"http://127.0.0.1:{self.port}/-/ready", timeout=1)[0] == 200
        except OSError:
            return False

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}")
        reply = json.loads(body)
        if status != 200 or reply.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {status} {body[:500]}")
        return reply["data"]

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def traffic(nodes):
    """Checks on every node: over the limit, and over the shadow limit."""
    for node in nodes:
        base = f"http://127.0.0.1:{node.ports['http']}"
        for _ in range(8):
            http_get(base + "/v1/policy?domain=edge&remote_address=10.0.0.1")
            http_get(base + "/v1/policy?domain=edge&trial=yes")
            http_get(base + "/v1/check?key=user:1&limit=3&window_ms=60000")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tallyd, source = sys.argv[1], sys.argv[2]
    if shutil.which("prometheus") is None:
        print("SKIPPED: prometheus is not installed (Debian's prometheus package)")
        return 0
    started = time.monotonic()
    used = names_used(source)
    root = tempfile.mkdtemp(prefix="tally-prometheus-")
    nodes, prometheus, failures, skipped = [], None, [], None
    try:
        policy_dir = os.path.join(root, "policies")
        os.makedirs(policy_dir)
        with open(os.path.join(policy_dir, "edge.yaml"), "w") as f:
            f.write(POLICY)
        start_cluster(tallyd, root, policy_dir, nodes)
        traffic(nodes)
        targets = [f"127.0.0.1:{node.ports['admin']}" for node in nodes]
        rules = os.path.join(source, "cluster/deploy/monitoring/tally-alerts.yaml")
        prometheus = Prometheus(root, targets, rules)

        # Every node scraped, twice at least after the traffic (rates need two samples).
        def scraped():
            up = prometheus.api("query", query='up{job="tally"} == 1')["result"]
            counts = prometheus.api("query", query='count_over_time(tally_ready[1m])')["result"]
            return len(up) == len(nodes) and len(counts) == len(nodes) and all(
                float(c["value"][1]) >= 3 for c in counts)
        wait_for(scraped, 30, "Prometheus to scrape every node three times")
        traffic(nodes)
        time.sleep(2)  # one more scrape and rule evaluation after the second traffic

        for name in sorted(used):
            series = prometheus.api("series", **{"match[]": name, "start": str(time.time() - 300)})
            if series:
                print(f"ok: {name} ({len(series)} series)")
            else:
                failures.append(f"{name}, used by {', '.join(used[name])}, is in no scrape")
        for group in prometheus.api("rules")["groups"]:
            for rule in group["rules"]:
                if rule.get("health") != "ok":
                    failures.append(f"rule {rule['name']}: {rule.get('health')} "
                                    f"{rule.get('lastError', '')}")
        shadow = prometheus.api("query", query='sum(tally_shadow_denied_total{domain="edge"})')
        if not shadow["result"] or float(shadow["result"][0]["value"][1]) == 0:
            failures.append("the shadow denials the test caused are not in Prometheus")
    except CannotRun as error:
        skipped = str(error)
    except Exception as error:  # reported with the logs below
        failures.append(f"{type(error).__name__}: {error}")
    finally:
        if prometheus is not None:
            prometheus.stop()
        for node in nodes:
            node.stop()
        if failures:
            for node in nodes:
                print(f"--- {node.root}/tallyd.log\n" + node.log()[-2000:])
            if prometheus is not None:
                print("--- prometheus.log\n" + open(prometheus.log_path).read()[-2000:])
        shutil.rmtree(root, ignore_errors=True)
    if skipped:
        print("SKIPPED: " + skipped)
        return 0
    elapsed = time.monotonic() - started
    if elapsed > DEADLINE_S:
        failures.append(f"took {elapsed:.0f} s, over {DEADLINE_S} s")
    for failure in failures:
        print("FAIL: " + failure)
    print(f"{len(used)} metric names checked in {elapsed:.1f} s; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
