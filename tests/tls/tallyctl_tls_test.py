#!/usr/bin/python3
"""tallyctl over TLS (--tls, --ca-file, --cert-file, --key-file,
--server-name) against real tallyd nodes started with --client-tls on:
checks and inspect with the test CA, a client certificate where one is
required, and clean refusals (exit 2 and a reason) without the CA, with
another CA, with a wrong server name, in plain text on a TLS port and over
TLS on a plaintext port.

Usage: tallyctl_tls_test.py TALLYD TALLYCTL MAKE_CERTS

Certificates are made at run time (tests/tls/make_certs.sh) in a temporary
directory removed at the end. Every tallyd runs on 127.0.0.1 with a port
chosen by the kernel, --memory-only; every tallyctl has a timeout.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
import cases as cases_lib  # noqa: E402

LIMIT = ["--limit", "5", "--window-ms", "3600000"]


class Node(cases_lib.Process):
    """One tallyd with tally's protocol port only."""

    def __init__(self, tallyd, root, extra):
        os.makedirs(root)
        self.log_path = os.path.join(root, "tallyd.log")
        self.log = open(self.log_path, "w")
        port_file = os.path.join(root, "port")
        self.process = subprocess.Popen(
            [tallyd, "--memory-only", "--address", "127.0.0.1", "--port", "0",
             "--port-file", port_file] + extra, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("tallyd did not start: " + self.log_text())
            time.sleep(0.01)
        self.port = int(open(port_file).read())


def main():
    tallyd, tallyctl, make_certs = sys.argv[1], sys.argv[2], sys.argv[3]
    root = tempfile.mkdtemp(prefix="tally-tallyctl-tls-")
    certs = os.path.join(root, "certs")
    subprocess.run(["sh", make_certs, certs], check=True, timeout=60)
    cert = lambda name: os.path.join(certs, name)  # noqa: E731
    server = ["--tls-cert-file", cert("node.pem"), "--tls-key-file", cert("node.key")]
    nodes = []
    try:
        nodes.append(Node(tallyd, os.path.join(root, "tls"), ["--client-tls", "on"] + server))
        nodes.append(Node(tallyd, os.path.join(root, "mutual"),
                          ["--client-tls", "on", "--client-tls-verify", "required",
                           "--tls-ca-file", cert("ca.pem")] + server))
        nodes.append(Node(tallyd, os.path.join(root, "plain"), []))
    except Exception:
        for node in nodes:
            print(node.log_text()[-3000:])
            node.stop()
        raise
    tls, mutual, plain = nodes

    def ctl(node, *args, env=None, host="127.0.0.1"):
        """(exit code, stdout, stderr) of tallyctl against node."""
        result = subprocess.run(
            [tallyctl, "--host", host, "--port", str(node.port), "--timeout-ms", "3000"] +
            list(args), capture_output=True, text=True, timeout=20,
            env=dict(os.environ, **(env or {})))
        return result.returncode, result.stdout, result.stderr

    ca = ["--ca-file", cert("ca.pem")]

    # check counts down over TLS with the test CA, and inspect sees the count.
    def case_check_and_inspect_over_tls():
        for remaining in (4, 3):
            code, out, err = ctl(tls, *ca, "--json", "check", "k", *LIMIT)
            assert code == 0, (out, err)
            assert json.loads(out)["remaining"] == remaining, out
        code, out, err = ctl(tls, *ca, "--json", "inspect", "k", "--window-ms", "3600000")
        assert code == 0, (out, err)
        assert [n["current"] for n in json.loads(out)["nodes"]] == [2], out
        code, out, err = ctl(tls, *ca, "stats")
        assert code == 0 and "checks 2" in out, (out, err)

    # The CA file and the server name come from TALLY_ variables too; a
    # certificate for 127.0.0.1 and localhost answers to either name.
    def case_environment_and_server_name():
        code, out, err = ctl(tls, "check", "env", *LIMIT,
                             env={"TALLY_CA_FILE": cert("ca.pem")})
        assert code == 0 and out.startswith("allowed"), (out, err)
        code, out, err = ctl(tls, *ca, "--server-name", "localhost", "check", "env", *LIMIT)
        assert code == 0, (out, err)
        code, out, err = ctl(tls, *ca, "check", "env", *LIMIT, host="localhost")
        assert code == 0, (out, err)

    # Without the test CA (the system's CAs), with another CA, or a name the
    # certificate does not carry: refused at the handshake, exit 2, nothing counted.
    def case_refused_without_the_ca():
        for args, reason in ((["--tls"], "certificate verify failed"),
                             (["--ca-file", cert("rogue-ca.pem")], "certificate verify failed"),
                             (ca + ["--server-name", "tally.example"], "hostname mismatch")):
            code, out, err = ctl(tls, *args, "check", "refused", *LIMIT)
            assert code == 2, (args, out, err)
            assert "unavailable: TLS handshake" in err and reason in err, (args, err)
        code, out, err = ctl(tls, *ca, "--json", "peek", "refused", *LIMIT)
        assert code == 0 and json.loads(out)["remaining"] == 5, out

    # Plain text to a TLS port and TLS to a plaintext port: exit 2, saying why.
    def case_tls_mismatch_is_named():
        code, out, err = ctl(tls, "check", "k", *LIMIT)
        assert code == 2 and "--client-tls on closes clients that do not speak TLS" in err, err
        code, out, err = ctl(plain, *ca, "check", "k", *LIMIT)
        assert code == 2 and "TLS handshake" in err, err

    # A node that requires client certificates: refused without one and with
    # one from another CA; served with the test CA's.
    def case_client_certificate():
        code, out, err = ctl(mutual, *ca, "check", "m", *LIMIT)
        assert code == 2 and "requires a client certificate" in err, err
        code, out, err = ctl(mutual, *ca, "--cert-file", cert("rogue.pem"), "--key-file",
                             cert("rogue.key"), "check", "m", *LIMIT)
        assert code == 2 and "unavailable" in err, err
        code, out, err = ctl(mutual, *ca, "--cert-file", cert("client.pem"), "--key-file",
                             cert("client.key"), "check", "m", *LIMIT)
        assert code == 0 and out.startswith("allowed"), (out, err)

    # Flags that do not fit together, or a key that is not the certificate's,
    # are invalid_argument, before or at the handshake.
    def case_bad_tls_flags():
        for args, reason in ((["--cert-file", cert("client.pem"), "--key-file",
                               cert("client.key")], "need --tls or --ca-file"),
                             (ca + ["--cert-file", cert("client.pem")], "go together"),
                             (ca + ["--cert-file", cert("client.pem"), "--key-file",
                                    cert("rogue.key")], "does not hold the key")):
            code, out, err = ctl(mutual, *args, "check", "m", *LIMIT)
            assert code == 2 and "invalid_argument" in err and reason in err, (args, err)

    passed, failed = cases_lib.run([
        case_check_and_inspect_over_tls, case_environment_and_server_name,
        case_refused_without_the_ca, case_tls_mismatch_is_named, case_client_certificate,
        case_bad_tls_flags])
    for node in nodes[1:]:
        if failed:
            print(node.log_text()[-3000:])
        node.stop()
    return cases_lib.finish(tls, root, passed, failed)


if __name__ == "__main__":
    sys.exit(main())
