#!/usr/bin/env bash
# test_ax_demo_cluster.sh - ax-demo --cluster 3 --short end to end (issue 13):
# a real redis-server (appendonly, appendfsync always), ax-upstream, three
# ax-worker processes, one killed with SIGKILL in the middle of the peak.
# From results.json and, independently, from the files the run leaves in
# OUT/cluster (the producers' admitted ids, each worker's ledger, the dead
# letters' origin ids):
#   - nothing admitted is lost: lost == 0, and every admitted id has exactly
#     one terminal record (a successful execution in some ledger, or one
#     dead letter), recomputed here from the files;
#   - the killed worker's messages were redelivered: it held some when it
#     was killed, redeliveries > 0, the survivors claimed them (Redis
#     counted at least those claims);
#   - the totals add up exactly: generated = admitted + shed + rejected
#     (+ 0 unconfirmed); admitted = succeeded + dead-lettered; Redis'
#     succeeded and dead counters equal those; per-worker rows sum to the
#     totals; each worker's executions = its outcomes; the queue drained;
#   - report.html has the cluster section, its chart and the kill.
# Then the exit-2 cases of ax-worker and of --cluster.
# Skips (exit 77) only when redis-server is not installed.
#
# usage: tests/test_ax_demo_cluster.sh path/to/ax-demo path/to/ax-worker
set -euo pipefail

BIN=${1:?usage: $0 path/to/ax-demo path/to/ax-worker}
WORKER=${2:?usage: $0 path/to/ax-demo path/to/ax-worker}
if ! command -v redis-server >/dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
    echo "redis-server is not installed (Debian: apt-get install redis-server): skipped"
    exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL: python3 not installed (Debian: apt-get install python3)" >&2
    exit 1
fi
ulimit -n 65536 2>/dev/null || true

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

rc=0
# A relative --out, as the default "." is: redis-server's log path was taken
# relative to the directory it moves to (a new user's trial: every run failed).
BIN=$(realpath "$BIN")
(cd "$TMP" && "$BIN" --cluster 3 --short --out out) >"$TMP/stdout" 2>"$TMP/stderr" || rc=$?
cat "$TMP/stdout"
if [ "$rc" -ne 0 ]; then
    echo "FAIL: ax-demo --cluster 3 --short exited $rc" >&2
    tail -20 "$TMP/stderr" >&2
    exit 1
fi
grep -q "lost      0" "$TMP/stdout" || { echo "FAIL: the table does not say lost 0" >&2; fail=1; }

python3 - "$TMP/out" <<'EOF' || fail=1
import collections, json, os, sys
out = sys.argv[1]
r = json.load(open(os.path.join(out, "results.json")))
c = r["cluster"]
errors = []
def check(cond, what):
    if not cond:
        errors.append(what)

m, t, tot, rd = c["messages"], c["terminal"], c["totals"], c["redis"]
check(c["ok"], "the run did not complete")
check(c["workers"] == 3, "workers %r" % c["workers"])
check(c["lost"] == 0 and t["lost"] == 0, "lost %r" % t["lost"])
check(m["unconfirmed"] == 0, "unconfirmed submits %r" % m["unconfirmed"])
check(m["generated"] == m["admitted"] + m["shed"] + m["rejected"] + m["unconfirmed"],
      "generated != admitted + shed + rejected + unconfirmed: %r" % m)
check(m["admitted"] > 1000, "admitted only %r" % m["admitted"])
check(t["succeeded"] + t["dead_lettered"] == m["admitted"],
      "admitted %r != succeeded %r + dead-lettered %r" % (m["admitted"], t["succeeded"], t["dead_lettered"]))
check(t["more_than_one"] == 0, "ids with more than one terminal record: %r" % t["more_than_one"])
check(t["unknown_ids"] == 0, "ids no producer admitted: %r" % t["unknown_ids"])
check(rd["succeeded"] == t["succeeded"], "Redis succeeded %r != ids succeeded %r" % (rd["succeeded"], t["succeeded"]))
check(rd["dead"] == t["dead_lettered"] == rd["dead_stream"] == tot["dead_letters"],
      "dead letters disagree: %r / %r / %r / %r" % (rd["dead"], t["dead_lettered"], rd["dead_stream"], tot["dead_letters"]))
check(rd["drained"] and rd["left_length"] == 0 and rd["left_pending"] == 0 and rd["left_delayed"] == 0,
      "the queue did not drain: %r" % rd)

ws = c["per_worker"]
killed = [w for w in ws if w["killed"]]
check(len(killed) == 1, "killed workers: %r" % len(killed))
k = killed[0]
check(k["name"] == c["killed"], "killed name")
check(k["exit_status"] == -9, "the killed worker's exit status %r, want -9 (SIGKILL)" % k["exit_status"])
check(k["executed"] > 0, "the killed worker ran nothing before its kill")
for w in ws:
    check(w["executed"] == w["succeeded"] + w["failed"] + w["timed_out"] + w["cancelled"],
          "%s: executions != outcomes" % w["name"])
    if not w["killed"]:
        check(w["exit_status"] == 0 and w["reported"], "%s: exit %r, reported %r" % (w["name"], w["exit_status"], w["reported"]))
for key in ("executed", "redeliveries", "duplicates"):
    check(sum(w[key] for w in ws) == tot[key], "per-worker %s do not sum to the total" % key)
check(sum(w["dead_letters"] for w in ws) == tot["dead_letters"], "per-worker dead letters do not sum")
check(c["kill_held"] > 0, "the killed worker held no message when it was killed")
check(tot["redeliveries"] > 0, "nothing was redelivered after the kill")
survivors_claimed = sum(w["claimed"] for w in ws if not w["killed"])
# Redis counts every take-over, also those the killed worker made before it
# died (it cannot report them) and a worker's own entries it found idle after
# a stall (it skips them, still running): the survivors' count is a part.
check(survivors_claimed > 0 and survivors_claimed <= rd["claimed"],
      "claims: survivors %r, Redis %r" % (survivors_claimed, rd["claimed"]))
check(tot["duplicates"] <= rd["claimed"], "duplicates %r > claimed %r" % (tot["duplicates"], rd["claimed"]))

# The same join, from the files the run left: admitted ids, ledgers, dead letters.
d = os.path.join(out, "cluster")
admitted = [l.strip() for l in open(os.path.join(d, "admitted")) if l.strip()]
check(len(admitted) == m["admitted"], "admitted file has %d ids, results %r" % (len(admitted), m["admitted"]))
check(len(set(admitted)) == len(admitted), "an id was admitted twice")
ok = set()
execs = collections.Counter()
per_worker = collections.Counter()
redelivered = 0
for w in ws:
    path = os.path.join(d, "ledger." + w["name"])
    if not os.path.exists(path):
        continue
    for line in open(path):
        f = line.split()
        if len(f) != 8:
            continue
        ms, mid, entry, attempt, deliveries, outcome, kind, status = f
        per_worker[w["name"]] += 1
        execs[(mid, entry)] += 1
        if int(deliveries) > 1:
            redelivered += 1
        if outcome == "ok":
            ok.add(mid)
dead = collections.Counter(l.strip() for l in open(os.path.join(d, "dead")) if l.strip())
adm = set(admitted)
check(ok <= adm, "ledger successes of ids never admitted: %r" % list(ok - adm)[:5])
check(set(dead) <= adm, "dead letters of ids never admitted")
# An id's terminal record: its dead letter if it has one (an "ok" line beside
# it is an execution Redis never recorded: its worker died unacknowledged, or
# the answer lost the race with the attempt's deadline), else its "ok" line.
bad = [i for i in admitted if (dead[i] if dead[i] else (1 if i in ok else 0)) != 1]
check(not bad, "%d admitted ids without exactly one terminal record, e.g. %r" % (len(bad), bad[:5]))
succeeded = sum(1 for i in admitted if i in ok and not dead[i])
check(succeeded == rd["succeeded"], "ids succeeded by the ledgers %d, Redis counted %r" % (succeeded, rd["succeeded"]))
for w in ws:
    check(per_worker[w["name"]] == w["executed"], "%s: ledger lines %d, results %r" % (w["name"], per_worker[w["name"]], w["executed"]))
check(redelivered == tot["redeliveries"], "ledger redeliveries %d, results %r" % (redelivered, tot["redeliveries"]))
check(sum(n - 1 for n in execs.values()) == tot["duplicates"],
      "ledger duplicates %d, results %r" % (sum(n - 1 for n in execs.values()), tot["duplicates"]))

html = open(os.path.join(out, "report.html")).read()
check('id="cluster"' in html and "<svg" in html and "SIGKILL " + c["killed"] in html,
      "report.html lacks the cluster section, its chart or the kill")
check(html.count("<tr><td>w") == 3, "report.html: per-worker rows")
for e in errors:
    print("FAIL:", e, file=sys.stderr)
print("checked: %d admitted, %d succeeded, %d dead-lettered, %d redeliveries, %d duplicates, lost %d"
      % (m["admitted"], t["succeeded"], t["dead_lettered"], tot["redeliveries"], tot["duplicates"], t["lost"]))
sys.exit(1 if errors else 0)
EOF

# Bad arguments: exit 2 with the problem named.
expect2() {
    local what=$1 msg=$2
    shift 2
    local rc=0
    "$@" >"$TMP/o" 2>"$TMP/e" || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q -- "$msg" "$TMP/e"; then
        echo "FAIL: $what: exit $rc, stderr: $(head -1 "$TMP/e")" >&2
        fail=1
    fi
}
expect2 "ax-worker without --url" "--url is required" "$WORKER"
expect2 "ax-worker --slots x" "--slots: 'x'" "$WORKER" --url http://127.0.0.1:1 --slots x
expect2 "ax-worker --redis" "--redis: 'nohost'" "$WORKER" --url http://127.0.0.1:1 --redis nohost
expect2 "ax-worker --redis name" "--redis: 'redis.local:6379': the host must be" "$WORKER" --url http://127.0.0.1:1 --redis redis.local:6379
expect2 "ax-worker --visibility" "must be more than twice --claim-interval" "$WORKER" --url http://127.0.0.1:1 --visibility 1000 --claim-interval 500
expect2 "ax-worker --retry" "--retry: '5:1:0'" "$WORKER" --url http://127.0.0.1:1 --retry 5:1:0
expect2 "ax-worker --url ftp" "is not an http" "$WORKER" --url ftp://x
expect2 "--cluster 1" "--cluster: '1'" "$BIN" --cluster 1
expect2 "--cluster with --url" "no --url" "$BIN" --cluster 2 --url http://127.0.0.1:1
# (trial-tools) also with --print-config, which exited 0 before the check.
expect2 "--print-config --cluster with --only" "no --only" "$BIN" --print-config --cluster 2 --only ax-auto
# Redis unreachable: a line on stderr, not silence (port 1: nothing listens).
"$WORKER" --url http://127.0.0.1:1 --redis 127.0.0.1:1 --queue unreach >"$TMP/uo" 2>"$TMP/ue" &
upid=$!
sleep 2.5
kill -TERM "$upid"
wait "$upid" || true
grep -q "Redis 127.0.0.1:1 unreachable" "$TMP/ue" || { echo "FAIL: ax-worker: no line for an unreachable Redis" >&2; fail=1; }
grep -q "^executed_cancelled 0" "$TMP/uo" || { echo "FAIL: ax-worker: no executed_cancelled line" >&2; fail=1; }
"$WORKER" --help | grep -q -- "--ledger FILE" || { echo "FAIL: ax-worker --help" >&2; fail=1; }

# (trial-tools) A --name longer than ax_redis allows (127 bytes) is refused, as
# 'bad name' is, not cut to 127 bytes: two workers whose names differ after
# byte 127 would otherwise share one consumer in the group.
long=$(printf 'w%.0s' $(seq 200))
rc=0
timeout -s TERM 5 "$WORKER" --url http://127.0.0.1:1 --redis 127.0.0.1:1 --queue longname \
    --name "$long" >"$TMP/lo" 2>"$TMP/le" || rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    echo "FAIL: ax-worker --name of 200 bytes: accepted (exit $rc), consuming as $(grep -c w "$TMP/lo" >/dev/null; sed -n 's/^consuming longname as //p' "$TMP/lo" | wc -c) bytes" >&2
    fail=1
fi

# (trial-tools) SIGTERM or SIGINT (Ctrl-C: the whole process group) mid-run:
# tools/README.md says redis-server's temporary directory is "removed at the
# end"; it must be removed, and no process of the run may be left.
for sig in TERM INT; do
    mkdir -p "$TMP/tmpdir.$sig"
    printf 'speed 1\nseed 97531\ndrain 1s\nphase steady 60s rate=10\n' >"$TMP/long.conf"
    # A background job of a script has SIGINT ignored: start it with the
    # default disposition, in a process group of its own, as a terminal would.
    TMPDIR="$TMP/tmpdir.$sig" python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execv(sys.argv[1], sys.argv[1:])' "$BIN" --cluster 2 --config "$TMP/long.conf" \
        --out "$TMP/sig.$sig" >"$TMP/so.$sig" 2>"$TMP/se.$sig" &
    demo=$!
    # A file of its own each run: with one, the second run's wait could find
    # the first run's 'submitted' before its own redirect emptied the file,
    # and signal a process group its setsid had not made yet ("kill: No such
    # process": 2 runs in ~50 under load).
    for _ in $(seq 150); do grep -q 'submitted' "$TMP/se.$sig" 2>/dev/null && break; sleep 0.1; done
    if [ "$sig" = INT ]; then kill -INT -- "-$demo"; else kill -TERM "$demo"; fi
    wait "$demo" 2>/dev/null || true
    sleep 2
    left=$(ls -A "$TMP/tmpdir.$sig")
    procs=$(pgrep -f -- "seed=97531|$TMP/sig.$sig|$TMP/tmpdir.$sig" || true)
    if [ -n "$left" ] || [ -n "$procs" ]; then
        echo "FAIL: SIG$sig to ax-demo --cluster: left behind: temporary [${left}], processes [$(echo $procs)]" >&2
        fail=1
        # shellcheck disable=SC2086 # pid list
        [ -n "$procs" ] && kill -KILL $procs 2>/dev/null || true
    fi
done

if [ "$fail" -ne 0 ]; then
    exit 1
fi
echo "PASS"
