#!/usr/bin/env python3
"""Checks the layer rules of ARCHITECTURE.md against the tree and the build.

Usage:
  check_layers.py SOURCE_DIR [LINK_GRAPH]   check; exit 1 naming every breach
  check_layers.py SOURCE_DIR --graph        print the folder-level include graph

Includes: every `#include "..."` of a project file is an edge from the
file's layer to the included file's layer; each layer may include only the
layers ALLOWED names, and some layers may not include given third-party
headers (FORBIDDEN_SYSTEM). Links: LINK_GRAPH (written by CMakeLists.txt at
configure time, one `target: dep;dep;...` a line) gives each project
target's direct link libraries; the targets in NO_ENGINE must not reach
tally_engine (or the daemon's libraries) through any chain of them.
"""
import os
import re
import sys

# A layer is a folder: node/<layer> for the node's layers, else the top folder.
ALLOWED = {
    "node/common": set(),
    "node/engine": {"node/common"},
    "node/net": {"node/common", "protocol"},
    "node/tls": {"node/common"},
    "node/policy": {"node/common", "node/engine"},
    "node/grpc": {"node/common", "node/engine", "node/policy", "envoy"},
    "node/http": {"node/common", "node/engine", "node/net", "node/policy"},
    "node/resp": {"node/common", "node/engine", "node/net", "node/policy", "protocol"},
    "node/server": {"node/common", "node/engine", "node/net", "node/policy", "node/tls", "protocol"},
    "node/gossip": {"node/common", "node/engine", "node/net", "node/tls", "protocol"},
    "node/persist": {"node/common", "node/engine", "storage"},
    "node/metrics": {"node/common", "protocol"},
    "node/bin": {"node/common", "node/engine", "node/net", "node/server", "node/gossip",
                 "node/persist", "node/policy", "node/grpc", "node/metrics", "node/http", "node/resp", "node/tls", "protocol", "storage"},
    # The simulation drives the daemon's no-I/O code: engine, gossip logic, codecs.
    "node/sim": {"node/common", "node/engine", "node/gossip", "protocol"},
    "protocol": {"node/common"},
    "storage": {"node/common"},
    "cluster": {"node/common", "protocol"},
    "tests": None,  # tests may include anything
}
# Third-party headers a layer must not include (prefixes of the include path).
FORBIDDEN_SYSTEM = {
    "node/common": ["asio", "capnp", "kj/", "rocksdb/", "spdlog/", "openssl/"],
    "node/engine": ["asio", "capnp", "kj/", "rocksdb/", "spdlog/", "openssl/"],
    "node/sim": ["asio", "rocksdb/", "openssl/"],
    "protocol": ["rocksdb/", "asio"],
    "storage": ["asio", "capnp", "kj/", "openssl/"],
}
# Targets that must link no engine and no part of the daemon.
NO_ENGINE = ["tally_common", "tally_protocol", "tally_storage", "tally_client", "tallyctl",
             "tally-loadgen", "tally_harness"]
DAEMON_LIBS = {"tally_engine", "tally_requests", "tally_server", "tally_gossip", "tally_persister",
               "tally_policy", "tally_grpc", "tally_http", "tally_resp"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_SUFFIXES = (".h", ".cc")


def layer_of(path):
    parts = path.split("/")
    if parts[0] == "node" and len(parts) > 2:
        return "node/" + parts[1]
    if parts[0] in ("node",):
        return "node"
    return parts[0]


def project_files(root):
    for top in ("node", "protocol", "storage", "cluster", "tests"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(folder, name), root)


def includes(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for line in f:
            match = INCLUDE.match(line)
            if match:
                yield match.group(1) == '"', match.group(2)


def include_edges(root):
    """(from_layer, to_layer, file, included) for every include; to_layer is
    None for a third-party header (<...>, or a quoted name without a folder)."""
    for path in project_files(root):
        source = layer_of(path)
        for quoted, target in includes(root, path):
            project = quoted and "/" in target
            yield source, layer_of(target) if project else None, path, target


def check_includes(root):
    breaches = []
    for source, target, path, included in include_edges(root):
        if target is None:
            for prefix in FORBIDDEN_SYSTEM.get(source, []):
                if included.startswith(prefix):
                    breaches.append(f"{path}: {source} must not include <{included}>")
            continue
        allowed = ALLOWED.get(source, set())
        if allowed is None or target == source or target in allowed:
            continue
        breaches.append(f"{path}: {source} must not include {included} ({target})")
    return breaches


def read_link_graph(path):
    graph = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            target, _, deps = line.strip().partition(": ")
            if not target:
                continue
            names = []
            for dep in deps.split(";"):
                dep = re.sub(r"^\$<LINK_ONLY:(.*)>$", r"\1", dep.strip())
                if dep:
                    names.append(dep)
            graph[target] = names
    return graph


def check_links(path):
    graph = read_link_graph(path)
    breaches = []
    for target in NO_ENGINE:
        if target not in graph:
            breaches.append(f"{target}: not in the link graph (renamed? update check_layers.py)")
            continue
        seen, stack, parent = set(), [target], {}
        while stack:
            name = stack.pop()
            for dep in graph.get(name, []):
                if dep in seen:
                    continue
                seen.add(dep)
                parent[dep] = name
                stack.append(dep)
        for bad in sorted(seen & DAEMON_LIBS):
            chain, name = [bad], bad
            while name != target:
                name = parent[name]
                chain.append(name)
            breaches.append(f"{target} links {bad}: " + " -> ".join(reversed(chain)))
    return breaches


def print_graph(root):
    counts = {}
    for source, target, _, _ in include_edges(root):
        if target is not None and target != source:
            counts[(source, target)] = counts.get((source, target), 0) + 1
    for (source, target), count in sorted(counts.items()):
        print(f"{count:4d}  {source} -> {target}")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    if len(argv) > 2 and argv[2] == "--graph":
        print_graph(root)
        return 0
    breaches = check_includes(root)
    if len(argv) > 2:
        breaches += check_links(argv[2])
    for breach in breaches:
        print("layer rule broken: " + breach)
    if breaches:
        return 1
    print("layers: every include and link follows the rules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
