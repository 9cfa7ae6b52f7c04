"""tally's Redis front from redis-py: CL.THROTTLE (redis-cell's command) and
TALLY.CHECK, four requests each against a limit of 3.

Usage: python3 resp_example.py [HOST:PORT]   (default 127.0.0.1:6380, tallyd --resp-port)
"""
import sys

import redis

host, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:6380").rsplit(":", 1)
r = redis.Redis(host=host, port=int(port), socket_timeout=5)

for _ in range(4):
    # A bucket of 3 (max_burst 2) refilled with 3 tokens per 60 s.
    limited, limit, remaining, retry_after, reset_after = r.execute_command(
        "CL.THROTTLE", "user:7", 2, 3, 60)
    if limited:
        print(f"CL.THROTTLE user:7: denied, retry after {retry_after} s")
    else:
        print(f"CL.THROTTLE user:7: allowed, remaining {remaining}")

for _ in range(4):
    # A sliding window of 60 s holding 3 requests. RESP2 replies name/value pairs.
    reply = r.execute_command("TALLY.CHECK", "user:42", "sliding_counter", 3, 60000)
    decision = dict(zip(reply[::2], reply[1::2]))
    if decision[b"allowed"]:
        print(f"TALLY.CHECK user:42: allowed, remaining {decision[b'remaining']}")
    else:
        print(f"TALLY.CHECK user:42: denied, retry after {decision[b'retry_after_ms']} ms")
