#!/usr/bin/python3
"""tallyd's client ports over TLS (--client-tls), asked by clients tally did
not write: curl (HTTP front, admin port), Python's redis with ssl=True and
redis-cli --tls (RESP front), `openssl s_client` (tally's protocol port and
the gRPC port's handshake); client certificates required, refused without one
or with one from another CA; Envoy's ShouldRateLimit over TLS by Python's
grpcio (gRPC's own credentials), a client certificate required there too; a plaintext client on a TLS port, a TLS client
on a plaintext port, a handshake that never completes; and the start-up
refusals of options that do not fit together.

Usage: tls_clients_test.py TALLYD MAKE_CERTS PROTO_DIR

Certificates are made at run time with the openssl CLI (MAKE_CERTS, i.e.
tests/tls/make_certs.sh) in a temporary directory removed at the end. Every
tallyd runs on 127.0.0.1 with ports chosen by the kernel; every socket,
request and process has a timeout.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import grpc
import redis

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import cases as cases_lib  # noqa: E402
import rls_protos  # noqa: E402

FRAME_TIMEOUT_MS = 500
CHECK = "/v1/check?key={}&limit=5&window_ms=3600000"


class Node(cases_lib.Process):
    """One tallyd with the protocol, HTTP, RESP, admin and gRPC ports."""

    def __init__(self, tallyd, root, extra):
        os.makedirs(root)
        self.root = root
        self.log_path = os.path.join(root, "tallyd.log")
        self.log = open(self.log_path, "w")
        names = ("port", "http", "resp", "admin", "grpc")
        files = {name: os.path.join(root, name + ".port") for name in names}
        # The gRPC port needs policies: none, so every domain is unknown and OK.
        os.makedirs(os.path.join(root, "policies"))
        args = [tallyd, "--memory-only", "--address", "127.0.0.1",
                "--frame-timeout-ms", str(FRAME_TIMEOUT_MS),
                "--policy-dir", os.path.join(root, "policies")]
        for name in names:
            flag = "--port" if name == "port" else f"--{name}-port"
            args += [flag, "0", flag + "-file", files[name]]
        self.process = subprocess.Popen(args + list(extra), stdout=self.log,
                                        stderr=subprocess.STDOUT)
        self.ports = {name: self.wait_for(files[name]) for name in names}

    def wait_for(self, path, timeout=10):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path) or not open(path).read().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"tallyd did not write {path}: " + self.log_text())
            time.sleep(0.01)
        return int(open(path).read())

    def wait_for_log(self, text, timeout=5):
        """True once `text` is in the log (warnings are rate-limited: one a second)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log_text():
                return True
            time.sleep(0.05)
        raise AssertionError(f"'{text}' not in the log:\n" + self.log_text()[-3000:])


def curl(url, *args):
    """(exit code, body, stderr) of one curl request."""
    result = subprocess.run(["curl", "-sS", "--max-time", "5"] + list(args) + [url],
                            capture_output=True, timeout=15, text=True)
    return result.returncode, result.stdout, result.stderr


def s_client(port, *args):
    """openssl s_client's output for a handshake with 127.0.0.1:port (stdin closed)."""
    result = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}"] + list(args),
                            stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
    return (result.stdout + result.stderr).decode("utf-8", "replace")


def refusal(tallyd, *args):
    """tallyd's exit code and output when started with `args` (it must refuse at once)."""
    result = subprocess.run([tallyd, "--memory-only", "--port", "0"] + list(args),
                            capture_output=True, timeout=15, text=True)
    return result.returncode, result.stdout + result.stderr


def main():
    tallyd, make_certs, proto_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    root = tempfile.mkdtemp(prefix="tally-tls-")
    rls_pb2 = rls_protos.generate(proto_dir, root)
    certs = os.path.join(root, "certs")
    subprocess.run(["sh", make_certs, certs], check=True, timeout=60)
    cert = lambda name: os.path.join(certs, name)  # noqa: E731
    server_files = ["--tls-cert-file", cert("node.pem"), "--tls-key-file", cert("node.key")]
    nodes = []
    try:
        tls = Node(tallyd, os.path.join(root, "tls"), ["--client-tls", "on"] + server_files)
        nodes.append(tls)
        mutual = Node(tallyd, os.path.join(root, "mutual"),
                      ["--client-tls", "on", "--client-tls-verify", "required",
                       "--tls-ca-file", cert("ca.pem")] + server_files)
        nodes.append(mutual)
        plain = Node(tallyd, os.path.join(root, "plain"), [])
        nodes.append(plain)
    except Exception:
        for node in nodes:
            print(node.log_text()[-3000:])
            node.stop()
        raise
    https = lambda node, path, port="http": f"https://127.0.0.1:{node.ports[port]}{path}"  # noqa

    # curl checks over HTTPS, trusting only the test CA: the decisions count down.
    def case_curl_checks_over_https():
        for remaining in (4, 3):
            code, body, err = curl(https(tls, CHECK.format("curl")), "--cacert", cert("ca.pem"))
            assert code == 0, err
            assert f'"remaining":{remaining}' in body.replace(" ", ""), body

    # The admin port speaks TLS too: /healthz and /metrics by curl.
    def case_admin_port_over_https():
        code, body, err = curl(https(tls, "/healthz", "admin"), "--cacert", cert("ca.pem"))
        assert code == 0 and "ok" in body.lower(), (code, body, err)

    # Python's redis with ssl=True, and redis-cli --tls, on the RESP port.
    def case_redis_clients_over_tls():
        client = redis.Redis(host="127.0.0.1", port=tls.ports["resp"], ssl=True,
                             ssl_ca_certs=cert("ca.pem"), socket_timeout=5)
        assert client.ping()
        first = client.execute_command("CL.THROTTLE", "py", 4, 5, 3600, 1)
        assert first[0] == 0, first
        out = subprocess.run(["redis-cli", "--tls", "--cacert", cert("ca.pem"), "-p",
                              str(tls.ports["resp"]), "PING"],
                             capture_output=True, timeout=15, text=True)
        assert out.stdout.strip() == "PONG", (out.stdout, out.stderr)

    # openssl s_client completes TLS 1.3 with tally's protocol port and the
    # gRPC port (gRPC's own credentials, ALPN h2), and verifies the chain.
    def case_s_client_on_protocol_and_grpc_ports():
        for port, extra in ((tls.ports["port"], []), (tls.ports["grpc"], ["-alpn", "h2"])):
            out = s_client(port, "-CAfile", cert("ca.pem"), *extra)
            assert "Verify return code: 0 (ok)" in out, out
            assert "TLSv1.3" in out, out

    # Envoy's ShouldRateLimit over TLS from Python's grpcio trusting the test CA;
    # where client certificates are required, refused without one, answered with one.
    def case_grpc_over_tls():
        def call(node, certificate=None):
            credentials = grpc.ssl_channel_credentials(
                root_certificates=open(cert("ca.pem"), "rb").read(),
                private_key=open(cert(certificate + ".key"), "rb").read() if certificate else None,
                certificate_chain=open(cert(certificate + ".pem"), "rb").read()
                if certificate else None)
            with grpc.secure_channel(f"127.0.0.1:{node.ports['grpc']}", credentials,
                                     options=[("grpc.ssl_target_name_override", "localhost")]
                                     ) as channel:
                should = channel.unary_unary(
                    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                    request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                    response_deserializer=rls_pb2.RateLimitResponse.FromString)
                message = rls_pb2.RateLimitRequest(domain="edge")
                message.descriptors.add().entries.add(key="k", value="v")
                try:
                    return should(message, timeout=5).overall_code
                except grpc.RpcError as error:
                    return error.code()
        ok = rls_pb2.RateLimitResponse.OK
        assert call(tls) == ok
        assert call(mutual) == grpc.StatusCode.UNAVAILABLE
        assert call(mutual, "client") == ok

    # A plaintext client on a TLS port: closed, and the log says why.
    def case_plaintext_client_on_tls_port():
        code, _, _ = curl(f"http://127.0.0.1:{tls.ports['http']}/healthz")
        assert code != 0
        tls.wait_for_log("does not speak TLS")

    # A connection that never completes its handshake is closed after
    # --frame-timeout-ms, logged; a client meanwhile is served.
    def case_stalled_handshake_is_closed():
        time.sleep(1.1)  # a second since the last warning: this one is not suppressed
        with socket.create_connection(("127.0.0.1", tls.ports["http"]), timeout=10) as stalled:
            code, _, err = curl(https(tls, "/healthz", "admin"), "--cacert", cert("ca.pem"))
            assert code == 0, err
            started = time.monotonic()
            assert stalled.recv(1) == b""
            waited_ms = (time.monotonic() - started) * 1000
            assert waited_ms < FRAME_TIMEOUT_MS + 2000, waited_ms
        tls.wait_for_log("TLS handshake not complete")

    # A required client certificate: refused without one (logged), and with
    # one from another CA (logged); served with the test CA's.
    def case_client_certificate_required():
        url = https(mutual, CHECK.format("mtls"))
        code, _, _ = curl(url, "--cacert", cert("ca.pem"))
        assert code != 0
        mutual.wait_for_log("a certificate is required")
        time.sleep(1.1)
        code, _, _ = curl(url, "--cacert", cert("ca.pem"), "--cert", cert("rogue.pem"),
                          "--key", cert("rogue.key"))
        assert code != 0
        mutual.wait_for_log("does not chain to the CA file")
        code, body, err = curl(url, "--cacert", cert("ca.pem"), "--cert", cert("client.pem"),
                               "--key", cert("client.key"))
        assert code == 0 and '"allowed":true' in body.replace(" ", ""), (code, body, err)
        client = redis.Redis(host="127.0.0.1", port=mutual.ports["resp"], ssl=True,
                             ssl_ca_certs=cert("ca.pem"), ssl_certfile=cert("client.pem"),
                             ssl_keyfile=cert("client.key"), socket_timeout=5)
        assert client.ping()

    # A TLS client on a plaintext port: closed, and the log says so.
    def case_tls_client_on_plaintext_port():
        code, _, _ = curl(https(plain, "/healthz", "admin"), "--cacert", cert("ca.pem"))
        assert code != 0
        plain.wait_for_log("a TLS handshake on a plaintext port")
        code, body, _ = curl(f"http://127.0.0.1:{plain.ports['admin']}/healthz")
        assert code == 0, body

    # Options that do not fit together stop tallyd at once, naming the flag or file.
    def case_start_refusals():
        for args, expected in (
                (["--client-tls", "on"], "needs --tls-cert-file and --tls-key-file"),
                (["--client-tls", "on", "--tls-cert-file", cert("node.pem"), "--tls-key-file",
                  cert("client.key")], "does not hold the key of the certificate"),
                (["--client-tls", "on", "--tls-cert-file", cert("missing.pem"),
                  "--tls-key-file", cert("node.key")], "cannot read the certificate file"),
                (server_files, "neither is set"),
                (["--client-tls-verify", "required"], "needs --client-tls on"),
                (["--client-tls", "on", "--client-tls-verify", "optional"] + server_files,
                 "needs --tls-ca-file"),
                (["--gossip-tls", "psk"], "needs a cluster"),
                (["--gossip-tls", "tls"], "--gossip-tls"),
        ):
            code, output = refusal(tallyd, *args)
            assert code == 1 and expected in output, (args, code, output)

    cases = [case_curl_checks_over_https, case_admin_port_over_https,
             case_redis_clients_over_tls, case_s_client_on_protocol_and_grpc_ports,
             case_grpc_over_tls,
             case_plaintext_client_on_tls_port, case_stalled_handshake_is_closed,
             case_client_certificate_required, case_tls_client_on_plaintext_port,
             case_start_refusals]
    passed, failed = cases_lib.run(cases)
    for node in nodes[:-1]:
        if failed:
            print(node.log_text()[-3000:])
        node.stop()
    return cases_lib.finish(nodes[-1], root, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
