"""tally's HTTP API from Python's standard library: four checks of one limit
(3 per minute), with the RateLimit headers of each answer.

Usage: python3 http_example.py [URL]   (default http://127.0.0.1:8080, tallyd --http-port)
"""
import json
import sys
import urllib.error
import urllib.request

url = (sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080") + "/v1/check"
body = json.dumps({"key": "user:42", "limit": 3, "window_ms": 60000}).encode()

for _ in range(4):
    request = urllib.request.Request(url, data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            decision = json.load(response)
            print(f"POST /v1/check user:42: allowed, remaining {decision['remaining']}")
    except urllib.error.HTTPError as denied:  # 429, or 403 when no wait helps
        print(f"POST /v1/check user:42: denied, retry after {denied.headers['Retry-After']} s"
              f" ({denied.code})")
