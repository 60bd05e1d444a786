#!/usr/bin/env bash
# test_ax_plan.sh - ax-plan reproduces the seed's capacity arithmetic exactly
# (§2.3: 2000 QPS x 0.5 s x 10 s = 10000; 500/s x 0.5 s = 250 -> 300;
# §4.3: 3000 x 0.8 = 2400 -> 2880), rounds up, and refuses bad input with
# exit code 2 and a usage message.
#
# usage: tests/test_ax_plan.sh path/to/ax-plan
set -euo pipefail

BIN=${1:?usage: $0 path/to/ax-plan}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL: $*" >&2
}

# expect_json "ARGS" key=value ...: run ax-plan ARGS --json and compare fields
# (values as Python prints them: 10000, 0.8).
expect_json() {
    local args=$1
    shift
    local out rc=0
    # shellcheck disable=SC2086 # ARGS is a word list on purpose
    out=$("$BIN" $args --json 2>"$TMP/err") || rc=$?
    if [ "$rc" -ne 0 ]; then
        bad "ax-plan $args --json: exit $rc: $(head -1 "$TMP/err")"
        return
    fi
    if ! python3 -c 'import json, sys; assert isinstance(json.load(sys.stdin), dict)' <<<"$out" \
        2>/dev/null; then
        bad "ax-plan $args --json: not one JSON object: $out"
        return
    fi
    local kv key want got
    # One line per wanted key, in order.
    mapfile -t got < <(python3 -c 'import json, sys
o = json.loads(sys.argv[1])
for kv in sys.argv[2:]:
    print(o.get(kv.split("=", 1)[0], "<missing>"))' "$out" "$@")
    local i=0
    for kv in "$@"; do
        key=${kv%%=*}
        want=${kv#*=}
        if [ "${got[$i]}" = "$want" ]; then ok; else bad "ax-plan $args: $key = ${got[$i]}, want $want"; fi
        i=$((i + 1))
    done
}

# expect_usage_error "WHAT" "MESSAGE" ARG...: exit 2, nothing on stdout, the
# specific message and the usage text on stderr.
expect_usage_error() {
    local what=$1 msg=$2
    shift 2
    local rc=0
    "$BIN" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
    if [ "$rc" -ne 2 ]; then
        bad "$what: exit $rc, want 2 (args: $*)"
    elif [ -s "$TMP/out" ]; then
        bad "$what: wrote to stdout"
    elif ! grep -q '^usage: ax-plan' "$TMP/err"; then
        bad "$what: no usage message on stderr"
    elif ! grep -qF -- "$msg" "$TMP/err"; then
        bad "$what: stderr lacks '$msg': $(head -1 "$TMP/err")"
    else
        ok
    fi
}

REST=(--mean-ms 500 --p99-ms 800 --backlog-s 10 --task-bytes 2048)
RESTS="${REST[*]}"

# ---- the seed's three worked examples, exactly --------------------------------

# §2.3: capacity = 2000 QPS x 0.5 s x 10 s = 10000, split 20/60/20 by default;
# timeout = p99 800 ms x 1.5; rate limit = 1.5 x peak; shed at 0.8 x capacity.
expect_json "--qps 2000 $RESTS" \
    capacity=10000 capacity_high=2000 capacity_normal=6000 capacity_low=2000 \
    capacity_total=10000 concurrency_base=1000 max_concurrency=1200 timeout_ms=1200 \
    rate_limit=3000 shed_ratio=0.8 shed_at=8000 queued_task_bytes=256 \
    memory_queued_bytes=2560000 memory_running_bytes=81100800 memory_bytes=83660800
# §2.3: target 500 completions/s x 0.5 s = 250 concurrent, + 20% = 300.
expect_json "--qps 500 $RESTS" concurrency_base=250 max_concurrency=300
expect_json "--qps 2000 --throughput 500 $RESTS" capacity=10000 concurrency_base=250 \
    max_concurrency=300
# §4.3: 3000 QPS x 0.8 s = 2400, + 20% = 2880 (naive floating point gives 2881).
expect_json "--qps 3000 --mean-ms 800 --p99-ms 800 --backlog-s 5 --task-bytes 2048" \
    concurrency_base=2400 max_concurrency=2880 capacity=12000 timeout_ms=1200 rate_limit=4500

# ---- rounding up, mix, stack ----------------------------------------------------

# 3/s x 0.1 s x 1 s = 0.3 -> 1; 7/s x 0.333 s = 2.331 -> 3, x 1.2 = 2.7972 -> 3;
# 801 ms x 1.5 = 1201.5 -> 1202.
expect_json "--qps 3 --mean-ms 100 --p99-ms 801 --backlog-s 1 --task-bytes 0" \
    capacity=1 capacity_high=1 capacity_normal=1 capacity_low=1 timeout_ms=1202
expect_json "--qps 7 --mean-ms 333 --p99-ms 500 --backlog-s 10 --task-bytes 0" \
    concurrency_base=3 max_concurrency=3 capacity=24 rate_limit=10.5
# Binary noise must not round up: 1.1/s x 0.1 s x 100 s is 11.000000000000002
# in doubles, 175/s x 1.1 s x 1.2 is 231.00000000000003; both are exact integers.
expect_json "--qps 1.1 --mean-ms 100 --p99-ms 0.1 --backlog-s 100 --task-bytes 0" \
    capacity=11 timeout_ms=1
# A p99 so small that 1.5 x p99 snaps to 0: still 1, the least ax_submit takes
# (a trial: the plan printed spec.timeout_ms = 0, which ax_submit refuses).
expect_json "--qps 1 --mean-ms 1 --p99-ms 1e-12 --backlog-s 1 --task-bytes 0" timeout_ms=1
expect_json "--qps 175 --mean-ms 1100 --p99-ms 2000 --backlog-s 1 --task-bytes 0" \
    concurrency_base=193 max_concurrency=231
expect_json "--qps 2000 $RESTS --mix 10/70/20" \
    capacity_high=1000 capacity_normal=7000 capacity_low=2000
expect_json "--qps=2000 --mean-ms=500 --p99-ms=800 --backlog-s=10 --task-bytes=0 --stack-kib=16" \
    stack_bytes=16384 memory_bytes=$((10000 * 256 + 1200 * 16384))

# ---- text output: the numbers, the assumptions, a config that compiles ----------

rc=0
"$BIN" --qps 2000 "${REST[@]}" >"$TMP/text" 2>"$TMP/err" || rc=$?
if [ "$rc" -eq 0 ] && [ ! -s "$TMP/err" ]; then ok; else bad "text mode: exit $rc"; fi
for want in 'queue capacity     10000 tasks' 'max_concurrency    1200 tasks' \
    'timeout_ms         1200 ms' 'rate_limit         3000/s' 'memory bound       79.8 MiB' \
    'assumptions:' '256 B' 'cfg.capacity[AX_PRIO_NORMAL] = 6000;' 'spec.timeout_ms = 1200;'; do
    if grep -qF -- "$want" "$TMP/text"; then ok; else bad "text mode lacks '$want'"; fi
done

# (trial) A load smaller than one task: the products as computed, then what
# the plan rounds them to ("0.1/s x 0.1 s = 1" and a capacity of 1 beside
# three buckets of 1 before).
rc=0
"$BIN" --qps 0.1 --mean-ms 100 --p99-ms 800 --backlog-s 10 --task-bytes 0 >"$TMP/tiny" \
    2>"$TMP/err" || rc=$?
if [ "$rc" -eq 0 ]; then ok; else bad "tiny load: exit $rc"; fi
for want in 'queue capacity     3 tasks        0.1/s x 0.1 s x 10 s = 0.1 -> 1, 3 with the --mix' \
    'max_concurrency    1 tasks        0.1/s x 0.1 s = 0.01, + 20% margin = 0.012 -> 1' \
    'shed at            3 tasks        shed_ratio 0.8 x 3'; do
    if grep -qF -- "$want" "$TMP/tiny"; then ok; else bad "tiny load lacks '$want'"; fi
done

# (trial) The shed line as ax draws it, rounded up (sched.c): 0.8 x 233 =
# 186.4, shed from a load of 187 (the plan said 186); and the margin on the
# product before the rounding, as the figure is (it printed "192.5 -> 193,
# + 20% margin" beside 231).
rc=0
"$BIN" --qps 175 --mean-ms 1100 --p99-ms 2000 --backlog-s 1.2 --task-bytes 0 >"$TMP/odd" \
    2>"$TMP/err" || rc=$?
if [ "$rc" -eq 0 ]; then ok; else bad "odd load: exit $rc"; fi
for want in 'shed at            187 tasks      shed_ratio 0.8 x 233' \
    'max_concurrency    231 tasks      175/s x 1.1 s = 192.5, + 20% margin = 231'; do
    if grep -qF -- "$want" "$TMP/odd"; then ok; else bad "odd load lacks '$want'"; fi
done
# (review) A product just above an integer is not printed as that integer
# beside its rounding up ("= 8.3333, + 20% margin = 10 -> 11").
"$BIN" --qps 1 --mean-ms 8333.34 --p99-ms 9000 --backlog-s 1 --task-bytes 0 >"$TMP/near" 2>&1 || true
if grep -qF -- '+ 20% margin = 10.000008 -> 11' "$TMP/near"; then ok; else
    bad "near-integer margin: $(grep max_concurrency "$TMP/near")"
fi

# The printed snippet is valid C against the real header.
CC=${CC:-cc}
if command -v "$CC" >/dev/null 2>&1 && [ -f "$HERE/../include/ax.h" ]; then
    {
        echo '#include "ax.h"'
        echo 'void plan(void);'
        echo 'void plan(void) {'
        echo 'ax_spec spec = {0};'
        sed -n '/^ax_config cfg;$/,$p' "$TMP/text"
        echo '(void)cfg; (void)spec; }'
    } >"$TMP/snippet.c"
    if "$CC" -std=c11 -Wall -Wextra -Werror -I"$HERE/../include" -fsyntax-only "$TMP/snippet.c" \
        2>"$TMP/err"; then
        ok
    else
        bad "the ax_config snippet does not compile: $(cat "$TMP/err")"
    fi
else
    echo "skip: no C compiler to check the snippet"
fi

# ---- --help -------------------------------------------------------------------------

rc=0
"$BIN" --help >"$TMP/out" 2>"$TMP/err" || rc=$?
if [ "$rc" -eq 0 ] && grep -q '^usage: ax-plan' "$TMP/out" && [ ! -s "$TMP/err" ]; then
    ok
else
    bad "--help: exit $rc, or usage not on stdout"
fi

# ---- bad input: exit 2 and a usage message -------------------------------------------

expect_usage_error "no arguments" "--qps is required"
expect_usage_error "non-numeric" "'abc' is not a number" --qps abc "${REST[@]}"
expect_usage_error "underflow" "'1e-400' is too small" --qps 1e-400 "${REST[@]}"
expect_usage_error "trailing junk" "'2000x' is not a number" --qps 2000x "${REST[@]}"
expect_usage_error "not a decimal" "'0x10' is not a number" --qps 0x10 "${REST[@]}"
expect_usage_error "infinity" "'inf' is not a number" --qps inf "${REST[@]}"
expect_usage_error "negative" "'-5' is negative" --qps -5 "${REST[@]}"
expect_usage_error "negative bytes" "'-1' is negative" --qps 2000 --mean-ms 500 --p99-ms 800 \
    --backlog-s 10 --task-bytes -1
expect_usage_error "zero qps" "'0' must be greater than zero" --qps 0 "${REST[@]}"
expect_usage_error "zero mean" "'0' must be greater than zero" --qps 2000 --mean-ms 0 \
    --p99-ms 800 --backlog-s 10 --task-bytes 0
expect_usage_error "zero backlog" "'0.0' must be greater than zero" --qps 2000 --mean-ms 500 \
    --p99-ms 800 --backlog-s 0.0 --task-bytes 0
expect_usage_error "unknown flag" "unknown option '--bogus'" --qps 2000 "${REST[@]}" --bogus 1
expect_usage_error "short flag" "unknown option '-q'" -q 2000 "${REST[@]}"
expect_usage_error "missing flag" "--task-bytes is required" --qps 2000 --mean-ms 500 \
    --p99-ms 800 --backlog-s 10
expect_usage_error "missing value" "--qps needs a value" "${REST[@]}" --qps
expect_usage_error "empty value" "--qps: the value is empty" --qps= "${REST[@]}"
expect_usage_error "flag twice" "--qps is given twice" --qps 1 --qps 2 "${REST[@]}"
expect_usage_error "stray argument" "unexpected argument 'extra'" --qps 2000 "${REST[@]}" extra
expect_usage_error "fractional bytes" "'1.5' must be a whole number" --qps 2000 --mean-ms 500 \
    --p99-ms 800 --backlog-s 10 --task-bytes 1.5
expect_usage_error "mix sum" "does not sum to 100" --qps 2000 "${REST[@]}" --mix 20/60/30
expect_usage_error "mix shape" "not three whole percentages" --qps 2000 "${REST[@]}" --mix 50/50
expect_usage_error "mix zero" "at least 1%" --qps 2000 "${REST[@]}" --mix 0/80/20
expect_usage_error "stack too small" "outside [16, 262144]" --qps 2000 "${REST[@]}" --stack-kib 8
expect_usage_error "input too large" "out of range" --qps 1e13 "${REST[@]}"
expect_usage_error "absurd plan" "check the units" --qps 1e9 --mean-ms 1e9 --p99-ms 1 \
    --backlog-s 1e9 --task-bytes 0
expect_usage_error "json value" "--json takes no value" --qps 2000 "${REST[@]}" --json=1

# ---- the printed config is one ax_new accepts, or the plan says it is not ----------
# (trial-tools) rate_limit is 1.5 x --qps; ax_new refuses a rate_limit above 1e12
# (src/config.c, "config.rate_limit must be in [0, 1e12]"), so a --qps above
# 6.67e11 must come with a warning, as a capacity past 2097152 tasks does.
out=$("$BIN" --qps 1e12 --mean-ms 0.000001 --p99-ms 1 --backlog-s 1 --task-bytes 0 --json)
if python3 -c 'import json, sys
o = json.loads(sys.argv[1])
sys.exit(0 if o["rate_limit"] <= 1e12 or any("rate_limit" in w for w in o["warnings"]) else 1)' "$out"; then
    ok
else
    bad "--qps 1e12: rate_limit $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["rate_limit"])' "$out") is above ax_new's 1e12 and no warning says so"
fi
# (trial-tools) A small rate must not print as "rate_limit = 0", which is "off" in
# ax: the plan would turn the limit off instead of setting it to 1.5e-5/s.
out=$("$BIN" --qps 0.00001 --mean-ms 1 --p99-ms 1 --backlog-s 1 --task-bytes 0 --json)
if python3 -c 'import json, sys
o = json.loads(sys.argv[1])
sys.exit(0 if o["qps"] > 0 and o["rate_limit"] > 0 and "cfg.rate_limit = 0;" not in o["ax_config"] else 1)' "$out"; then
    ok
else
    bad "--qps 0.00001: printed as qps $(python3 -c 'import json,sys; o=json.loads(sys.argv[1]); print(o["qps"], "rate_limit", o["rate_limit"])' "$out") (rate_limit 0 is 'off' in ax)"
fi

echo "ax-plan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
