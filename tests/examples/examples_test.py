#!/usr/bin/python3
"""Runs the programs of examples/ in one language against real tallyd nodes
and checks what each prints.

Usage: examples_test.py LANGUAGE TALLYD SOURCE_DIR
  LANGUAGE: python (redis-py, grpcio, urllib), node (ioredis, @grpc/grpc-js,
  fetch; installed by `npm ci` from examples/node/package-lock.json into a
  temporary copy), go (redigo, grpc-go, net/http; Debian's Go packages, built
  in GOPATH mode), curl.

Each example gets a tallyd of its own (--memory-only, 127.0.0.1, ports chosen
by the kernel, examples/policies), stopped after it. A client that cannot be
installed prints 'SKIPPED: <why>' and exits 77. Every process has a timeout;
the temporary directory is removed at the end.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import cases as cases_lib  # noqa: E402

SKIP = 77
PROTOS = ["envoy/type/v3/ratelimit_unit.proto", "envoy/config/core/v3/base.proto",
          "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
          "envoy/service/ratelimit/v3/rls.proto"]
# Debian's redigo, grpc-go and protobuf; golang/protobuf 1.5 (registry.go), not 1.3, which
# cannot decode what protoc-gen-go writes today.
GO_PACKAGES = ["/usr/share/gocode/src/github.com/gomodule/redigo",
               "/usr/share/gocode/src/google.golang.org/grpc",
               "/usr/share/gocode/src/google.golang.org/protobuf",
               "/usr/share/gocode/src/github.com/golang/protobuf/proto/registry.go"]


def expected(what, remaining_unit):
    """Three allowed requests, then a denial with a wait of some `remaining_unit`."""
    return [re.escape(f"{what}: allowed, remaining {n}") for n in (2, 1, 0)] + [
        re.escape(f"{what}: denied, retry after ") + r"[1-9][0-9]*" +
        re.escape(f" {remaining_unit}")]


RESP = expected("CL.THROTTLE user:7", "s") + expected("TALLY.CHECK user:42", "ms")
GRPC = expected("ShouldRateLimit user=42", "s")
HTTP = expected("POST /v1/check user:42", "s (429)")


class Node(cases_lib.Process):
    """One tallyd with the RESP, gRPC and HTTP fronts and the examples' policies."""

    def __init__(self, tallyd, root, policy_dir):
        os.makedirs(root)
        self.log_path = os.path.join(root, "tallyd.log")
        self.log = open(self.log_path, "w")
        names = ("port", "resp", "grpc", "http")
        files = {name: os.path.join(root, name + ".port") for name in names}
        args = [tallyd, "--memory-only", "--address", "127.0.0.1", "--policy-dir", policy_dir]
        for name in names:
            flag = "--port" if name == "port" else f"--{name}-port"
            args += [flag, "0", flag + "-file", files[name]]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self.ports = {name: self.wait_for(files[name]) for name in names}
        self.resp = f"127.0.0.1:{self.ports['resp']}"
        self.grpc = f"127.0.0.1:{self.ports['grpc']}"
        self.http = f"http://127.0.0.1:{self.ports['http']}"

    def wait_for(self, path, timeout=10):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path) or not open(path).read().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"tallyd did not write {path}: " + self.log_text())
            time.sleep(0.01)
        return int(open(path).read())


def run(argv, timeout=60, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)


def python_examples(source, root):
    """(name, argv from a node, env) of each Python example."""
    generated = os.path.join(root, "generated")
    os.makedirs(generated)
    run(["protoc", "-I", os.path.join(source, "protocol"), "--python_out", generated] + PROTOS,
        check=True)
    folder = os.path.join(source, "examples", "python")
    python = lambda name: ["/usr/bin/python3", os.path.join(folder, name)]  # noqa: E731
    return [("resp_example.py", lambda n: python("resp_example.py") + [n.resp], RESP, None),
            ("grpc_example.py", lambda n: python("grpc_example.py") + [n.grpc], GRPC,
             {"PYTHONPATH": generated}),
            ("http_example.py", lambda n: python("http_example.py") + [n.http], HTTP, None)]


def node_examples(source, root):
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise Skip("node and npm are not installed (.ci/install-deps installs them)")
    folder = os.path.join(root, "node")
    shutil.copytree(os.path.join(source, "examples", "node"), folder,
                    ignore=shutil.ignore_patterns("node_modules"))
    try:
        installed = run(["npm", "ci", "--no-audit", "--no-fund"], timeout=300, cwd=folder)
    except subprocess.TimeoutExpired:
        raise Skip("npm ci did not finish in 300 s: is the npm registry reachable?")
    if installed.returncode != 0:
        errors = [line for line in installed.stderr.splitlines() if "error" in line]
        raise Skip("npm ci could not install the clients from the npm registry: " +
                   "; ".join(errors[:2] or ["no output"]))
    protos = os.path.join(source, "protocol")
    node = lambda name: ["node", os.path.join(folder, name)]  # noqa: E731
    return [("resp_example.js", lambda n: node("resp_example.js") + [n.resp], RESP, None),
            ("grpc_example.js", lambda n: node("grpc_example.js") + [n.grpc, protos], GRPC, None),
            ("http_example.js", lambda n: node("http_example.js") + [n.http], HTTP, None)]


def go_examples(source, root):
    missing = [p for p in ["go", "protoc-gen-go", "protoc-gen-go-grpc"] if shutil.which(p) is None]
    missing += [p for p in GO_PACKAGES if not os.path.exists(p)]
    if missing:
        raise Skip("Debian's Go packages are not installed (.ci/install-deps installs them): " +
                   ", ".join(missing))
    # Envoy's messages as go-control-plane names them, into a GOPATH of this run.
    gopath = os.path.join(root, "gopath")
    mapping = ",".join(f"M{proto}=github.com/envoyproxy/go-control-plane/{os.path.dirname(proto)}"
                       for proto in PROTOS)
    os.makedirs(os.path.join(gopath, "src"))
    run(["protoc", "-I", os.path.join(source, "protocol"),
         "--go_out", os.path.join(gopath, "src"), "--go_opt", mapping,
         "--go-grpc_out", os.path.join(gopath, "src"), "--go-grpc_opt", mapping] + PROTOS,
        check=True)
    env = dict(os.environ, GOPATH=gopath + ":/usr/share/gocode", GO111MODULE="off",
               GOCACHE=os.path.join(root, "gocache"), GOFLAGS="", GOPROXY="off")
    examples = []
    for name, address, lines in (("resp", "resp", RESP), ("grpc", "grpc", GRPC),
                                 ("http", "http", HTTP)):
        binary = os.path.join(root, "bin", name)
        built = run(["go", "build", "-o", binary, "./" + name], timeout=150, env=env,
                    cwd=os.path.join(source, "examples", "go"))
        if built.returncode != 0:
            raise RuntimeError(f"go build ./{name}: {built.stdout}{built.stderr}")
        examples.append((name + "/main.go",
                         lambda n, b=binary, a=address: [b, getattr(n, a)], lines, None))
    return examples


def curl_examples(source, root):
    script = os.path.join(source, "examples", "curl", "check.sh")
    return [("check.sh", lambda n: ["sh", script, n.http], HTTP, None)]


class Skip(Exception):
    """A client this language's examples need cannot be installed here."""


def main():
    language, tallyd, source = sys.argv[1], sys.argv[2], sys.argv[3]
    root = tempfile.mkdtemp(prefix=f"tally-examples-{language}-")
    try:
        examples = {"python": python_examples, "node": node_examples, "go": go_examples,
                    "curl": curl_examples}[language](source, root)
    except Skip as why:
        shutil.rmtree(root, ignore_errors=True)
        print(f"SKIPPED: {why}")
        return SKIP
    policy_dir = os.path.join(source, "examples", "policies")

    def case_for(name, argv, lines, env):
        # The example prints three allowed requests and a denial, as its source says.
        def case():
            node = Node(tallyd, os.path.join(root, "node-" + name.replace("/", "-")), policy_dir)
            try:
                result = run(argv(node), env=dict(os.environ, **(env or {})))
                printed = result.stdout.splitlines()
                ok = result.returncode == 0 and len(printed) == len(lines) and all(
                    re.fullmatch(line, out) for line, out in zip(lines, printed))
                assert ok, (f"{name} exited {result.returncode}, printed:\n{result.stdout}"
                            f"{result.stderr}\nexpected:\n" + "\n".join(lines) +
                            "\ntallyd's log:\n" + node.log_text()[-2000:])
            finally:
                node.stop()
        case.__name__ = f"{language} {name}"
        return case

    passed, failed = cases_lib.run([case_for(*example) for example in examples])
    return cases_lib.finish(None, root, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
