#!/usr/bin/env bash
# tallyd's RESP front driven by redis-cli (Debian's redis-tools), a client
# tally did not write: its one-shot commands, RESP3 (-3), AUTH (-a), commands
# read from stdin, and --pipe (raw protocol, closed by its ECHO marker).
#
# Usage: resp_cli_test.sh TALLYD
# Starts one tallyd on 127.0.0.1 (ports chosen by the kernel) in a temporary
# directory, removed at the end with the process stopped. Prints each check;
# exit status 0 only when all passed. Bounded: every redis-cli call has a
# timeout.
set -uo pipefail
tallyd=$1
dir=$(mktemp -d /tmp/tally-resp-cli-XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

printf 'pw-%s\n' "$RANDOM$RANDOM" >"$dir/password"
chmod 600 "$dir/password"
password=$(cat "$dir/password")
"$tallyd" --memory-only --address 127.0.0.1 --port 0 --resp-port 0 \
  --resp-port-file "$dir/resp.port" --resp-password-file "$dir/password" >"$dir/tallyd.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  [ -s "$dir/resp.port" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
[ -s "$dir/resp.port" ] || { cat "$dir/tallyd.log"; echo "tallyd did not start"; exit 1; }
port=$(cat "$dir/resp.port")

failed=0
# check NAME EXPECTED ACTUAL: one check, printed.
check() {
  if [ "$2" == "$3" ]; then
    echo "PASS $1"
  else
    echo "FAIL $1"
    echo "  expected: $(printf '%q' "$2")"
    echo "  actual:   $(printf '%q' "$3")"
    failed=$((failed + 1))
  fi
}
cli() { timeout 10 redis-cli -h 127.0.0.1 -p "$port" -a "$password" --no-auth-warning "$@" 2>&1; }

check "without AUTH: NOAUTH" "NOAUTH Authentication required." \
  "$(timeout 10 redis-cli -h 127.0.0.1 -p "$port" PING 2>&1)"
check "wrong password: WRONGPASS" \
  "AUTH failed: WRONGPASS invalid username-password pair or user is disabled." \
  "$(timeout 10 redis-cli -h 127.0.0.1 -p "$port" -a nope --no-auth-warning PING 2>&1 | head -1)"
check "PING" "PONG" "$(cli PING)"
check "CL.THROTTLE: redis-cell's README example" "$(printf '0\n16\n15\n-1\n2')" \
  "$(cli CL.THROTTLE user123 15 30 60)"
check "commands from stdin: a burst of 1 and then limited" "$(printf '0\n1\n0\n-1\n60\n1\n1\n0\n60\n60')" \
  "$(printf 'CL.THROTTLE once 0 1 60\nCL.THROTTLE once 0 1 60\n' | cli)"
check "TALLY.CHECK in RESP3: a map" \
  "$(printf 'allowed 1\nlimit 5\nremaining 2\nretry_after_ms 0')" \
  "$(cli -3 TALLY.CHECK cli:k fixed_window 5 3600000 3 | head -4)"
check "HELLO 3 says the protocol" "proto 3" "$(cli HELLO 3 | grep '^proto')"
check "unknown command" "ERR unknown command 'SET', with args beginning with: 'a' 'b' " \
  "$(cli SET a b)"
check "SELECT 1" "ERR DB index is out of range" "$(cli SELECT 1)"
check "INFO tally holds tally's stats" "keys:3" "$(cli INFO tally | tr -d '\r' | grep '^keys:')"
check "COMMAND COUNT" "12" "$(cli COMMAND COUNT)"

# --pipe: 100 raw commands, then redis-cli's own CRLF and ECHO marker.
command=$'*5\r\n$11\r\nCL.THROTTLE\r\n$4\r\npipe\r\n$2\r\n49\r\n$2\r\n50\r\n$4\r\n3600\r\n'
check "--pipe: every reply arrives, none an error" "errors: 0, replies: 100" \
  "$(for _ in $(seq 100); do printf '%s' "$command"; done | cli --pipe | tail -1)"
check "after --pipe the bucket of 50 is empty" "$(printf '1\n50\n0')" \
  "$(cli CL.THROTTLE pipe 49 50 3600 | head -3)"

kill -0 "$pid" 2>/dev/null || { echo "FAIL tallyd died"; failed=$((failed + 1)); }
[ "$failed" -eq 0 ] || tail -20 "$dir/tallyd.log"
echo "$failed failed"
[ "$failed" -eq 0 ]
