#!/usr/bin/python3
"""nginx's auth_request in front of an API, asking tally per request, with the
example configuration shipped in cluster/deploy/nginx/ (its addresses
replaced by run-time loopback ports): allowed requests reach the API and
carry tally's RateLimit headers; over the limit nginx answers 429 with
Retry-After and the RateLimit headers, and the API is not reached.

Usage: nginx_auth_request_test.py TALLYD NGINX_EXAMPLE_CONF

Runs Debian's /usr/sbin/nginx in the foreground (daemon off) with a temporary
prefix, pid file and logs; skips, saying so, only when nginx is not installed.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tally_http import Node, curl, run_cases

NGINX = "/usr/sbin/nginx"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port, process, log_path, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("nginx did not start: " + open(log_path).read())


def start_nginx(root, example, tally_port):
    """nginx with the example's server, and the API it fronts, on free ports."""
    front_port, api_port = free_port(), free_port()
    prefix = os.path.join(root, "nginx")
    os.makedirs(os.path.join(prefix, "tmp"))
    with open(example) as f:
        conf = f.read()
    for fixed, actual in (("127.0.0.1:7480", tally_port), ("127.0.0.1:8081", api_port),
                          ("127.0.0.1:8080", front_port)):
        assert fixed in conf, f"the example no longer has {fixed}"
        conf = conf.replace(fixed, f"127.0.0.1:{actual}")
    with open(os.path.join(prefix, "tally.conf"), "w") as f:
        f.write(conf)
    error_log = os.path.join(prefix, "error.log")
    temp = os.path.join(prefix, "tmp")
    with open(os.path.join(prefix, "nginx.conf"), "w") as f:
        f.write(f"""
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {error_log} info;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {temp}; proxy_temp_path {temp}; fastcgi_temp_path {temp};
  uwsgi_temp_path {temp}; scgi_temp_path {temp};
  include {prefix}/tally.conf;
  server {{ listen 127.0.0.1:{api_port}; location / {{ return 200 "hello from the api\\n"; }} }}
}}
""")
    process = subprocess.Popen([NGINX, "-p", prefix, "-c", os.path.join(prefix, "nginx.conf"),
                                "-e", error_log], stdout=subprocess.DEVNULL,
                               stderr=subprocess.STDOUT)
    wait_for_port(front_port, process, error_log)
    return process, front_port


def main():
    tallyd, example = sys.argv[1], sys.argv[2]
    if not os.path.exists(NGINX):
        print(f"SKIPPED: {NGINX} is not installed (Debian's nginx package); nothing was tested")
        return 0
    root = tempfile.mkdtemp(prefix="tally-nginx-")
    node = Node(tallyd, os.path.join(root, "tally"), extra=["--memory-only"])
    nginx, port = start_nginx(root, example, node.ports["http"])
    url = f"http://127.0.0.1:{port}/some/page"

    def case_allowed_requests_reach_the_api_with_tally_headers():
        for remaining in (1, 0):
            answer = curl(url)
            assert answer.status == 200, answer.status
            assert answer.body == "hello from the api\n", answer.body
            assert answer.header("RateLimit-Policy") == '"per_ip";q=2;w=3600', answer.headers
            reset = answer.header("X-RateLimit-Reset")
            assert answer.header("RateLimit") == f'"per_ip";r={remaining};t={reset}'
            assert answer.header("X-RateLimit-Limit") == "2"
            assert answer.header("X-RateLimit-Remaining") == str(remaining)
            assert answer.header("Retry-After") is None

    def case_over_the_limit_is_429_with_retry_after_and_headers():
        answer = curl(url)
        assert answer.status == 429, (answer.status, answer.body)
        assert answer.body == '{"error":"rate limited"}\n', answer.body
        retry_after = int(answer.header("Retry-After"))
        assert 0 < retry_after <= 3600, retry_after
        assert answer.header("X-RateLimit-Reset") == str(retry_after)
        assert answer.header("X-RateLimit-Remaining") == "0"
        assert answer.header("RateLimit-Policy") == '"per_ip";q=2;w=3600'
        assert answer.header("RateLimit") == f'"per_ip";r=0;t={retry_after}', answer.headers

    def case_tally_counted_the_subrequests():
        # nginx's subrequests used 127.0.0.1's two requests of the hour.
        answer = curl(node.url("/v1/policy?domain=edge&remote_address=127.0.0.1"))
        assert answer.status == 429, answer.status

    def stop():
        nginx.send_signal(signal.SIGQUIT)
        try:
            nginx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            nginx.kill()
            nginx.wait()
        node.stop()
        shutil.rmtree(root, ignore_errors=True)

    return run_cases([case_allowed_requests_reach_the_api_with_tally_headers,
                      case_over_the_limit_is_429_with_retry_after_and_headers,
                      case_tally_counted_the_subrequests], stop)


if __name__ == "__main__":
    sys.exit(main())
