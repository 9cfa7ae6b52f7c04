#!/usr/bin/env python3
"""Parses what Metrics::Render writes (tests/metrics/print_metrics.cc) with
python3-prometheus-client's text parser, the one Prometheus' Python client
uses, and checks families, types and values it must find.

Usage: metrics_parse_test.py PATH_TO_tally-print-metrics
"""
import math
import subprocess
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def sample(name, **labels):
        found = [s for f in families.values() for s in f.samples
                 if s.name == name and s.labels == labels]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0].value

    # The parser drops _total from a counter's family name; the types are Prometheus'.
    expected_types = {
        "tally_checks": "counter", "tally_shadow_denied": "counter",
        "tally_decision_duration_seconds": "histogram", "tally_keys": "gauge",
        "tally_gossip_link_lag_seconds": "gauge", "tally_member_state": "gauge",
        "tally_build_info": "gauge", "tally_ready": "gauge",
    }
    for name, kind in expected_types.items():
        assert families[name].type == kind, f"{name}: {families[name].type}, not {kind}"

    assert sample("tally_checks_total", domain="", front="protocol", outcome="allowed") == 2
    assert sample("tally_checks_total", domain="api", front="protocol", outcome="error") == 1
    assert sample("tally_checks_total", domain="edge", front="grpc", outcome="denied") == 5
    assert sample("tally_checks_total", domain="_other", front="grpc", outcome="allowed") == 1
    assert sample("tally_shadow_denied_total", domain="api", front="protocol") == 1
    assert sample("tally_quota_exceeded_total", domain="edge", front="grpc") == 2
    assert sample("tally_rule_checks_total", outcome="allowed", rule="edge.files_files/*") == 2
    assert sample("tally_rule_quota_exceeded_total", rule="edge.files_files/*") == 1
    assert sample("tally_decision_duration_seconds_count", front="protocol") == 2
    assert sample("tally_decision_duration_seconds_bucket", front="protocol", le="5e-06") == 1
    assert sample("tally_decision_duration_seconds_bucket", front="protocol", le="+Inf") == 2
    assert math.isclose(sample("tally_decision_duration_seconds_sum", front="grpc"), 40e-6)
    assert sample("tally_keys") == 1_000_000
    assert sample("tally_uptime_seconds") == 12.5
    assert sample("tally_ready") == 1
    assert sample("tally_gossip_link_lag_seconds", address="10.0.0.2:7421", node="2") == 0.25
    # A quote in a label value comes back intact: the serializer escaped it.
    assert sample("tally_gossip_link_up", address='node-3.tally "quoted":7421', node="3") == 0
    assert sample("tally_members", state="alive") == 2
    assert sample("tally_members", state="dead") == 1
    assert sample("tally_member_state", address="node-3.tally:7421", node="3", state="dead") == 1
    assert sample("tally_member_state", address="node-3.tally:7421", node="3", state="alive") == 0
    # Counters by the naming rules: every counter family's samples end in _total.
    for family in families.values():
        if family.type == "counter":
            for s in family.samples:
                assert s.name.endswith("_total") or s.name.endswith("_created"), s.name
    print(f"ok: {len(families)} families, {sum(len(f.samples) for f in families.values())} samples")


if __name__ == "__main__":
    main()
