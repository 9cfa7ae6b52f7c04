"""The default config (cluster/deploy/debian/tallyd.toml) uncommented block
by block: each commented block on its own, then all of them, must start a
real tallyd that serves /metrics. Used by deploy_test.py; `check(condition,
what)` records a failure.

Each run takes the file as an operator would leave it, with what cannot be
the same here replaced: ports by free ones chosen at run time, every address
by 127.0.0.1 (the test listens on loopback only), the data directory, policy
directory and secret file by ones in a temporary directory.
"""
import os
import re
import shutil
import tempfile
import tomllib

from deploy_run import Tallyd, free_port, http_get

SETTING = re.compile(r"^# ([a-z][a-z0-9-]*) = ")
WILDCARDS = ("0.0.0.0", "::")
POLICY = """domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
"""


def blocks(text):
    """The paragraphs of text, and the indexes of those holding commented settings."""
    paragraphs = text.split("\n\n")
    return paragraphs, [i for i, p in enumerate(paragraphs)
                        if any(SETTING.match(line) for line in p.splitlines())]


def uncomment(paragraph):
    return "\n".join(line[2:] if SETTING.match(line) else line for line in paragraph.splitlines())


def variants(text):
    """(name, text) for the file as it is, each block uncommented, and all."""
    paragraphs, commented = blocks(text)
    first_key = lambda i: SETTING.match(  # noqa: E731
        next(line for line in paragraphs[i].splitlines() if SETTING.match(line))).group(1)
    out = [("as shipped", text)]
    for i in commented:
        out.append((f"block '{first_key(i)} ...' uncommented", "\n\n".join(
            uncomment(p) if j == i else p for j, p in enumerate(paragraphs))))
    out.append(("every block uncommented", "\n\n".join(
        uncomment(p) if j in commented else p for j, p in enumerate(paragraphs))))
    return out


def settings_of(text):
    """The file's settings, each line read alone: a key set twice is for
    tallyd to refuse, not for this reader."""
    settings = {}
    for line in text.splitlines():
        if re.match(r"^[a-z][a-z0-9-]* = ", line):
            settings.update(tomllib.loads(line))
    return settings


def check_gossip_address(check, name, settings):
    """A clustered node on a wildcard address must advertise one peers can dial
    (tallyd refuses it otherwise); the runs below cannot show that, as they
    listen on 127.0.0.1."""
    if not (settings.get("seed") or settings.get("cluster-secret-file")):
        return
    gossip = settings.get("gossip-address") or settings.get("address") or "127.0.0.1"
    check(gossip not in WILDCARDS or settings.get("gossip-advertise"),
          f"tallyd.toml, {name}: gossip on {gossip} needs gossip-advertise")


def localize(text, root):
    """The file with this machine's ports, addresses and paths (see the module's
    doc). Returns the text and the admin port."""
    settings = settings_of(text)
    ports = {}  # the file's (host, port) -> this run's port
    own_host = settings.get("gossip-address", settings.get("address", "127.0.0.1"))

    def port(host, number):
        # Two picks may get the same port: each is free once the other's probe closed.
        while (host, int(number)) not in ports:
            candidate = free_port()
            if candidate not in ports.values():
                ports[(host, int(number))] = candidate
        return ports[(host, int(number))]

    def value(key, old):
        if key.endswith("port"):
            return str(port(own_host if key == "gossip-port" else "", old))
        if key.endswith("address"):
            return '"127.0.0.1"'
        if key == "data-dir":
            return f'"{root}/data"'
        if key == "policy-dir":
            return f'"{root}/policies"'
        if key == "cluster-secret-file":
            return f'"{root}/cluster.secret"'
        if key == "seed":
            return re.sub(r'"([^":]+):(\d+)"', lambda m: f'"127.0.0.1:{port(m.group(1), m.group(2))}"',
                          old)
        return old

    lines = []
    for line in text.splitlines():
        match = re.match(r"^([a-z][a-z0-9-]*) = (.*)$", line)
        lines.append(f"{match.group(1)} = {value(match.group(1), match.group(2))}" if match
                     else line)
    admin = settings.get("admin-port")
    return "\n".join(lines) + "\n", admin and ports.get(("", int(admin)))


def start(check, tallyd, name, text):
    root = tempfile.mkdtemp(prefix="tally-config-")
    node = None
    try:
        os.makedirs(os.path.join(root, "policies"))
        with open(os.path.join(root, "policies", "edge.yaml"), "w") as f:
            f.write(POLICY)
        secret = os.path.join(root, "cluster.secret")
        with open(secret, "w") as f:
            f.write("a secret the members of this test share\n")
        os.chmod(secret, 0o600)
        local, admin = localize(text, root)
        config = os.path.join(root, "tallyd.toml")
        with open(config, "w") as f:
            f.write(local)
        check(admin, f"tallyd.toml, {name}: an admin port is set")
        if not admin:
            return
        node = Tallyd([tallyd, "--config", config], {}, root)
        ready = node.wait_ready(admin)
        status, _, body = http_get(f"http://127.0.0.1:{admin}/metrics")
        check(ready and status == 200 and "tally_ready 1" in body,
              f"tallyd.toml, {name}: tallyd starts and serves /metrics: {node.log()}\n{local}")
        check("readable by others" not in node.log(), f"tallyd.toml, {name}: no secret warning")
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


def check_config_blocks(check, source, tallyd):
    text = open(os.path.join(source, "cluster/deploy/debian/tallyd.toml")).read()
    runs = variants(text)
    check(len(runs) > 3, "tallyd.toml: commented blocks to uncomment")
    for name, variant in runs:
        check_gossip_address(check, name, settings_of(variant))
        start(check, tallyd, name, variant)
        print(f"ran: {name}")
