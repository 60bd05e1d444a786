#!/usr/bin/env bash
# test_ax_worker.sh - ax-worker by itself, against a private redis-server (a
# free loopback port, no persistence) and ax-upstream (--port 0):
#   - a drain that times out (--drain 0 and 500, handlers parked in a 5 s
#     HTTP call at SIGTERM): the counters it prints are final and add up,
#     executed = _ok + _failed + _timed_out + _cancelled (here 10 = 10
#     cancelled), the ledger has a line for each, and the consumer's own
#     books balance (abandoned 10, held 0);
#   - scenario files it refuses at parse time, FILE:LINE and exit 2;
#   - flags it refuses, exit 2.
# Its exit-2 cases beside ax-demo --cluster's are in test_ax_demo_cluster.sh.
# Skips (exit 77) only when redis-server or redis-cli is not installed.
#
# usage: tests/test_ax_worker.sh path/to/ax-worker path/to/ax-upstream
set -euo pipefail

WORKER=${1:?usage: $0 path/to/ax-worker path/to/ax-upstream}
UP=${2:?usage: $0 path/to/ax-worker path/to/ax-upstream}
for b in redis-server redis-cli; do
    if ! command -v "$b" >/dev/null 2>&1; then
        echo "$b is not installed (Debian: apt-get install redis-server): skipped"
        exit 77
    fi
done
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL: python3 not installed (Debian: apt-get install python3)" >&2
    exit 1
fi

TMP=$(mktemp -d)
rpid=
upid=
cleanup() {
    if [ -n "$upid" ]; then kill -TERM "$upid" 2>/dev/null || true; wait "$upid" 2>/dev/null || true; fi
    if [ -n "$rpid" ]; then kill -KILL "$rpid" 2>/dev/null || true; wait "$rpid" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
fail=0
bad() {
    fail=1
    echo "FAIL: $*" >&2
}

# redis-server on a free port (one the kernel just gave out), in $TMP.
for _ in 1 2 3; do
    RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$TMP" \
        --logfile "$TMP/redis.log" &
    rpid=$!
    for _ in $(seq 50); do
        redis-cli -p "$RPORT" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
    redis-cli -p "$RPORT" ping 2>/dev/null | grep -q PONG && break
    kill -KILL "$rpid" 2>/dev/null || true
    wait "$rpid" 2>/dev/null || true
    rpid=
done
[ -n "$rpid" ] || { echo "FAIL: redis-server did not start" >&2; exit 1; }
R=(redis-cli -p "$RPORT")

# ax-upstream: /quote answers after 5 s, longer than any drain below.
"$UP" --port 0 --endpoint '/quote latency=fixed:5s' >"$TMP/up.out" 2>"$TMP/up.err" &
upid=$!
for _ in $(seq 50); do grep -q '^listening on ' "$TMP/up.out" 2>/dev/null && break; sleep 0.1; done
UPADDR=$(sed -n 's/^listening on //p' "$TMP/up.out")
[ -n "$UPADDR" ] || { echo "FAIL: ax-upstream did not start" >&2; exit 1; }

# put N quote messages on QUEUE's NORMAL stream, as ax_redis_submit writes
# them (src/redis/queue.c, sub_build: kind, payload, trace id, timeout ms,
# max retries, deadline, attempt) into the stream and group it creates.
put() {
    local queue=$1 n=$2 key="ax:{$1}:normal"
    "${R[@]}" XGROUP CREATE "$key" ax 0 MKSTREAM >/dev/null
    for i in $(seq "$n"); do
        "${R[@]}" XADD "$key" '*' k quote p x t "tr-$queue-$i" to 10000 r 0 dl 0 a 0 >/dev/null
    done
}

# expect2 WHAT MESSAGE ARG...: ax-worker exits 2 with MESSAGE on stderr.
expect2() {
    local what=$1 msg=$2
    shift 2
    local rc=0
    # A refusal exits at once; the bound is for liveness only (a busy machine).
    timeout -s TERM 60 "$WORKER" "$@" >"$TMP/o" 2>"$TMP/e" || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -qF -- "$msg" "$TMP/e"; then
        bad "$what: exit $rc, want 2 and '$msg'; stderr: $(head -1 "$TMP/e")"
    else
        echo "ok: $what"
    fi
}

# --- scenario files: refused at the line, exit 2 ------------------------------------------
# Two classes of one name: the second kind's ax_class_register said "resource
# busy" at start (exit 1).
printf 'class report path=/report timeout=1s\nclass report path=/r2 timeout=1s\n' >"$TMP/dupclass.conf"
expect2 "--config: a class defined twice" "dupclass.conf:2: class report is defined twice" \
    --url "http://$UPADDR" --redis "127.0.0.1:$RPORT" --queue dupclass --config "$TMP/dupclass.conf"

# A NUL byte ended the line for the parser: the rest of it dropped, and the
# class served without its path.
printf 'class quote timeout=1s\0 path=/q\n' >"$TMP/nul.conf"
expect2 "--config: NUL in a line" "nul.conf:1: NUL byte in line" \
    --url "http://$UPADDR" --redis "127.0.0.1:$RPORT" --queue nul --config "$TMP/nul.conf"

# --- flags: exit 2 -------------------------------------------------------------------------
# A --url without a host: the class paths became host names ("http://" +
# "/quote": a GET of host "quote"), and it ran. ax-demo's rule now
# (tools/demo/url.c), which refused it.
for u in 'http://' 'http:///x' 'http://:80'; do
    expect2 "--url $u" "--url: '$u' has no host" --url "$u" --redis "127.0.0.1:$RPORT" --queue nohost
done
# (review) A query or a fragment took the class paths after it ("?x=1" +
# "/quote" asked for "/"), and port 0 reaches nothing: refused, as ax-demo.
expect2 "--url with a query" "has a query" --url "http://127.0.0.1:1?x=1" \
    --redis "127.0.0.1:$RPORT" --queue q
expect2 "--url with a fragment" "has a fragment" --url "http://127.0.0.1:1#f" \
    --redis "127.0.0.1:$RPORT" --queue q
expect2 "--url with port 0" "has port 0" --url "http://127.0.0.1:0" --redis "127.0.0.1:$RPORT" \
    --queue q

# A --name over ax_redis's 127 bytes: exit 1 and no usage, as if it could
# not run; a bad argument is exit 2 (tools/README.md).
long=$(printf 'w%.0s' $(seq 200))
expect2 "--name of 200 bytes" "--name must be 1-127 bytes (it has 200)" \
    --url "http://$UPADDR" --redis "127.0.0.1:$RPORT" --queue longname --name "$long"

# (trial) A name outside ax_redis's alphabet was refused by the library
# (exit 1, "cannot run"), a long one here (exit 2): both are bad arguments.
expect2 "--name with a space" "--name 'a b': only A-Z a-z 0-9 _ . : -" \
    --url "http://$UPADDR" --redis "127.0.0.1:$RPORT" --queue q --name 'a b'
# (trial) A bare IPv6 address was split at its last colon: "::1:6379" ran
# against [::1]:6379, though it is an address of its own.
expect2 "--redis with bare IPv6" "an IPv6 address goes in brackets" \
    --url "http://$UPADDR" --redis "::1:$RPORT" --queue q
# (trial) A --metrics value that is no address exited 1, as one that cannot
# be listened on does.
expect2 "--metrics bogus" "--metrics: ax_metrics_serve: address 'bogus' is not host:port" \
    --url "http://$UPADDR" --redis "127.0.0.1:$RPORT" --queue q --metrics bogus
# (trial) A URL was told "an IPv6 address goes in brackets".
expect2 "--redis as a URL" "give HOST:PORT, not a URL" \
    --url "http://$UPADDR" --redis "redis://127.0.0.1:$RPORT" --queue q

# requests: how many requests ax-upstream has had (its /stats).
requests() {
    curl -s "http://$UPADDR/stats" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["requests"]["total"])'
}

# counter NAME FILE: the value of ax-worker's "NAME value" line.
counter() { sed -n "s/^$1 //p" "$2"; }

# --- a drain that times out: the counters printed are final and add up ------------------
for drain in 0 500; do
    q=drain$drain
    put "$q" 10
    out=$TMP/$q.out ledger=$TMP/$q.ledger
    base=$(requests)
    "$WORKER" --url "http://$UPADDR" --redis "127.0.0.1:$RPORT" --queue "$q" --name d1 \
        --drain "$drain" --ledger "$ledger" >"$out" 2>"$TMP/$q.err" &
    w=$!
    # SIGTERM once all 10 are parked in their HTTP call: their requests
    # have reached ax-upstream (its /stats count since this run began; they
    # take 5 s), within 60 s (liveness only). Before, a fixed 0.3 s after
    # XPENDING showed 10 read: on a busy machine a handler not yet in its
    # call at SIGTERM made the counts differ.
    parked=
    for _ in $(seq 600); do
        if (($(requests) - base >= 10)); then
            parked=1
            break
        fi
        sleep 0.1
    done
    [ -n "$parked" ] || bad "--drain $drain: 10 requests did not reach ax-upstream within 60 s ($(($(requests) - base)) did)"
    kill -TERM "$w"
    rc=0
    wait "$w" || rc=$?
    e=$(counter executed "$out") ok=$(counter executed_ok "$out")
    f=$(counter executed_failed "$out") to=$(counter executed_timed_out "$out")
    c=$(counter executed_cancelled "$out")
    lines=$(wc -l <"$ledger")
    cancels=$(awk '$6 == "cancel"' "$ledger" | wc -l)
    got="exit $rc, drained $(counter drained "$out"), executed $e = ok $ok + failed $f + timed_out $to + cancelled $c, ledger $lines lines ($cancels cancel), held $(counter held "$out"), abandoned $(counter abandoned "$out"), handed_back $(counter handed_back "$out")"
    want="exit 0, drained no, executed 10 = ok 0 + failed 0 + timed_out 0 + cancelled 10, ledger 10 lines (10 cancel), held 0, abandoned 10, handed_back 10"
    if [ "$got" != "$want" ]; then
        bad "--drain $drain with 10 handlers parked: $got; want $want"
    else
        echo "ok: --drain $drain: $got"
    fi
done

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "PASS"
