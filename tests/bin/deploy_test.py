#!/usr/bin/python3
"""Checks the deployment files of cluster/deploy/ and the .deb package.

  deploy_test.py files SOURCE_DIR TALLYD ALLOCATOR
                                    the systemd unit, the Kubernetes example
                                    and its image, and the default config;
                                    tallyd started with the pod's settings and
                                    the image's
  deploy_test.py config SOURCE_DIR TALLYD
                                    the default config uncommented block by
                                    block (deploy_config.py)
  deploy_test.py deb BUILD_DIR VERSION ALLOCATOR
                                    builds the .deb with cpack into a
                                    temporary directory and reads it with
                                    dpkg-deb (never installs it)

ALLOCATOR: what this build's tallyd allocates with, tcmalloc or system (a
sanitized build keeps the sanitizers' allocator).

Exit 0 when every check holds, 1 with the failures listed, 77 (ctest's
SKIP_RETURN_CODE) with a reason when a tool it needs is missing.
Runs with Debian's /usr/bin/python3 (python3-yaml).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_config  # noqa: E402
import deploy_kubernetes  # noqa: E402

SKIP = 77
failures = []

# Flags the files use that other branches add and this one does not have
# yet: the HTTP helper's admin port. The lead trims this list at merge.
PENDING_FLAGS = set()


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL: " + what)


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)


def read_unit(path):
    """The unit's keys: {(section, key): [values]}."""
    keys, section = {}, None
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        keys.setdefault((section, key.strip()), []).append(value.strip())
    return keys


def tallyd_options(tallyd):
    """The long flags tallyd --help lists, and the environment variables."""
    text = run([tallyd, "--help"]).stdout
    return set(re.findall(r"--([a-z0-9-]+)", text)), set(re.findall(r"Env:(TALLY_[A-Z0-9_]+)", text))


def env_flag(name):
    return name[len("TALLY_"):].lower().replace("_", "-")


def check_flags_exist(where, flags, envs, known_flags, known_envs):
    for flag in sorted(flags):
        check(flag in known_flags or flag in PENDING_FLAGS, f"{where}: --{flag} is no tallyd flag")
    for env in sorted(envs):
        check(env in known_envs or env_flag(env) in PENDING_FLAGS,
              f"{where}: {env} is no tallyd environment variable")


def check_unit(source, tallyd, known_flags, known_envs):
    path = os.path.join(source, "cluster/deploy/systemd/tallyd.service")
    unit = read_unit(path)
    service = lambda key: unit.get(("Service", key), [])
    check(service("Type") == ["notify"], "unit: Type=notify")
    exec_start = " ".join(service("ExecStart"))
    check("--config /etc/tally/tallyd.toml" in exec_start, "unit: ExecStart reads the config file")
    check(service("StateDirectory") == ["tally"], "unit: StateDirectory=tally")
    check(any("-HUP $MAINPID" in v for v in service("ExecReload")), "unit: ExecReload sends SIGHUP")
    check(service("KillSignal") == ["SIGTERM"], "unit: KillSignal=SIGTERM")
    stop = service("TimeoutStopSec")
    check(stop and int(stop[0]) >= 30, "unit: TimeoutStopSec covers drain, leave and final write")
    check(service("User") == ["tally"], "unit: runs as the tally user")
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                       ("PrivateTmp", "yes")]:
        check(service(key) == [value], f"unit: {key}={value}")
    check("/var/lib/tally" in " ".join(service("ReadWritePaths")), "unit: /var/lib/tally writable")
    check(service("LimitNOFILE"), "unit: LimitNOFILE")
    check_flags_exist("unit", set(re.findall(r"--([a-z0-9-]+)", exec_start)), set(), known_flags,
                      known_envs)
    # systemd's own check, on a copy whose ExecStart is this build's tallyd.
    if shutil.which("systemd-analyze") is None:
        print("note: systemd-analyze not installed; the unit's keys were checked by this script only")
        return
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "tallyd.service")
        with open(copy, "w") as out:
            out.write(open(path).read().replace("/usr/bin/tallyd", tallyd))
        verified = run(["systemd-analyze", "verify", copy])
        output = (verified.stdout + verified.stderr).strip()
        check(verified.returncode == 0 and not output,
              f"unit: systemd-analyze verify is silent (rc {verified.returncode}): {output}")


def check_kubernetes(source, known_flags, known_envs):
    """True when the example has one StatefulSet and one headless Service."""
    try:
        import yaml
    except ImportError:
        print("note: python3-yaml missing; the Kubernetes example is not checked")
        return
    path = os.path.join(source, "cluster/deploy/kubernetes/tally.yaml")
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by_kind = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], []).append(doc)
    headless = [s for s in by_kind.get("Service", []) if s["spec"].get("clusterIP") == "None"]
    check(len(headless) == 1, "k8s: one headless Service")
    check(len(by_kind.get("StatefulSet", [])) == 1, "k8s: one StatefulSet")
    if len(headless) != 1 or len(by_kind.get("StatefulSet", [])) != 1:
        return
    headless = headless[0]
    check(headless["spec"].get("publishNotReadyAddresses") is True,
          "k8s: the headless Service lists pods before they are ready (they must meet to be)")
    sts = by_kind["StatefulSet"][0]
    check(sts["spec"]["serviceName"] == headless["metadata"]["name"],
          "k8s: the StatefulSet's serviceName is the headless Service")
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    seed = env.get("TALLY_SEED") or ""
    check(seed.startswith(headless["metadata"]["name"] + "."),
          "k8s: TALLY_SEED is the headless Service's DNS name")
    check(str(ports.get("gossip")) == env.get("TALLY_GOSSIP_PORT") and seed.endswith(
        ":" + str(ports.get("gossip"))), "k8s: gossip port agrees in the seed, env and ports")
    check(str(ports.get("client")) == env.get("TALLY_PORT"), "k8s: client port agrees")
    check(str(ports.get("admin")) == env.get("TALLY_ADMIN_PORT"), "k8s: admin port agrees")
    claims = [c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])]
    check(len(claims) == 1 and mounts.get(claims[0]) == env.get("TALLY_DATA_DIR"),
          "k8s: the data directory is the volumeClaimTemplate's mount")
    check(any(v.get("secret", {}).get("secretName") == "tally-cluster-secret" for v in pod["volumes"]),
          "k8s: the Secret tally-cluster-secret is a volume (where tallyd reads it from:"
          " deploy_kubernetes.secret_mode)")
    for probe, path_ in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")]:
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path_ and get.get("port") == "admin", f"k8s: {probe} on admin {path_}")
    check("preStop" in container.get("lifecycle", {}), "k8s: a preStop hook")
    check(pod.get("terminationGracePeriodSeconds", 30) >= 20,
          "k8s: terminationGracePeriodSeconds leaves time for preStop, drain, leave and flush")
    check_flags_exist("k8s", set(), {n for n in env if n.startswith("TALLY_")}, known_flags,
                      known_envs)
    return True  # the file has the shape deploy_kubernetes.py reads further


def check_default_config(source, tallyd, allocator, known_flags, known_envs):
    path = os.path.join(source, "cluster/deploy/debian/tallyd.toml")
    text = open(path).read()
    check(re.search(r'^data-dir = "/var/lib/tally"$', text, re.M), "config: data-dir /var/lib/tally")
    # Commented-out keys too: an operator uncomments them as they are.
    keys = set(re.findall(r"^#? ?([a-z][a-z0-9-]*) = ", text, re.M))
    check_flags_exist("tallyd.toml", keys, set(), known_flags, known_envs)
    # tallyd takes the file as it is (it refuses a file with any key it does
    # not know), given a data directory and port of the test's own.
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        log = open(os.path.join(tmp, "log"), "w+")
        node = subprocess.Popen([tallyd, "--config", path, "--data-dir", tmp + "/data", "--port",
                                 "0", "--port-file", port_file, "--admin-port", "0"],
                                stdout=log, stderr=log)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file) and node.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        started = os.path.exists(port_file)
        if started and node.poll() is None:
            # The allocator the running daemon has mapped, not only what it was linked with.
            with open(f"/proc/{node.pid}/maps") as maps:
                tcmalloc = "libtcmalloc" in maps.read()
            check(tcmalloc == (allocator == "tcmalloc"),
                  f"allocator: tallyd runs with {allocator} (libtcmalloc mapped: {tcmalloc})")
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=20)
        log.seek(0)
        check(started, "config: tallyd starts with the default config: " + log.read())


def check_deb(build, version, allocator):
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps"):
        if shutil.which(tool) is None:
            skip(tool + " is not installed (dpkg-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        made = run(["cpack", "-G", "DEB", "-B", tmp, "--config", "CPackConfig.cmake"], cwd=build)
        debs = [f for f in os.listdir(tmp) if f.endswith(".deb")]
        check(made.returncode == 0 and len(debs) == 1, "deb: cpack made one .deb: " + made.stdout +
              made.stderr)
        if not debs:
            return
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        check(debs[0] == f"tally_{version}_{arch}.deb", "deb: named tally_<version>_<arch>.deb: " +
              debs[0])
        deb = os.path.join(tmp, debs[0])
        listing = run(["dpkg-deb", "-c", deb]).stdout
        for path, mode in [("./usr/bin/tallyd", "-rwxr-xr-x"), ("./usr/bin/tallyctl", "-rwxr-xr-x"),
                           ("./lib/systemd/system/tallyd.service", "-rw-r--r--"),
                           ("./etc/tally/tallyd.toml", "-rw-r--r--"),
                           ("./usr/share/doc/tally/copyright", "-rw-r--r--"),
                           ("./usr/share/doc/tally/README.md", "-rw-r--r--")]:
            check(re.search(rf"^{re.escape(mode)} root/root .* {re.escape(path)}$", listing, re.M),
                  f"deb: holds {path} ({mode}, root)")
        field = lambda name: run(["dpkg-deb", "-f", deb, name]).stdout.strip()
        check(field("Package") == "tally", "deb: Package tally")
        check(field("Version") == version, "deb: Version " + version)
        check(field("Architecture") == arch, "deb: Architecture " + arch)
        depends = field("Depends")
        needed_packages = ["adduser", "libc6", "librocksdb", "libcapnp", "libspdlog", "libssl3",
                           "libgrpc++"]
        if allocator == "tcmalloc":
            needed_packages.append("libtcmalloc-minimal4")
        for needed in needed_packages:
            check(needed in depends, f"deb: Depends on {needed}: {depends}")
        info = run(["dpkg-deb", "-I", deb]).stdout
        check("conffiles" in info and "postinst" in info, "deb: control has conffiles, postinst")
        control = os.path.join(tmp, "control")
        run(["dpkg-deb", "-e", deb, control])
        check(open(os.path.join(control, "conffiles")).read().split() == ["/etc/tally/tallyd.toml"],
              "deb: /etc/tally/tallyd.toml is a conffile")
        postinst = open(os.path.join(control, "postinst")).read()
        check("adduser --system" in postinst and os.access(os.path.join(control, "postinst"),
                                                            os.X_OK), "deb: postinst adds the user")
        # The packaged files, unpacked into the temporary directory only.
        root = os.path.join(tmp, "root")
        run(["dpkg-deb", "-x", deb, root])
        config = open(os.path.join(root, "etc/tally/tallyd.toml")).read()
        check('data-dir = "/var/lib/tally"' in config, "deb: the config's data dir is absolute")
        for binary in ("tallyd", "tallyctl"):
            out = run([os.path.join(root, "usr/bin", binary), "--version"]).stdout
            check(out.split("\n")[0] == f"{binary} {version}", f"deb: {binary} --version: {out!r}")
        check_client_library(build, root, listing, sanitized=allocator != "tcmalloc")


def check_client_library(build, root, listing, sanitized):
    """The .deb's C++ client library: examples/cpp/check.cc builds with its headers, static
    libraries and tally-client.pc alone, and checks against the .deb's own tallyd. A
    sanitized build's libraries need the sanitizers' runtime linked too."""
    for path in ("./usr/lib/libtally_client.a", "./usr/include/tally/protocol/client.h",
                 "./usr/lib/pkgconfig/tally-client.pc"):
        check(f" {path}\n" in listing, f"deb: holds {path}")
    source = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$",
                       open(os.path.join(build, "CMakeCache.txt")).read(), re.M).group(1)
    system_pc = run(["pkg-config", "--variable", "pc_path", "pkg-config"]).stdout.strip()
    env = dict(os.environ, PKG_CONFIG_SYSROOT_DIR=root,
               PKG_CONFIG_LIBDIR=os.path.join(root, "usr/lib/pkgconfig") + ":" + system_pc)
    flags = run(["pkg-config", "--cflags", "--libs", "tally-client"], env=env)
    check(flags.returncode == 0, "deb: pkg-config finds tally-client: " + flags.stderr)
    binary = os.path.join(root, "check")
    sanitizers = ["-fsanitize=address,undefined"] if sanitized else []
    built = run(["g++", "-std=c++20", os.path.join(source, "examples/cpp/check.cc"), "-o",
                 binary] + sanitizers + flags.stdout.split())
    check(built.returncode == 0, "deb: examples/cpp/check.cc builds against the client "
          "library: " + built.stdout + built.stderr)
    if built.returncode != 0:
        return
    port_file = os.path.join(root, "tallyd.port")
    tallyd = subprocess.Popen([os.path.join(root, "usr/bin/tallyd"), "--memory-only",
                               "--address", "127.0.0.1", "--port", "0", "--port-file", port_file],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline or tallyd.poll() is not None:
                break
            time.sleep(0.01)
        port = open(port_file).read().strip() if os.path.exists(port_file) else "0"
        out = run([binary, "127.0.0.1", port]).stdout
        check(re.fullmatch(r"(Check user:42: allowed, remaining [210]\n){3}"
                           r"Check user:42: denied, retry after [1-9][0-9]* ms\n", out),
              "deb: examples/cpp/check.cc checks against tallyd: " + out)
    finally:
        tallyd.send_signal(signal.SIGTERM)
        tallyd.wait(timeout=10)


def main():
    if sys.argv[1:2] == ["config"] and len(sys.argv) == 4:
        deploy_config.check_config_blocks(check, sys.argv[2], sys.argv[3])
    elif len(sys.argv) != 5 or sys.argv[1] not in ("files", "deb") or sys.argv[4] not in (
            "tcmalloc", "system"):
        print(__doc__)
        return 2
    elif sys.argv[1] == "files":
        source, tallyd, allocator = sys.argv[2], sys.argv[3], sys.argv[4]
        known_flags, known_envs = tallyd_options(tallyd)
        check_unit(source, tallyd, known_flags, known_envs)
        if check_kubernetes(source, known_flags, known_envs):
            by_kind = deploy_kubernetes.check_kubernetes_more(check, source)
            deploy_kubernetes.check_ports_agree(check, source, by_kind)
            image_env = deploy_kubernetes.check_dockerfile(check, source, by_kind, known_envs)
            deploy_kubernetes.run_pod(check, source, tallyd, by_kind)
            deploy_kubernetes.run_image(check, tallyd, image_env)
        check_default_config(source, tallyd, allocator, known_flags, known_envs)
    else:
        check_deb(sys.argv[2], sys.argv[3], sys.argv[4])
    print(f"{len(failures)} failures" if failures else "all checks hold")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
