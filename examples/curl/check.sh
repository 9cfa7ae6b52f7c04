#!/bin/sh
# tally's HTTP API from curl: four checks of one limit (3 per minute), read
# from the status and the RateLimit headers of each answer.
# Usage: sh check.sh [URL]   (default http://127.0.0.1:8080, tallyd --http-port)
set -eu
url=${1:-http://127.0.0.1:8080}
for i in 1 2 3 4; do
  curl -sS --max-time 5 -o /dev/null \
      -w '%{http_code} %header{x-ratelimit-remaining} %header{retry-after}\n' \
      -H 'Content-Type: application/json' -d '{"key":"user:42","limit":3,"window_ms":60000}' \
      "$url/v1/check" |
    while read -r status remaining retry_after; do
      if [ "$status" = 200 ]; then
        echo "POST /v1/check user:42: allowed, remaining $remaining"
      else
        echo "POST /v1/check user:42: denied, retry after $retry_after s ($status)"
      fi
    done
done
