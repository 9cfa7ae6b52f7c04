"""The Kubernetes example (cluster/deploy/kubernetes/tally.yaml) and its
image (Dockerfile): the properties docs/kubernetes.md promises, read from the
files, then a tallyd started with the pod's settings and the image's. Used
by deploy_test.py; `check(condition, what)` records a failure.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from deploy_run import (FRONTS, Tallyd, accepts, configmap_mount, env_name, free_port,
                        http_get, resp_ping)

# Memory per key and beside the keys, as docs/kubernetes.md#memory sizes a
# pod from TALLY_MAX_KEYS (measured figures: docs/operations.md#capacity-planning).
BYTES_PER_KEY = 1024
OVERHEAD_BYTES = 512 << 20
FORMULA = "TALLY_MAX_KEYS x 1 KiB + 512 MiB"
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6,
         "G": 10**9, "T": 10**12, "": 1}


def quantity(text):
    """Bytes in a Kubernetes quantity such as 3Gi."""
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(text)).groups()
    return int(float(number) * UNITS[unit])


def load(source):
    """The manifest's objects by kind, and the parts of the StatefulSet's pod."""
    import yaml
    path = os.path.join(source, "cluster/deploy/kubernetes/tally.yaml")
    by_kind = {}
    for doc in yaml.safe_load_all(open(path)):
        if doc:
            by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind, open(path).read()


def container_env(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check_ports(check, sts, services, env):
    """Every front is served, each port given to tallyd is exposed under its
    name, and the Services reach them."""
    container = sts["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(set(ports) == set(FRONTS), f"k8s: the container exposes every front {sorted(FRONTS)}: "
          f"{sorted(ports)}")
    for name, flag in FRONTS.items():
        check(str(ports.get(name)) == env.get(env_name(flag)),
              f"k8s: port {name} {ports.get(name)} is {env_name(flag)} {env.get(env_name(flag))}")
    given = {v for k, v in env.items() if re.fullmatch(r"TALLY_([A-Z]+_)?PORT", k)}
    check(given == {str(p) for p in ports.values()},
          f"k8s: the ports tallyd is given {sorted(given)} are the ports exposed")
    served = {p["targetPort"] for s in services for p in s["spec"]["ports"]}
    check(served == set(FRONTS), f"k8s: the Services reach every front: {sorted(served)}")
    check(len(set(ports.values())) == len(ports), "k8s: no two fronts share a port")


def check_pod_security(check, pod, container):
    security = pod.get("securityContext", {})
    own = container.get("securityContext", {})
    check(security.get("runAsNonRoot") is True or own.get("runAsNonRoot") is True,
          "k8s: runAsNonRoot")
    user = own.get("runAsUser", security.get("runAsUser"))
    check(isinstance(user, int) and user != 0, f"k8s: runs as a non-root user id: {user}")
    check(own.get("allowPrivilegeEscalation") is False, "k8s: allowPrivilegeEscalation false")


def check_spread(check, by_kind, sts):
    labels = sts["spec"]["template"]["metadata"]["labels"]
    matches = lambda selector: all(labels.get(k) == v for k, v in selector.items())  # noqa: E731
    budgets = by_kind.get("PodDisruptionBudget", [])
    check(len(budgets) == 1 and matches(budgets[0]["spec"]["selector"]["matchLabels"]),
          "k8s: a PodDisruptionBudget selects the pods")
    if budgets:
        spec, replicas = budgets[0]["spec"], sts["spec"]["replicas"]
        check(spec.get("maxUnavailable") == 1 or spec.get("minAvailable") == replicas - 1,
              "k8s: the PodDisruptionBudget lets one pod go at a time")
    anti = sts["spec"]["template"]["spec"].get("affinity", {}).get("podAntiAffinity", {})
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution", []) + [
        t["podAffinityTerm"] for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution",
                                               [])]
    check(any(t.get("topologyKey") == "kubernetes.io/hostname" and
              matches(t["labelSelector"]["matchLabels"]) for t in terms),
          "k8s: pod anti-affinity spreads the pods over machines")


def volume_of(pod, mounts, path):
    """The pod volume under which `path` lies, given a container's mounts."""
    for mount in mounts:
        if path.startswith(mount["mountPath"].rstrip("/") + "/"):
            return next(v for v in pod["volumes"] if v["name"] == mount["name"]), mount
    return None, None


def secret_mode(check, pod, container, path):
    """The mode of the cluster secret file as tallyd finds it. The kubelet
    adds group read (0440) to a secret volume's files when the pod has an
    fsGroup; a file in an emptyDir is as the init container that copies it
    there makes it (`install -m MODE SOURCE DEST`)."""
    fs_group = pod.get("securityContext", {}).get("fsGroup") is not None
    volume, _ = volume_of(pod, container["volumeMounts"], path)
    if volume is None:
        return None
    if "secret" in volume:
        return volume["secret"].get("defaultMode", 0o644) | (0o440 if fs_group else 0)
    for init in pod.get("initContainers", []):
        command = init.get("command", []) + init.get("args", [])
        if command[:2] == ["install", "-m"] and command[-1] == path:
            source_volume, _ = volume_of(pod, init["volumeMounts"], command[-2])
            readable = source_volume is not None and "secret" in source_volume and (
                (source_volume["secret"].get("defaultMode", 0o644) | (0o440 if fs_group else 0))
                & (0o040 if fs_group else 0o004))
            check(readable, "k8s: the init container's user can read the secret it copies")
            return int(command[2], 8)
    return None


def check_kubernetes_more(check, source):
    """What deploy_test.py's first checks of the example do not cover."""
    by_kind, text = load(source)
    sts = by_kind["StatefulSet"][0]
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = container_env(container)
    check_ports(check, sts, by_kind.get("Service", []), env)
    check_pod_security(check, pod, container)
    check_spread(check, by_kind, sts)
    mode = secret_mode(check, pod, container, env.get("TALLY_CLUSTER_SECRET_FILE") or "")
    check(mode is not None and mode & 0o044 == 0,
          f"k8s: the cluster secret reaches tallyd readable by its owner alone (mode "
          f"{mode and oct(mode)}), so tallyd does not warn")
    # Policies: TALLY_POLICY_DIR is a ConfigMap's mount holding policy files.
    volume, mount = volume_of(pod, container["volumeMounts"], (env.get("TALLY_POLICY_DIR") or "") + "/")
    maps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    config_map = maps.get((volume or {}).get("configMap", {}).get("name"))
    check(config_map is not None and mount["mountPath"] == env["TALLY_POLICY_DIR"] and any(
        name.endswith((".yaml", ".yml")) for name in config_map["data"]),
        "k8s: --policy-dir is where a ConfigMap of policy files is mounted")
    # Memory: the limit covers the keys tallyd may hold.
    resources = container.get("resources", {})
    limit = quantity(resources.get("limits", {}).get("memory", "0"))
    needed = int(env.get("TALLY_MAX_KEYS") or 0) * BYTES_PER_KEY + OVERHEAD_BYTES
    check(env.get("TALLY_MAX_KEYS") and limit >= needed,
          f"k8s: memory limit {limit} >= {FORMULA} = {needed}")
    check(quantity(resources.get("requests", {}).get("memory", "0")) == limit,
          "k8s: memory requested as much as the limit")
    check(FORMULA in text, f"k8s: the manifest states the formula '{FORMULA}'")
    docs = open(os.path.join(source, "docs/kubernetes.md")).read()
    check(FORMULA in docs.replace("`", ""), f"docs/kubernetes.md states the formula '{FORMULA}'")
    return by_kind


def read_dockerfile(source):
    """The Dockerfile's instructions as (keyword, argument) pairs, continued lines joined."""
    text = open(os.path.join(source, "cluster/deploy/kubernetes/Dockerfile")).read()
    text = re.sub(r"\\\n", " ", re.sub(r"^\s*#.*\n", "", text, flags=re.M))
    return [tuple(line.strip().split(None, 1)) for line in text.splitlines() if line.strip()]


def dockerfile_env(instructions):
    env = {}
    for keyword, argument in instructions:
        if keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(argument))
    return env


def check_dockerfile(check, source, by_kind, known_envs):
    instructions = read_dockerfile(source)
    get = lambda key: [a for k, a in instructions if k == key]  # noqa: E731
    env = dockerfile_env(instructions)
    for name in env:
        check(name in known_envs, f"Dockerfile: {name} is a tallyd variable")
    check(env.get("TALLY_ADDRESS") in ("0.0.0.0", "::"),
          "Dockerfile: tallyd listens on every address of the container")
    exposed = {int(p) for argument in get("EXPOSE") for p in argument.split()}
    sts = by_kind["StatefulSet"][0]
    pod = sts["spec"]["template"]["spec"]
    ports = {p["containerPort"] for p in pod["containers"][0]["ports"]}
    check(exposed == ports, f"Dockerfile: EXPOSE {sorted(exposed)} is tally.yaml's ports")
    given = {int(v) for k, v in env.items() if re.fullmatch(r"TALLY_([A-Z]+_)?PORT", k)}
    check(given <= exposed, f"Dockerfile: every port the image sets is exposed: {sorted(given)}")
    user = (get("USER") or ["0"])[-1].split(":")[0]
    check(user.isdigit() and int(user) != 0, f"Dockerfile: USER is a numeric non-root id: {user}")
    check(user.isdigit() and int(user) == pod["securityContext"].get("runAsUser"),
          "Dockerfile: USER is tally.yaml's runAsUser")
    check(json.loads((get("ENTRYPOINT") or ["[]"])[-1]) == ["/usr/bin/tallyd"],
          "Dockerfile: the entry point is tallyd")
    check(any("--uid " + user in run for run in get("RUN")),
          "Dockerfile: the tally user is made with the id USER names")
    return env


def localize(env, ports, mounts):
    """The env with loopback for every address, `ports` (old -> new) in every
    value, and each mount path (mountPath -> directory) replaced."""
    out = {}
    for name, value in env.items():
        value = value.replace("0.0.0.0", "127.0.0.1")
        for path, directory in sorted(mounts.items(), key=lambda m: -len(m[0])):
            value = re.sub("^" + re.escape(path) + "(?=/|$)", directory, value)
        value = re.sub(r"(?<=:)(\d+)$", lambda m: str(ports.get(int(m.group(1)),
                                                                  m.group(1))), value)
        if re.fullmatch(r"TALLY_([A-Z]+_)?PORT", name):
            value = str(ports.get(int(value), value))
        out[name] = value
    return out


def expand(env, known):
    """Kubernetes' $(VAR) references, from `known` and the earlier entries."""
    out = dict(known)
    for name, value in env.items():
        if value is None:  # valueFrom: the downward API's, given in `known`
            continue
        out[name] = re.sub(r"\$\((\w+)\)", lambda m: out.get(m.group(1), m.group(0)), value)
    return {k: v for k, v in out.items() if k in env}


def probe_fronts(check, where, node, env):
    """Each front of a started node answers."""
    port = lambda flag: int(env[env_name(flag)])  # noqa: E731
    status, _, body = http_get(f"http://127.0.0.1:{port('admin-port')}/metrics")
    check(status == 200 and "tally_ready 1" in body, f"{where}: /metrics on the admin port")
    check(accepts(port("port")), f"{where}: the client port accepts")
    if env_name("http-port") in env:
        status, headers, body = http_get(
            f"http://127.0.0.1:{port('http-port')}/v1/policy?domain=edge&remote_address=10.9.9.9"
            if "TALLY_POLICY_DIR" in env else
            f"http://127.0.0.1:{port('http-port')}/v1/check?key=k&limit=5&window_ms=60000")
        check(status == 200, f"{where}: the HTTP port checks: {status} {body}")
    if env_name("resp-port") in env:
        check(resp_ping(port("resp-port")).startswith("+PONG"), f"{where}: the RESP port")
    if env_name("grpc-port") in env:
        check(accepts(port("grpc-port")), f"{where}: the gRPC port accepts")
    check("readable by others" not in node.log(), f"{where}: no warning about the secret's mode")


def run_pod(check, source, tallyd, by_kind):
    """tallyd with the pod's environment on this machine: the ConfigMap laid
    out as the kubelet mounts it, the secret copied as the init container
    copies it, the seed and advertised address this node's own."""
    sts = by_kind["StatefulSet"][0]
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    root = tempfile.mkdtemp(prefix="tally-k8s-")
    node = None
    try:
        mounts = {}
        volumes = {v["name"]: v for v in pod["volumes"]}
        maps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
        for mount in container["volumeMounts"] + [
                m for init in pod.get("initContainers", []) for m in init["volumeMounts"]]:
            directory = os.path.join(root, mount["name"])
            mounts[mount["mountPath"]] = directory
            if os.path.exists(directory):
                continue
            os.makedirs(directory)
            volume = volumes.get(mount["name"], {})
            if "configMap" in volume:
                configmap_mount(directory, maps[volume["configMap"]["name"]]["data"])
            elif "secret" in volume:
                secret = os.path.join(directory, "cluster.secret")
                with open(secret, "w") as f:
                    f.write("a secret the members of this test share\n")
                os.chmod(secret, volume["secret"].get("defaultMode", 0o644) | 0o440)
        for init in pod.get("initContainers", []):
            argv = [re.sub("^(" + "|".join(map(re.escape, mounts)) + ")",
                           lambda m: mounts[m.group(1)], a) for a in init["command"]]
            made = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            check(made.returncode == 0, f"k8s: init container {init['name']}: {made.stderr}")
        declared = {p["containerPort"] for p in container["ports"]}
        ports = {p: free_port() for p in declared}
        env = expand(container_env(container), {"POD_IP": "127.0.0.1", "POD_NAMESPACE": "tally"})
        headless = sts["spec"]["serviceName"]
        env = {k: re.sub(re.escape(headless) + r"\.[\w.-]+", "127.0.0.1", v) for k, v in env.items()}
        env = localize({k: v for k, v in env.items() if k.startswith("TALLY_")}, ports, mounts)
        argv = [tallyd if a == "/usr/bin/tallyd" else a for a in container["command"]]
        node = Tallyd(argv, env, root)
        ready = node.wait_ready(int(env["TALLY_ADMIN_PORT"]))
        check(ready, "k8s: tallyd starts with the pod's settings and gets ready: " + node.log())
        if ready:
            probe_fronts(check, "k8s", node, env)
            status, _, body = http_get(f"http://127.0.0.1:{env['TALLY_ADMIN_PORT']}/metrics")
            check(re.search(r"^tally_policy_rules [1-9]", body, re.M),
                  "k8s: the ConfigMap's policies are loaded")
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_image(check, tallyd, image_env):
    """tallyd with the image's environment: its ports and data directory, on
    loopback."""
    root = tempfile.mkdtemp(prefix="tally-image-")
    node = None
    try:
        ports = {int(v): free_port() for k, v in image_env.items()
                 if re.fullmatch(r"TALLY_([A-Z]+_)?PORT", k)}
        env = localize(image_env, ports, {image_env.get("TALLY_DATA_DIR", "/"): root + "/data"})
        node = Tallyd([tallyd], env, root)
        ready = node.wait_ready(int(env["TALLY_ADMIN_PORT"]))
        check(ready, "Dockerfile: tallyd starts with the image's settings: " + node.log())
        if ready:
            probe_fronts(check, "Dockerfile", node, env)
    finally:
        if node is not None:
            node.stop()
        shutil.rmtree(root, ignore_errors=True)


# Pages that give a single node's ports: each must give the example's.
PORT_DOCS = ("docs/envoy.md", "docs/nginx.md", "docs/kubernetes.md", "docs/systemd.md",
             "docs/http-api.md", "docs/redis.md", "docs/policies.md")


def check_ports_agree(check, source, by_kind):
    """The manifest's port for each front is the one tallyd.toml, the nginx
    example and the pages of docs/ give it."""
    container = by_kind["StatefulSet"][0]["spec"]["template"]["spec"]["containers"][0]
    ports = {FRONTS[p["name"]]: p["containerPort"] for p in container["ports"]}
    toml = open(os.path.join(source, "cluster/deploy/debian/tallyd.toml")).read()
    for flag, number in re.findall(r"^#? ?([a-z]*-?port) = (\d+)", toml, re.M):
        check(ports.get(flag) == int(number), f"tallyd.toml: {flag} = {number} as in tally.yaml")
    nginx = open(os.path.join(source, "cluster/deploy/nginx/tally-auth-request.conf")).read()
    upstream = re.search(r"upstream tally \{\s*server 127\.0\.0\.1:(\d+);", nginx)
    check(upstream and int(upstream.group(1)) == ports["http-port"],
          "nginx example: tally's HTTP port as in tally.yaml")
    for page in PORT_DOCS:
        text = open(os.path.join(source, page)).read()
        for flag, number in re.findall(r"--((?:[a-z]+-)?port) (\d+)", text):
            check(number == "0" or ports.get(flag) == int(number),
                  f"{page}: --{flag} {number} as in tally.yaml")
    envoy = open(os.path.join(source, "docs/envoy.md")).read()
    for number in re.findall(r"port_value: (\d+)", envoy):
        check(int(number) == ports["grpc-port"], f"docs/envoy.md: port_value {number} is gRPC's")
