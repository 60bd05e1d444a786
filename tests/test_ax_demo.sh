#!/usr/bin/env bash
# test_ax_demo.sh - ax-demo, the main job, end to end over loopback: the short
# overload replay (the seed's incident, scaled down) runs all four
# configurations against ax-upstream, and its results.json holds the
# structure and the invariants the demo exists to show:
#   - every task is accounted for, in every configuration
#     (generated = admitted + shed + rejected;
#      admitted = succeeded + failed + timed_out + cancelled, per priority too;
#      ax: one on_done and one submitted/terminal event pair per admitted task);
#   - the overload measures are there for every configuration, ax-auto has
#     its per-class series (limit, retry budget, breaker) and six targets;
#   - seed-before collapses by itself: a backlog with no bound, in the
#     thousands, HIGH waiting longer in the peak than in seed-tuned, its
#     fixed 1 s retries sending one task to the upstream several times;
#   - the thread pool holds a thread per slot, ax a handful;
# bad flags, an unreachable --url and bad --config files exit 2 with a clear
# message; --print-config round-trips. Then, if Debian's chromium is
# installed, report.html is rendered headless: it must be self-contained
# (nothing fetched), draw its SVG charts, and log no script error.
#
# usage: tests/test_ax_demo.sh path/to/ax-demo path/to/ax-upstream [SANITIZERS]
# SANITIZERS (CMake's AX_SANITIZE, e.g. "thread") says the binaries run under
# a sanitizer. Its own memory (ASan's quarantine, TSan's shadow) swamps the
# few megabytes the RSS check compares, and its slowdown the milliseconds of
# the wait check: both are then skipped, saying so. Under TSan, which slows
# ax's workers several-fold, the short run also goes at half its speed
# (--speed 2), or the two CPUs could not carry the scenario it replays.
# needs: python3; chromium for the browser part (SKIPPED, saying so, without it).
set -euo pipefail

BIN=${1:?usage: $0 path/to/ax-demo path/to/ax-upstream}
UP=${2:?usage: $0 path/to/ax-demo path/to/ax-upstream}
SANITIZED=${3:-}
SPEED=()
case $SANITIZED in *thread*) SPEED=(--speed 2) ;; esac
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL: python3 not installed (Debian: apt-get install python3)" >&2
    exit 1
fi
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL: $*" >&2
}

# expect_exit2 "WHAT" "MESSAGE" ARG...: exit status 2 and MESSAGE on stderr.
expect_exit2() {
    local what=$1 msg=$2
    shift 2
    local rc=0
    "$BIN" --upstream "$UP" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [ "$rc" -ne 2 ]; then
        bad "$what: exit $rc, want 2 (args: $*): $(head -3 "$TMP/err")"
    elif ! grep -qF -- "$msg" "$TMP/err"; then
        bad "$what: stderr lacks '$msg': $(head -2 "$TMP/err")"
    else
        ok
    fi
}

# ---- refusals: exit 2 before anything runs ---------------------------------------

expect_exit2 "unknown flag" "unknown option '--bogus'" --bogus
expect_exit2 "bad --speed" "--speed: 'fast' is not a number" --speed fast
expect_exit2 "--speed without a value" "--speed needs a value" --speed
expect_exit2 "hexadecimal --speed" "--speed: '0x10' is not a number" --speed 0x10
expect_exit2 "--speed with a space" "--speed: ' 3.5' is not a number" --speed " 3.5"
expect_exit2 "unknown configuration" "--only: no configuration 'nosuch'" --only nosuch
expect_exit2 "stray argument" "unexpected argument 'now'" now
expect_exit2 "unknown scenario" "--scenario: no built-in scenario 'nosuch'" --scenario nosuch

# An unreachable upstream: a port that was free a moment ago.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
expect_exit2 "unreachable --url" "cannot reach it" --url "http://127.0.0.1:$PORT" \
    --out "$TMP/unreached"
# (trial) a refused run creates no --out directory
if [ -e "$TMP/unreached" ]; then bad "--out created for a run refused (unreachable --url)"; else ok; fi
expect_exit2 "--url not http" "is not an http:// or https:// URL" --url "ftp://127.0.0.1/"
# (trial-tools) the rule ax-worker shares (tools/demo/url.c): no host is a
# bad flag, said so, not an upstream it "cannot reach".
expect_exit2 "--url without a host" "--url: 'http://' has no host" --url "http://"
# (review) A query or fragment would take the class paths after it.
expect_exit2 "--url with a query" "--url: 'http://127.0.0.1:1/?x=1' has a query" \
    --url "http://127.0.0.1:1/?x=1"
expect_exit2 "--url with a fragment" "has a fragment" --url "http://127.0.0.1:1#f"

printf 'speed 4\nphase steady 2s rate=10\nwobble 3\n' >"$TMP/bad1.conf"
expect_exit2 "--config: unknown item" "bad1.conf:3: unknown item 'wobble'" --config "$TMP/bad1.conf"
printf 'class q path=/q latency=lognormal:9ms:1ms timeout=1s\n' >"$TMP/bad2.conf"
expect_exit2 "--config: bad latency" "bad2.conf:1: latency=lognormal:9ms:1ms" --config "$TMP/bad2.conf"
printf 'config c engine=ax cap=10\n' >"$TMP/bad3.conf"
expect_exit2 "--config: missing timeout" "cap= and timeout= are required" --config "$TMP/bad3.conf"
# A key only ax-upstream knows is checked by starting it once, before any run.
printf 'phase p 2s rate=10 upstream=wobble=1\n' >"$TMP/bad4.conf"
expect_exit2 "--config: bad upstream key" "unknown key 'wobble'" --config "$TMP/bad4.conf"
expect_exit2 "--config: no such file" "No such file" --config "$TMP/nosuch.conf"
# (trial-tools) Two classes of one name: refused at its line, as two configs
# are, not registered twice at run time (ax-auto: "ax_class_register(report):
# resource busy", exit 1, after the other configurations ran).
printf 'speed 4\ndrain 1s\nclass report path=/report latency=fixed:5ms share=50 timeout=1s\nclass report path=/r2 latency=fixed:5ms share=50 timeout=1s\nphase steady 2s rate=20\n' >"$TMP/dupclass.conf"
# (trial-tools) A NUL byte ended the line for the parser: the rest of it (here
# the config's bounds, retry and timeout) was dropped without a word.
printf 'speed 4\nconfig seed-tuned engine=ax cap=60\0 queues=1/1/1 retry=none timeout=class\n' >"$TMP/nul.conf"
expect_exit2 "--config: NUL in a line" "nul.conf:2: NUL byte in line" --config "$TMP/nul.conf" --print-config
printf 'speed 4\nphase steady 2s rate=20\0 upstream=hang=1\n' >"$TMP/nul2.conf"
expect_exit2 "--config: NUL in a line (2)" "nul2.conf:2: NUL byte in line" --config "$TMP/nul2.conf" --print-config
# (review) A line is read up to its bound and no further: with getline, a
# line without end (here /dev/zero) grew until memory ran out, and the
# failed read ended the file there, accepted (exit 0). Under a 300 MB
# address-space limit the old parser hit it in seconds. Not run under a
# sanitizer, whose shadow memory alone exceeds that limit.
if [ -z "$SANITIZED" ]; then
    rc=0
    (ulimit -v 300000; timeout 60 "$BIN" --config /dev/zero --print-config) >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [ "$rc" -ne 2 ]; then
        bad "--config /dev/zero: exit $rc, want 2: $(head -2 "$TMP/err")"
    elif ! grep -qF "zero:1: line too long" "$TMP/err"; then
        bad "--config /dev/zero: stderr lacks 'line too long': $(head -2 "$TMP/err")"
    else
        ok
    fi
fi
expect_exit2 "--config: a class defined twice" "dupclass.conf:4: class report is defined twice" \
    --config "$TMP/dupclass.conf" --only ax-auto --out "$TMP/dupclass"

# (trial-tools) --out where results.json or report.html cannot be written (a
# directory of that name): refused before the runs, exit 2, not found out
# after them ("results.json: Is a directory", exit 1, nothing written); and
# the check leaves no empty file behind.
printf 'speed 4\ndrain 1s\nclass quote path=/quote latency=fixed:5ms share=100 timeout=1s\nphase steady 2s rate=20\n' >"$TMP/mini.conf"
for f in results.json report.html; do
    rm -rf "$TMP/dout"
    mkdir -p "$TMP/dout/$f"
    expect_exit2 "--out with $f a directory" "cannot write $f there: Is a directory" \
        --config "$TMP/mini.conf" --only ax-auto --out "$TMP/dout"
    left=$(cd "$TMP/dout" && ls -A | grep -vx "$f" || true)
    if [ -n "$left" ]; then bad "--out with $f a directory: left [$left] in it"; else ok; fi
done

# (trial) Verdicts without data are N/A: a mix with no HIGH task compared
# "nan % < nan %" (T6, and the HIGH success row said "nan %"); one with no
# NORMAL task failed goal 2 on a p99 of "-".
for m in 'high=0 normal=100 low=0:T6 HIGH success  *N/A   no HIGH task generated' \
    'high=0 normal=100 low=0:T1 HIGH wait in the peak  *N/A   no HIGH task started in the peak' \
    'high=100 normal=0 low=0:2 NORMAL latency  *N/A   no NORMAL task started' \
    'high=100 normal=0 low=0:4 priority, no starvation  *N/A   no LOW task started'; do
    { cat "$TMP/mini.conf"; echo "mix ${m%%:*}"; } >"$TMP/mix.conf"
    rc=0
    "$BIN" --upstream "$UP" --config "$TMP/mix.conf" --only seed-tuned,ax-auto \
        --out "$TMP/mix" "${SPEED[@]}" >"$TMP/mix.out" 2>"$TMP/err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        bad "mix ${m%%:*}: exit $rc: $(head -2 "$TMP/err")"
    elif ! grep -q -- "${m#*:}" "$TMP/mix.out"; then
        bad "mix ${m%%:*}: the table lacks '${m#*:}'"
    elif grep -qi nan "$TMP/mix.out" "$TMP/mix/results.json" "$TMP/mix/report.html"; then
        bad "mix ${m%%:*}: nan in the output: $(grep -hi nan "$TMP/mix.out" | head -2)"
    else
        ok
    fi
done

# (trial-tools) --print-config after every flag is checked, not before: it
# exited 0 with --only bogus or --url http://.
expect_exit2 "--print-config --only bogus" "--only: no configuration 'bogus'" --print-config --only bogus
expect_exit2 "--print-config --url http://" "--url: 'http://' has no host" --print-config --url http://
# (trial-tools) An item of one value given twice: the first was silently lost.
printf 'speed 4\nspeed 5\n' >"$TMP/speed2.conf"
expect_exit2 "--config: speed twice" "speed2.conf:2: speed is given twice (first on line 1)" \
    --config "$TMP/speed2.conf" --print-config

# --print-config writes what --config reads, for both built-in scenarios.
for scen in overload retry-storm; do
    if "$BIN" --scenario $scen --print-config >"$TMP/a.conf" &&
        "$BIN" --config "$TMP/a.conf" --print-config >"$TMP/b.conf" &&
        diff <(grep -v '^#' "$TMP/a.conf") <(grep -v '^#' "$TMP/b.conf") >/dev/null; then
        ok
    else
        bad "--print-config --scenario $scen does not round-trip through --config"
    fi
done
# A duration finer than a nanosecond (fuzz_demo_config found one: ".0...08"
# bare seconds printed as 41 characters, which --config then refused).
# Nor a 40-character number, which came back with a leading "0" as 41, nor a
# weight too small to print in fixed point (read to 1e-9: refused at once).
printf 'mix high=0.00000000001 normal=0 low=0\n' >"$TMP/zero.conf"
expect_exit2 "--config: weights below 1e-9" "mix: the weights add up to 0" --config "$TMP/zero.conf"
printf 'drain .000000000000000000000000008\ndeadline 1.0000000001s\nmix high=.000000000000000000000010000000000000054 normal=1 low=1\n' >"$TMP/tiny.conf"
if "$BIN" --config "$TMP/tiny.conf" --print-config >"$TMP/c.conf" &&
    "$BIN" --config "$TMP/c.conf" --print-config >"$TMP/d.conf" &&
    diff <(grep -v '^#' "$TMP/c.conf") <(grep -v '^#' "$TMP/d.conf") >/dev/null &&
    grep -q '^drain 0ms$' "$TMP/c.conf" && grep -q '^deadline 1s$' "$TMP/c.conf"; then
    ok
else
    bad "--print-config does not round-trip durations finer than a nanosecond"
fi
# retry-storm is the moderate scenario of before, unchanged.
if "$BIN" --scenario retry-storm --print-config | grep -q '^phase peak 20s rate=400 ' &&
    "$BIN" --scenario retry-storm --print-config | grep -q '^config seed-before engine=ax cap=500 ' &&
    "$BIN" --print-config | grep -q '^config ax-auto engine=ax-auto '; then
    ok
else
    bad "--print-config: retry-storm's peak of 400/s and cap 500, or ax-auto, missing"
fi

# ---- (trial-tools) an --upstream that is not an executable file --------------------
# tools/README.md: exit 2 "for bad flags (including an --upstream PATH that is
# not an executable)". A directory passes access(X_OK) (tools/ax-demo.c, find_tool).
printf 'speed 10\nseed 4242\ndrain 1s\nphase steady 2s rate=20\nphase peak 2s rate=40 upstream=error=0.1\n' \
    >"$TMP/quick.conf"
rc=0
"$BIN" --upstream "$TMP" --config "$TMP/quick.conf" --only seed-tuned --out "$TMP/updir" \
    >"$TMP/out" 2>"$TMP/err" || rc=$?
if [ "$rc" -eq 2 ]; then ok; else bad "--upstream DIRECTORY: exit $rc, want 2: $(head -1 "$TMP/err")"; fi

# ---- (trial-tools) a quick run with nothing abandoned: ax-upstream's count -------
# With no timeouts every request the demo sent is answered, and each answer
# was counted by ax-upstream when it read the request, so counted >= answered
# (the short run's check below, answered <= counted <= sent, hides an
# undercount behind the thousands of abandoned requests the overload leaves).
rc=0
"$BIN" --config "$TMP/quick.conf" --only seed-tuned --upstream "$UP" --out "$TMP/quick" \
    >"$TMP/quick.out" 2>"$TMP/quick.err" || rc=$?
# Exit 3 (no 2xx: "the upstream failed most requests") from a machine too
# busy to run the 0.4 s scenario at all says nothing of ax-upstream's count:
# under TSan beside two busy loops, 12 of 30 such runs got no answer at all
# (results.json machine_stalled, 11-17 requests started of 109).
stalled() {
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))["configs"][0]
if not (c["machine_stalled"] and c["answered_2xx"] == 0):
    sys.exit(1)
p, n, a = c["cpu_pressure_pct"], c["upstream_requests"], c["answered"]
print(f"SKIPPED: quick run: the machine stalled (CPU pressure {p:.0f} %, {n} requests "
      f"sent, {a} answered): no count to check")' "$TMP/quick/results.json" 2>/dev/null
}
if [ "$rc" -eq 3 ] && stalled; then
    ok
elif [ "$rc" -ne 0 ]; then
    bad "quick run: exit $rc: $(head -c 6000 "$TMP/quick.err")"
elif python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))["configs"][0]
a, n, s = c["answered"], c["upstream_requests_counted_by_upstream"], c["upstream_requests"]
print(f"quick run: answered {a}, counted by ax-upstream {n}, sent {s}")
sys.exit(0 if n is not None and a <= n <= s else 1)' "$TMP/quick/results.json"; then
    ok
else
    bad "quick run: ax-upstream counted fewer requests than were answered (tools/demo/upstream.c subtracts stats_requests from a total that never included /stats)"
fi

# ---- (trial-tools) --url with a trailing '/', a scenario with no degraded phase ---
# The requests dropped the '/' before the class path, the header did not
# ("GET http://HOST:PORT//quote"); and T2, with no task admitted while
# degraded, read "nan upstream requests per task ... > 1.1".
"$UP" --port 0 >"$TMP/slash-up.out" 2>/dev/null &
slash_up=$!
for _ in $(seq 50); do grep -q '^listening on ' "$TMP/slash-up.out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$TMP/slash-up.out")
rc=0
"$BIN" --config "$TMP/mini.conf" --only ax-auto --url "http://$addr/" --out "$TMP/slash" \
    >"$TMP/slash.out" 2>"$TMP/slash.err" || rc=$?
kill -TERM "$slash_up" 2>/dev/null || true
wait "$slash_up" 2>/dev/null || true
if [ "$rc" -ne 0 ]; then
    bad "--url http://$addr/: exit $rc: $(tail -2 "$TMP/slash.err")"
elif ! grep -qF "GET http://$addr/quote" "$TMP/slash.out" || grep -qF "$addr//" "$TMP/slash.out"; then
    bad "--url http://$addr/: header: $(grep -F 'GET ' "$TMP/slash.out" | head -1)"
elif ! grep -qE '^ *T2 .* N/A ' "$TMP/slash.out" || grep -qi 'nan' "$TMP/slash.out"; then
    bad "no degraded phase: T2: $(grep -E '^ *T2 ' "$TMP/slash.out")"
else
    ok
fi

# ---- (trial-tools) SIGTERM to ax-demo: no process left behind --------------------
# A supervisor (systemd, a CI runner's timeout, kill PID) signals ax-demo alone.
# Its ax-upstream and the configuration's process must not outlive it.
printf 'speed 1\nseed 987654321\ndrain 1s\nphase steady 60s rate=10\n' >"$TMP/long.conf"
"$BIN" --config "$TMP/long.conf" --only seed-tuned --upstream "$UP" --out "$TMP/sig" \
    >"$TMP/sig.out" 2>"$TMP/sig.err" &
demo=$!
for _ in $(seq 100); do grep -q 'running' "$TMP/sig.err" 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -TERM "$demo"
wait "$demo" 2>/dev/null || true
# ax-upstream stops within 0.25 s of a SIGTERM: poll up to 10 s (a busy
# machine, TSan), so that only a process that stays is a failure.
for _ in $(seq 100); do
    left=$(pgrep -f -- '--seed=987654321' || true)
    left_demo=$(pgrep -f -- "--out $TMP/sig" || true)
    [ -z "$left" ] && [ -z "$left_demo" ] && break
    sleep 0.1
done
if [ -z "$left" ] && [ -z "$left_demo" ]; then
    ok
else
    bad "SIGTERM to ax-demo left processes running: ax-upstream [${left}], configuration [${left_demo}]"
    # shellcheck disable=SC2086 # pid lists
    [ -n "$left$left_demo" ] && kill -KILL $left $left_demo 2>/dev/null || true
fi

# ---- the short run ---------------------------------------------------------------

OUT="$TMP/out dir" # a space in the path, on purpose
t0=$(date +%s.%N)
rc=0
"$BIN" --short "${SPEED[@]}" --upstream "$UP" --out "$OUT" >"$TMP/run.out" 2>"$TMP/run.err" || rc=$?
t1=$(date +%s.%N)
secs=$(python3 -c "print(round($t1 - $t0, 1))")
echo "ax-demo --short: exit $rc in $secs s"
if [ "$rc" -eq 0 ]; then ok; else
    bad "ax-demo --short: exit $rc"
    tail -20 "$TMP/run.err" >&2
    tail -40 "$TMP/run.out" >&2
fi
for want in 'results (times in incident time' 'verdicts on the seed' '1 concurrency cap' \
    '5 lifecycle observed' 'overload (tools/README.md' 'HIGH wait p99 in the peak' \
    'requests/task, degraded' 'recovery (wait p99' 'goodput (ok within dl)' 'HIGH success rate' \
    "issue 12's targets" 'T1 HIGH wait in the peak' 'T6 HIGH success' 'wrote '; do
    if grep -qF -- "$want" "$TMP/run.out"; then ok; else bad "stdout lacks '$want'"; fi
done

if [ -s "$OUT/results.json" ]; then
    python3 - "$OUT/results.json" "$SANITIZED" >"$TMP/py.out" 2>&1 <<'EOF' || true
import json, sys

doc = json.load(open(sys.argv[1]))
sanitized = sys.argv[2]
checks = []

def check(what, cond):
    checks.append((what, bool(cond)))

cfg = {c["name"]: c for c in doc["configs"]}
check("four configurations", sorted(cfg) == ["ax-auto", "seed-before", "seed-tuned", "threads"])
check("the overload scenario", doc["scenario"]["origin"].startswith("built-in overload"))
for name, c in cfg.items():
    check(f"{name}: ran", c.get("ok") is True)
    if not c.get("ok"):
        continue
    t = c["tasks"]
    check(f"{name}: generated {t['generated']} = admitted + shed + rejected",
          t["generated"] == t["admitted"] + t["shed"] + t["rejected"])
    check(f"{name}: admitted {t['admitted']} = succeeded + failed + timed_out + cancelled",
          t["admitted"] == t["succeeded"] + t["failed"] + t["timed_out"] + t["cancelled"])
    check(f"{name}: tasks were generated", t["generated"] > 3000)
    o = c.get("overload", {})
    for k in ("high_wait_p99_peak_ms", "requests_per_task_degraded", "max_requests_one_task",
              "peak_rss_mb", "recovery_s", "recovered", "goodput_per_s", "high_success_rate",
              "refused_breaker_open", "failed_breaker_open", "failed_expired"):
        check(f"{name}: overload.{k} present", k in o)
    if o:
        check(f"{name}: HIGH tasks in the peak were measured", o["high_wait_peak"]["count"] > 0)
        check(f"{name}: goodput <= succeeded per second of traffic",
              0 <= o["goodput_per_s"] <= t["succeeded"] / doc["scenario"]["length_s"] + 1e-9)
        check(f"{name}: HIGH success rate in [0, 1]", 0 <= o["high_success_rate"] <= 1)
        check(f"{name}: a recovery time exactly when recovered",
              (o["recovery_s"] is not None) == (o["recovered"] is True))
    for p, b in c["by_priority"].items():
        check(f"{name} {p}: generated = admitted + shed + rejected",
              b["generated"] == b["admitted"] + b["shed"] + b["rejected"])
        check(f"{name} {p}: admitted = terminal states",
              b["admitted"] == b["succeeded"] + b["failed"] + b["timed_out"] + b["cancelled"])
    for k in ("generated", "admitted", "succeeded", "failed", "timed_out", "cancelled", "shed",
              "rejected"):
        check(f"{name}: {k} is the sum over priorities",
              t[k] == sum(b[k] for b in c["by_priority"].values()))
    lc = c["lifecycle"]
    if c["engine"] in ("ax", "ax-auto"):
        check(f"{name}: on_done {lc['on_done']} == admitted {t['admitted']}",
              lc["on_done"] == t["admitted"])
        check(f"{name}: events submitted/terminal == admitted",
              lc["events_submitted"] == t["admitted"] == lc["events_terminal"])
        check(f"{name}: no event dropped", lc["events_dropped"] == 0)
        check(f"{name}: a handful of threads ({c['peak_threads']}, want < 32)", c["peak_threads"] < 32)
    else:
        check(f"{name}: a thread per pool slot ({c['peak_threads']})",
              c["peak_threads"] >= c["settings"]["cap"])
    check(f"{name}: slots in use never above the limit",
          c["max_in_flight"] <= c["limit"] == c["settings"]["cap"])
    # ax-upstream counts a request when it has read it. Every answered one it
    # read; one the engine abandoned at its deadline it read or not, as its
    # bytes got there (not while the connection was still being set up on a
    # busy machine). The demo reads the count once the upstream has settled
    # (nothing in flight, two reads agreeing), so: answered <= counted <= sent.
    sent, counted = c["upstream_requests"], c["upstream_requests_counted_by_upstream"]
    answered = c["answered"]
    check(f"{name}: ax-upstream counted every answered request and none the demo did not send "
          f"(answered {answered}, counted {counted}, sent {sent})",
          counted is not None and answered <= counted <= sent)
    s = c["series"]
    n = len(s["t_s"])
    check(f"{name}: time series ({n} samples, all the same length)",
          n > 20 and all(len(v) == n for k, v in s.items() if isinstance(v, list)))
    check(f"{name}: five verdicts", len(c["verdicts"]) == 5)
    if c["engine"] == "ax-auto":
        cs = c.get("class_series") or {}
        check(f"{name}: a series per task class ({sorted(cs)})",
              sorted(cs) == sorted(x["name"] for x in doc["scenario"]["classes"]))
        for cl, ser in cs.items():
            for k in ("limit", "in_flight", "breaker", "retry_budget_left", "retries_allowed",
                      "retries_denied", "expired", "breaker_rejected"):
                check(f"{name} {cl}: class series {k}, one point per sample",
                      len(ser.get(k, [])) == n)
            check(f"{name} {cl}: breaker states are 0, 1 or 2",
                  all(x in (0, 1, 2, None) for x in ser.get("breaker", [])))
            check(f"{name} {cl}: the limit stays within 1 .. cap",
                  all(x is None or 1 <= x <= c["settings"]["cap"] for x in ser.get("limit", [])))
        tg = c.get("targets", [])
        check(f"{name}: six targets, each PASS, FAIL or N/A",
              len(tg) == 6 and all(x["result"] in ("PASS", "FAIL", "N/A") for x in tg))
    else:
        check(f"{name}: no class series", c.get("class_series") is None)

b, t = cfg.get("seed-before"), cfg.get("seed-tuned")
if b and t and b.get("ok") and t.get("ok"):
    # Amplification. Under this overload the 50 slots, not the retry policy,
    # bound what seed-before sends (a retry queues behind the backlog), so
    # per task the factor stays near 1.1; its fixed 1 s retries show in the
    # tasks sent several times.
    bo = b["overload"]
    check(f"seed-before's fixed retries send a task to the upstream several times "
          f"(most by one task {bo['max_requests_one_task']}, want >= 3; retries {b['retries']})",
          bo["max_requests_one_task"] >= 3 and b["retries"] > 0)
    check(f"seed-before's retries amplify while degraded "
          f"(requests per task {bo['requests_per_task_degraded']:.3f}, want > 1)",
          bo["requests_per_task_degraded"] > 1.0)
    check("seed-before's backlog reaches the thousands (peak waiting "
          f"{b['measured']['max_waiting']})", b["measured"]["max_waiting"] >= 1000)
    check("seed-tuned refuses at the door (its bounds) "
          f"(refused {t['tasks']['shed'] + t['tasks']['rejected']})",
          t["tasks"]["shed"] + t["tasks"]["rejected"] > 0)
    bw = bo["high_wait_p99_peak_ms"]
    tw = t["overload"]["high_wait_p99_peak_ms"]
    if sanitized:
        print(f"SKIPPED: peak RSS and wait comparisons under -fsanitize={sanitized} "
              f"(RSS {b['peak_rss_mb']:.1f} vs {t['peak_rss_mb']:.1f} MB, mostly the "
              f"sanitizer's; HIGH wait p99 in the peak {bw} vs {tw} ms)")
    elif not (b["max_queued"] >= 100 and b["max_queued"] > 2 * t["max_queued"]):
        # Both follow the backlog: without one in seed-before that seed-tuned
        # did not also have (a busy machine can stall seed-tuned too), there is
        # nothing for them to show.
        print(f"SKIPPED: peak RSS comparison: no backlog in seed-before beyond "
              f"seed-tuned's (peak waiting {b['max_queued']} vs {t['max_queued']}; RSS "
              f"{b['peak_rss_mb']:.1f} vs {t['peak_rss_mb']:.1f} MB)")
    else:
        check(f"seed-before's peak RSS exceeds seed-tuned's "
              f"(seed-before {b['peak_rss_mb']:.1f} MB, seed-tuned {t['peak_rss_mb']:.1f} MB)",
              b["peak_rss_mb"] > t["peak_rss_mb"])
    if not sanitized:
        check(f"seed-before's HIGH tasks wait longer in the peak than seed-tuned's "
              f"(p99 seed-before {bw} ms, seed-tuned {tw} ms)",
              bw > tw)
    check("seed-before refused none (unbounded queues)",
          b["tasks"]["shed"] + b["tasks"]["rejected"] == 0)
    check("seed-tuned's queues stayed within their bounds",
          t["max_queued"] <= t["queue_bound"])
    lt = t["by_priority"]["LOW"]
    check("seed-tuned gives up on LOW at the first failure (no LOW retries)",
          lt["failed"] + lt["timed_out"] > 0)
    check("the same traffic for every configuration",
          len({c["tasks"]["generated"] for c in cfg.values()}) == 1)
v = {n: {x["goal"]: x["result"] for x in c.get("verdicts", [])} for n, c in cfg.items()}
# The verdicts follow the demo's own measurements, not the settings.
for name, c in cfg.items():
    if not c.get("ok"):
        continue
    m, t = c["measured"], c["tasks"]
    allowed = c["settings"]["cap"] + m["orphan_allowance"]
    queue = m["tasks_met_all_slots_busy"] > 0.01 * t["admitted"]
    bounded = c["queue_bound"] is not None
    cap_ok = m["max_functions_at_once"] <= allowed
    bound_ok = m["max_waiting"] <= c["queue_bound"] if bounded else not queue
    check(f"{name}: goal 1 is {'PASS' if cap_ok and bound_ok else 'FAIL'} from the measures "
          f"({m['max_functions_at_once']} at once of {allowed}, backlog {m['max_waiting']}, "
          f"queue formed: {queue})",
          v[name]["1 concurrency cap"] == ("PASS" if cap_ok and bound_ok else "FAIL"))
    judged = queue and m["high_met_all_slots_busy"] >= 100
    check(f"{name}: goal 4 is N/A exactly when no queue formed with 100 HIGH tasks in it",
          (v[name]["4 priority, no starvation"] == "N/A") == (not judged))
    grace = 3000 + m["machine_stall_ms"]
    check(f"{name}: goal 3 is FAIL exactly when a function ran 3 s (+ the machine's stall) past "
          f"its deadline ({m['max_past_deadline_ms']} ms vs {grace:.0f})",
          (v[name]["3 timeouts free slots"] == "FAIL") == (m["max_past_deadline_ms"] > grace))
    none_late = m["returned_past_deadline"] == 0
    check(f"{name}: goal 3 is N/A exactly when no function returned past its deadline "
          f"({m['returned_past_deadline']} late returns)",
          (v[name]["3 timeouts free slots"] == "N/A") == none_late)
    fail_lines = [x["text"] for x in c["verdicts"] if x["result"] == "FAIL"]
    check(f"{name}: no FAIL line opens with a '<=' comparison ({fail_lines})",
          all("<=" not in x.split(";")[0] for x in fail_lines))
    st = c["http_status"]
    check(f"{name}: every request's HTTP status counted, per class",
          sum(sum(x.values()) for x in st.values()) == c["upstream_requests"])
    check(f"{name}: the upstream served the demo", c["upstream_failing"] is False)
check("verdict: seed-tuned respects its cap and bounds (goal 1 PASS)",
      v.get("seed-tuned", {}).get("1 concurrency cap") == "PASS")
check("verdict: seed-before's backlog formed with no bound (goal 1 FAIL)",
      v.get("seed-before", {}).get("1 concurrency cap") == "FAIL")
check("verdict: seed-before's HIGH jumps its queue (goal 4 PASS)",
      v.get("seed-before", {}).get("4 priority, no starvation") == "PASS")

for what, good in checks:
    print(("ok   " if good else "FAIL ") + what)
EOF
    while IFS= read -r line; do
        case $line in
        "ok   "*)
            ok
            case $line in *"per task"* | *"RSS"*) echo "$line" ;; esac
            ;;
        "FAIL "*) bad "results.json: ${line#FAIL }" ;;
        "SKIPPED: "*) echo "$line" ;;
        *) bad "results.json check: $line" ;;
        esac
    done <"$TMP/py.out"
else
    bad "no results.json in $OUT"
fi

# ---- report.html in a headless browser -------------------------------------------

REPORT="$OUT/report.html"
if [ ! -s "$REPORT" ]; then
    bad "no report.html in $OUT"
else
    # Self-contained: no script, stylesheet, image or frame from anywhere.
    if grep -qiE '<(script|link|img|iframe)[ >]|(src|href)=|url\(|@import' "$REPORT"; then
        bad "report.html refers to something outside itself"
    else
        ok
    fi
    CHROME=$(command -v chromium || command -v chromium-browser || true)
    if [ -z "$CHROME" ]; then
        echo "SKIPPED: browser checks (chromium not installed; Debian: apt-get install chromium)"
    else
        chrome() {
            timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu \
                --disable-background-networking --disable-component-update --disable-sync \
                --no-first-run --user-data-dir="$TMP/chrome-profile" "$@"
        }
        url="file://$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$REPORT")"
        rc=0
        chrome --enable-logging=stderr --v=0 --dump-dom "$url" >"$TMP/dom.html" 2>"$TMP/chrome.err" || rc=$?
        if [ "$rc" -eq 0 ] && [ -s "$TMP/dom.html" ]; then ok; else
            bad "chromium --dump-dom: exit $rc: $(grep -v dbus "$TMP/chrome.err" | head -3)"
        fi
        nsvg=$(grep -o '<svg' "$TMP/dom.html" | wc -l)
        nline=$(grep -o '<polyline' "$TMP/dom.html" | wc -l)
        echo "report.html in chromium: $nsvg charts, $nline lines"
        # Nine rows of charts, one per configuration.
        if [ "$nsvg" -ge 36 ]; then ok; else bad "report.html: $nsvg <svg> charts, want >= 36"; fi
        if [ "$nline" -ge 40 ]; then ok; else bad "report.html: $nline lines drawn, want >= 40"; fi
        for want in 'Verdicts on the seed' 'seed-tuned' 'Queue length per bucket' \
            'In flight vs limit' 'Wait p99 per priority' 'Upstream latency' 'Resident memory' \
            'Concurrency limit per task class' 'Retry budget per task class' \
            'Circuit breaker state per task class' "issue 12's targets" 'HIGH success rate'; do
            if grep -qF "$want" "$TMP/dom.html"; then ok; else bad "report.html lacks '$want'"; fi
        done
        # Script errors reach the log as console messages ("Uncaught ...").
        if grep -E 'CONSOLE|Uncaught|SyntaxError|TypeError|ReferenceError' "$TMP/chrome.err" >"$TMP/console"; then
            bad "report.html: script errors: $(head -3 "$TMP/console")"
        else
            ok
        fi
        rc=0
        chrome --screenshot="$TMP/report.png" --window-size=1400,3000 "$url" >/dev/null 2>&1 || rc=$?
        size=$(stat -c %s "$TMP/report.png" 2>/dev/null || echo 0)
        if [ "$rc" -eq 0 ] && [ "$size" -gt 50000 ]; then ok; else
            bad "screenshot of report.html: exit $rc, $size bytes"
        fi
    fi
fi

echo "ax-demo: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
