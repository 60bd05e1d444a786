#!/usr/bin/env bash
# test_ax_demo_nginx.sh - ax-demo --url against a real web server (nginx), over
# loopback, as tools/README.md ("What --url must serve") tells a user to do:
#   1. nginx serves the demo's class paths (/quote, /search, /report) with
#      200: a short run of every configuration exits 0, counts every request
#      it sent in results.json under its class, as a 200 or (an attempt its
#      timeout ended first, on a busy machine) "none", marks the upstream
#      "url" with its address, and nginx's own access log holds exactly as
#      many requests as the demo says it sent (counted by the upstream, not
#      by the engine under test);
#   2. two class paths 404 (a scenario whose classes point elsewhere): the
#      check of each class path before the runs stops ax-demo at once with
#      exit 3, naming each path and what it answered (200, 404, 404); no
#      configuration runs, no results.json is written, and nginx saw only
#      the 4 checks (base URL and each class path, once).
# nginx runs from a temporary directory with its own configuration (pid, logs
# and temp paths inside it, on a free loopback port), so this works as root
# in CI and as a normal user; it is stopped by its pid. A missing nginx is
# installed through scripts/deps (Debian nginx-light) when that can be done
# (root or sudo), else the test is SKIPPED, saying so.
#
# usage: tests/test_ax_demo_nginx.sh path/to/ax-demo path/to/scripts/deps
# needs: nginx, curl, python3.
set -euo pipefail

BIN=${1:?usage: $0 path/to/ax-demo path/to/scripts/deps}
DEPS=${2:?usage: $0 path/to/ax-demo path/to/scripts/deps}

find_nginx() {
    command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true
}
NGINX=$(find_nginx)
if [ -z "$NGINX" ]; then
    if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then
        "$DEPS" nginx:nginx-light >&2 || true
        NGINX=$(find_nginx)
    fi
    if [ -z "$NGINX" ]; then
        echo "SKIPPED: nginx is not installed and cannot be (Debian: apt-get install nginx-light)"
        exit 0
    fi
fi
for tool in curl python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "FAIL: $tool not installed (Debian: apt-get install $tool)" >&2
        exit 1
    fi
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

TMP=$(mktemp -d)
NGINX_PID=""
cleanup() {
    if [ -n "$NGINX_PID" ]; then
        kill -QUIT "$NGINX_PID" 2>/dev/null || true
        wait "$NGINX_PID" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL: $*" >&2
}

# ---- nginx on a free loopback port -------------------------------------------------

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$TMP/nginx/logs"
cat >"$TMP/nginx/nginx.conf" <<EOF
# The upstream ax-demo --url needs: every class path answers GET with a 2xx.
worker_processes 1;
daemon off;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
worker_rlimit_nofile 16384;
events { worker_connections 8192; }
http {
    access_log $TMP/nginx/logs/access.log;
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    server {
        listen 127.0.0.1:$PORT;
        default_type application/json;
        location = /quote  { return 200 '{"ok":true,"class":"quote"}\n'; }
        location = /search { return 200 '{"ok":true,"class":"search"}\n'; }
        location = /report { return 200 '{"ok":true,"class":"report"}\n'; }
        location / { return 404; }
    }
}
EOF
"$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log" \
    >"$TMP/nginx/stdout" 2>&1 &
NGINX_PID=$!
URL="http://127.0.0.1:$PORT"
up=0
for _ in $(seq 100); do
    if curl -s -o /dev/null "$URL/quote" 2>/dev/null; then
        up=1
        break
    fi
    kill -0 "$NGINX_PID" 2>/dev/null || break
    sleep 0.1
done
if [ "$up" -ne 1 ]; then
    echo "FAIL: nginx did not start: $(cat "$TMP/nginx/stdout" "$TMP/nginx/logs/error.log" 2>/dev/null | head -5)" >&2
    exit 1
fi
echo "nginx $("$NGINX" -v 2>&1 | sed 's/.*\///') on $URL (pid $NGINX_PID)"
: >"$TMP/nginx/logs/access.log" # the readiness probe's request is not the demo's

# A brief scenario: the built-in classes and configurations, 4 s of traffic.
printf 'speed 4\ndrain 1s\nphase steady 4s rate=200\n' >"$TMP/brief.conf"

# ---- 1. the class paths are served ---------------------------------------------------

rc=0
"$BIN" --url "$URL" --config "$TMP/brief.conf" --out "$TMP/ok" >"$TMP/ok.out" 2>"$TMP/ok.err" || rc=$?
if [ "$rc" -eq 0 ]; then ok; else
    bad "ax-demo --url (paths served): exit $rc: $(tail -3 "$TMP/ok.err")"
fi
for want in "upstream  $URL" 'HTTP quote' 'HTTP search' 'HTTP report'; do
    if grep -qF -- "$want" "$TMP/ok.out"; then ok; else bad "stdout lacks '$want'"; fi
done
# nginx writes its access log line when a request ends: give the last ones a moment.
sleep 0.5
# Only the runs' requests: before the runs ax-demo GETs the base URL and each
# class path once, as user agent "ax-demo-check".
checked=$(grep -F '"ax-demo-check"' "$TMP/nginx/logs/access.log" | grep -cE '"GET /(quote|search|report) ' || true)
if [ "$checked" -eq 3 ]; then ok; else bad "each class path checked once before the runs: $checked checks in nginx's log, want 3"; fi
logged=$(grep -vF '"ax-demo-check"' "$TMP/nginx/logs/access.log" | grep -cE '"GET /(quote|search|report) ' || true)
if [ -s "$TMP/ok/results.json" ]; then
    python3 - "$TMP/ok/results.json" "$URL" "$logged" >"$TMP/py.out" 2>&1 <<'EOF' || true
import json, os, sys

doc = json.load(open(sys.argv[1]))
url, logged = sys.argv[2], int(sys.argv[3])
checks = []

def check(what, cond):
    checks.append((what, bool(cond)))

check("upstream is the URL", doc["upstream"] == {"kind": "url", "url": url})
classes = [c["name"] for c in doc["scenario"]["classes"]]
sent = answered = unanswered = 0
for c in doc["configs"]:
    name = c["name"]
    check(f"{name}: ran", c.get("ok") is True)
    if not c.get("ok"):
        continue
    st = c["http_status"]
    check(f"{name}: statuses for every class ({sorted(st)})", sorted(st) == sorted(classes))
    n = sum(sum(v.values()) for v in st.values())
    ok200 = sum(v.get("200", 0) for v in st.values())
    check(f"{name}: every request counted once ({n} statuses, {c['upstream_requests']} sent)",
          n == c["upstream_requests"] and n > 0)
    # "none": an attempt its timeout ended before nginx's answer came (a
    # busy machine); every answer that came is a 200, and most did come.
    other = {k for v in st.values() for k in v} - {"200", "none"}
    check(f"{name}: every answer a 200 ({ok200} of {n}; {st})", not other)
    # Most answered, unless the run says the machine stalled it (its own
    # measure: stall or CPU pressure); a stall can leave any share of the
    # attempts without an answer, but never all.
    # Under TSan (scripts/test sets AX_TEST_TSAN) the engine itself is 5 to
    # 15 times slower, which the run's stall measure does not see: ax-auto's
    # limits follow the latency it measures, so it may refuse or expire a
    # third of the tasks (CI, December 2026: 491 and 506 of 823 succeeded,
    # 164-179 refused, 132-153 failed past their queue budget). There only
    # "some" is checked, as for a stalled machine.
    stalled = c["machine_stalled"] or os.environ.get("AX_TEST_TSAN") == "1"
    check(f"{name}: most requests answered ({ok200} of {n}"
          f"{'; machine stalled or TSan: some' if stalled else ''})",
          ok200 > 0 if stalled else ok200 >= 0.9 * n)
    check(f"{name}: answered_2xx {c['answered_2xx']} == {ok200}", c["answered_2xx"] == ok200)
    check(f"{name}: not failing", c["upstream_failing"] is False)
    t = c["tasks"]
    # Every task generated is admitted or refused, every admitted one ends
    # once. A stalled machine may make a configuration refuse some (ax-auto's
    # limit follows latency); otherwise none is refused and most succeed.
    refused = t["shed"] + t["rejected"]
    check(f"{name}: tasks accounted for and most succeeded ({t['succeeded']} of {t['generated']}"
          f"{', refused ' + str(refused) + ', machine stalled or TSan' if stalled else ''}; {t})",
          t["generated"] == t["admitted"] + refused
          and t["admitted"] == t["succeeded"] + t["failed"] + t["timed_out"] + t["cancelled"]
          and (t["succeeded"] >= 1 if stalled else refused == 0
               and t["succeeded"] >= 0.9 * t["generated"]))
    check(f"{name}: verdicts given", all(v["result"] != "N/A" or "no verdict" not in v["text"]
                                         for v in c["verdicts"]))
    # nginx answers at once: unless a busy machine made a task time out,
    # no slot had to be freed and goal 3 has nothing to judge.
    g3 = {v["goal"]: v["result"] for v in c["verdicts"]}["3 timeouts free slots"]
    late = c["measured"]["returned_past_deadline"]
    check(f"{name}: goal 3 is N/A exactly when no function returned past its deadline "
          f"({g3}, {late} late returns)", (g3 == "N/A") == (late == 0))
    sent += c["upstream_requests"]
    answered += ok200
    unanswered += n - ok200
# nginx logs every request it read; an attempt its timeout ended ("none")
# may have been given up before nginx read its request: every answer was
# logged, every request nginx did not log is one the demo got no answer to
# (with every request answered, the counts are equal).
check(f"nginx's access log counts what the demo sent ({logged} logged, {sent} sent, "
      f"{unanswered} unanswered)", answered <= logged <= sent and sent - logged <= unanswered)
for what, good in checks:
    print(("ok   " if good else "FAIL ") + what)
EOF
    while IFS= read -r line; do
        case $line in
        "ok   "*) ok ;;
        "FAIL "*) bad "results.json (served): ${line#FAIL }" ;;
        *) bad "results.json check: $line" ;;
        esac
    done <"$TMP/py.out"
    echo "paths served: $logged requests in nginx's log; $(grep -F 'HTTP quote' "$TMP/ok.out" | tr -s ' ')"
else
    bad "no results.json in $TMP/ok"
fi

# ---- 2. the class paths 404 ----------------------------------------------------------

# /search and /report point where nginx answers 404, /quote stays served: the
# check before the run must stop it at once (no configuration runs, a few
# requests rather than tens of thousands), naming each path and its answer.
# (Without its speed and drain lines, which brief.conf gives: an item of one
# value given twice is refused.)
"$BIN" --print-config | sed -E 's#^(class +(search|report) +path=)/#\1/missing/#' |
    grep -vE '^(speed|drain) ' >"$TMP/missing.conf"
cat "$TMP/brief.conf" >>"$TMP/missing.conf"
if grep -q 'path=/missing/search' "$TMP/missing.conf" && grep -q 'path=/quote' "$TMP/missing.conf"; then
    ok
else
    bad "could not rewrite the class paths"
fi
: >"$TMP/nginx/logs/access.log"
rc=0
"$BIN" --url "$URL" --config "$TMP/missing.conf" --only seed-tuned --out "$TMP/missing" \
    >"$TMP/missing.out" 2>"$TMP/missing.err" || rc=$?
if [ "$rc" -eq 3 ]; then ok; else bad "ax-demo --url (paths 404): exit $rc, want 3"; fi
for want in "ax-demo: --url $URL: a class path did not answer GET with a 2xx when checked once before the run;" \
    "GET $URL/quote: 200," "GET $URL/missing/search: 404," "GET $URL/missing/report: 404" \
    'ax-demo: nothing was run: every class path must answer GET with a 2xx'; do
    if grep -qF -- "$want" "$TMP/missing.err"; then ok; else
        bad "stderr (paths 404) lacks '$want': $(head -3 "$TMP/missing.err")"
    fi
done
if grep -q 'running' "$TMP/missing.out" "$TMP/missing.err"; then
    bad "a configuration ran although a class path 404s: $(grep -m1 running "$TMP/missing.out" "$TMP/missing.err")"
else
    ok
fi
if [ -e "$TMP/missing" ]; then bad "--out created for a run that did not happen"; else ok; fi
sleep 0.5 # nginx writes a log line as its request ends
sent404=$(grep -cE '"GET /' "$TMP/nginx/logs/access.log" || true)
# The base URL and each of the 3 class paths, once.
if [ "$sent404" -eq 4 ]; then ok; else bad "paths 404: $sent404 requests reached nginx, want 4 (the checks only)"; fi
echo "paths 404: $(head -1 "$TMP/missing.err")"

echo "ax-demo --url with nginx: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
