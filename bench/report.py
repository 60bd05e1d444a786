#!/usr/bin/env python3
"""report.py - turn the "key value" lines collected by bench/run into the
results table (stdout) and bench/results.json.

Each benchmark program prints lines such as "ax_switch_ns 41.2"; bench/run
runs every program several times and appends all its lines to one raw file.
A key seen in k runs has k values: the table shows their median and min-max.

Every unit here is "lower is better" except those in HIGHER_IS_BETTER
(req/s), so ratio = peer / ax (or ax / peer for those): how many times ax is
better; > 1 means ax wins.

Targets: issue 13's for the Redis rows (>= 3x BullMQ's tasks/s, a lower
p99); those of the "Core v2 speed" issue (yield hand-off, spawn, full
path with 1 and 2 workers, dispatch latency with workers awake and asleep,
timer lateness, full path with JSON events), and issue 5's memory and idle
CPU bounds. Rows without a target are informational. A target may involve
another row's figure (the 1-worker full path must also be 2x the 1-thread
pool); its `met` is then judged on both.

usage: report.py RAW_FILE OUT_JSON [--quick] [--idle-s S]
"""
import json
import statistics
import sys
from collections import defaultdict


HIGHER_IS_BETTER = ("req/s", "tasks/s", "msg/s")


# A target is (text, met): met(ax, peer, ratio, med) -> bool, where ax / peer
# are this row's medians, ratio its ratio, and med(key) the median of any key
# (None if absent), for targets that involve another row's figure.


def at_least(k):
    """Target: ax at least k times better than the peer."""
    return (f">= {k:g}x peer",
            lambda ax, peer, ratio, med: None if ratio is None else ratio >= k)


def below_peer():
    """Target: ax's figure lower than the peer's (ratio = peer / ax > 1)."""
    return ("< peer", lambda ax, peer, ratio, med: None if ratio is None else ratio > 1)


def at_most(limit, unit):
    """Target: ax's figure at most `limit`."""
    return (f"<= {limit:g} {unit}", lambda ax, peer, ratio, med: ax <= limit)


def better(med, ax, key, k):
    """ax at least k times better (lower) than the median of `key`; None if
    that figure is missing."""
    other = med(key)
    return None if other is None else other >= k * ax


def all_of(*parts):
    """True if every part is; None if none is False and some is unknown."""
    if any(p is False for p in parts):
        return False
    return None if any(p is None for p in parts) else True


def fullpath_1w_target():
    # The issue: ax <= 200 ns AND >= 2x the 1-thread pool AND >= 3x idiomatic
    # Go at GOMAXPROCS=1 (this row's peer).
    def met(ax, peer, ratio, med):
        return all_of(ax <= 200, None if ratio is None else ratio >= 3,
                      better(med, ax, "tp_fullpath_t1_ns", 2))
    return ("<= 200 ns, >= 3x peer, >= 2x 1-thread pool", met)


def fullpath_2w_target():
    # The issue: not slower than ax's own 1-worker figure AND >= 2x the
    # 2-thread pool. Idiomatic Go (this row's peer) is shown, not judged.
    def met(ax, peer, ratio, med):
        w1 = med("ax_fullpath_w1_ns")
        return all_of(None if w1 is None else ax <= w1,
                      better(med, ax, "tp_fullpath_t2_ns", 2))
    return ("<= ax 1-worker ns, >= 2x 2-thread pool", met)


def rows(idle_s):
    go_seed = "Go seed scheduler"
    r = [
        # name, unit, ax key, peer key, peer name, target
        # The machine, not ax: one cache line's round trip between two cores
        # (machine_line.c). The core rows move with it on a VM whose host
        # changes its placement: compare rows only at alike readings.
        ("machine: cache-line round trip between two cores, at the start", "ns",
         "machine_line_rtt_start_ns", None, "none", None),
        ("machine: cache-line round trip, after the core rows", "ns",
         "machine_line_rtt_core_ns", None, "none", None),
        ("machine: cache-line round trip, at the end", "ns", "machine_line_rtt_end_ns", None,
         "none", None),
        ("yield hand-off (ax_yield, 1 worker)", "ns/hand-off", "ax_switch_ns", "go_gosched_ns",
         "Go runtime.Gosched, GOMAXPROCS=1", at_most(18, "ns")),
        # The same programs linked to libax.so: the peer is ax linked to libax.a.
        ("yield hand-off, linked to libax.so", "ns/hand-off", "ax_switch_so_ns", "ax_switch_ns",
         "ax linked to libax.a", None),
        # The bare register switch of ax's coroutines: no scheduler, no peer.
        ("raw coro register switch (no scheduler)", "ns/switch", "coro_switch_ns", None,
         "none", None),
        ("spawn (ax_submit from a task, empty task)", "ns/task", "ax_spawn_ns", "go_spawn_ns",
         "go f() + WaitGroup", at_most(150, "ns")),
        ("full path, 1 worker", "ns/task", "ax_fullpath_w1_ns", "go_idiom_fullpath_p1_ns",
         "idiomatic Go, GOMAXPROCS=1", fullpath_1w_target()),
        ("full path, 1 worker, vs threads", "ns/task", "ax_fullpath_w1_ns", "tp_fullpath_t1_ns",
         "pthread pool, 1 thread", at_least(2)),
        ("full path, 1 worker, linked to libax.so", "ns/task", "ax_fullpath_so_w1_ns",
         "ax_fullpath_w1_ns", "ax linked to libax.a", None),
        ("full path, 1 worker, vs Go seed", "ns/task", "ax_fullpath_w1_ns",
         "go_seed_fullpath_p1_ns", go_seed + ", GOMAXPROCS=1", None),
        ("full path, 2 workers", "ns/task", "ax_fullpath_w2_ns", "go_idiom_fullpath_p2_ns",
         "idiomatic Go, GOMAXPROCS=2", fullpath_2w_target()),
        ("full path, 2 workers, vs threads", "ns/task", "ax_fullpath_w2_ns", "tp_fullpath_t2_ns",
         "pthread pool, 2 threads", at_least(2)),
        ("full path, 2 workers, vs Go seed", "ns/task", "ax_fullpath_w2_ns",
         "go_seed_fullpath_p2_ns", go_seed + ", GOMAXPROCS=2", None),
        ("full path, 4 workers (more workers than cores)", "ns/task", "ax_fullpath_w4_ns",
         "tp_fullpath_t4_ns", "pthread pool, 4 threads", None),
        # Four submitting threads at once (submitters=4: several request
        # threads of one service), one task a call; the pool's four
        # submitters each collect their own futures. No target in the issue.
        ("full path, 4 submitting threads, 1 worker", "ns/task", "ax_fullpath_w1_s4_ns",
         "tp_fullpath_t1_s4_ns", "pthread pool, 1 thread, 4 submitters", None),
        ("full path, 4 submitting threads, 2 workers", "ns/task", "ax_fullpath_w2_s4_ns",
         "tp_fullpath_t2_s4_ns", "pthread pool, 2 threads, 4 submitters", None),
        # ax_submit_batch, 64 specs a call: one lock section per 8 specs.
        # The pool has no batch submission: its per-task figure, no target.
        ("full path, 1 worker, bursts of 64 (ax_submit_batch)", "ns/task", "ax_fullpath_w1_b64_ns",
         "tp_fullpath_t1_ns", "pthread pool, 1 thread, one task a call", None),
        ("full path, 2 workers, bursts of 64 (ax_submit_batch)", "ns/task", "ax_fullpath_w2_b64_ns",
         "tp_fullpath_t2_ns", "pthread pool, 2 threads, one task a call", None),
        # The two pipelines of the full path apart (ax_fullpath split=1): the
        # submit loop with the workers paused, into a job table that grows
        # (cold, the first round) and into one grown already (warm); then the
        # workers alone draining that backlog. No peer, no target: they show
        # which side bounds the full path and what running both at once adds
        # (src/SCALING.md). The 2-worker drain's peer is the 1-worker drain.
        ("full path apart: submit loop alone, job table growing", "ns/task",
         "ax_fullpath_w1_submit_cold_ns", None, "none", None),
        ("full path apart: submit loop alone, job table grown", "ns/task",
         "ax_fullpath_w1_submit_warm_ns", None, "none", None),
        ("full path apart: 1 worker alone, draining the backlog", "ns/task",
         "ax_fullpath_w1_drain_warm_ns", None, "none", None),
        ("full path apart: 2 workers alone, draining the backlog", "ns/task",
         "ax_fullpath_w2_drain_warm_ns", "ax_fullpath_w1_drain_warm_ns",
         "ax, 1 worker draining", None),
        # ax.h has no public call that only arms and cancels a timeout: the
        # wheel's own figure, informational, no peer, no target.
        ("timeout arm+cancel (wheel internals, no public call)", "ns", "wheel_arm_cancel_ns",
         None, "none", None),
    ]
    for n in ("10k", "100k", "1M"):
        for op in ("insert", "cancel", "expire"):
            r.append((f"timers {op} @{n} pending (wheel)", "ns/op", f"wheel_{op}_ns_{n}",
                      f"go_timer_{op}_ns_{n}", "Go time.AfterFunc / Stop", None))
    r += [
        ("memory per queued task", "bytes", "ax_queued_bytes", "go_seed_queued_bytes",
         go_seed, at_most(256, "bytes")),
        ("RSS per parked task", "bytes", "ax_parked_bytes", "go_parked_bytes",
         "Go goroutine in time.Sleep", at_most(6144, "bytes")),
        ("dispatch latency p50, workers awake (50% load)", "us", "ax_latency_p50_us",
         "go_seed_latency_p50_us", go_seed, None),
        ("dispatch latency p99, workers awake (50% load)", "us", "ax_latency_p99_us",
         "go_seed_latency_p99_us", go_seed, at_most(50, "us")),
        # What the awake p99 is made of: the first task of each burst of 25,
        # which often wakes a sleeping worker, and the other 24. No peer.
        ("dispatch latency p99, awake, first task of each burst", "us",
         "ax_latency_first_p99_us", None, "none", None),
        ("dispatch latency p99, awake, the other tasks of each burst", "us",
         "ax_latency_rest_p99_us", None, "none", None),
        # config.idle_poll_us=2000: worker 0 polls through the 1 ms between
        # bursts instead of sleeping after 50 us; what that costs is the CPU
        # row after it (the process's CPU seconds per second, both runs).
        ("dispatch latency p50, awake, worker 0 polling (idle_poll_us=2000)", "us",
         "ax_latency_poll_p50_us", "go_seed_latency_p50_us", go_seed, None),
        ("dispatch latency p99, awake, worker 0 polling (idle_poll_us=2000)", "us",
         "ax_latency_poll_p99_us", "go_seed_latency_p99_us", go_seed, at_most(50, "us")),
        # The arrivals made by a task that waits for each burst on a timerfd
        # in its worker's reactor, as the peer's submitting goroutine sleeps
        # in its runtime's timers: no thread outside the scheduler.
        ("dispatch latency p99, awake, arrivals from a task", "us",
         "ax_latency_from_task_p99_us", "go_seed_latency_p99_us", go_seed, at_most(50, "us")),
        ("CPU s per s, awake latency run, default config", "CPU s/s", "ax_latency_cpu", None,
         "none", None),
        ("CPU s per s, awake latency run, idle_poll_us=2000", "CPU s/s", "ax_latency_poll_cpu",
         "ax_latency_cpu", "ax, default config", None),
        ("dispatch latency p50, workers asleep (1 task / 5 ms)", "us",
         "ax_latency_asleep_p50_us", "go_seed_latency_asleep_p50_us", go_seed, None),
        ("dispatch latency p99, workers asleep (1 task / 5 ms)", "us",
         "ax_latency_asleep_p99_us", "go_seed_latency_asleep_p99_us", go_seed,
         at_most(50, "us")),
        ("timer lateness p50 (50 ms sleep)", "ms", "ax_lateness_p50_ms", "go_lateness_p50_ms",
         "Go time.Sleep", None),
        ("timer lateness p99 (50 ms sleep)", "ms", "ax_lateness_p99_ms", "go_lateness_p99_ms",
         "Go time.Sleep", at_most(2, "ms")),
        # The sleepers submitted by a task, as the peer's goroutines are
        # started by its main goroutine: two busy threads on two CPUs, as in
        # the peer (the row above has three: its submitter is a thread of
        # its own). Like with like; the row above stays as measured.
        ("timer lateness p99 (50 ms sleep), submitted from a task", "ms",
         "ax_lateness_from_task_p99_ms", "go_lateness_p99_ms", "Go time.Sleep", at_most(2, "ms")),
        ("timer lateness max (50 ms sleep)", "ms", "ax_lateness_max_ms", None, "none", None),
        ("timer lateness max (50 ms sleep), submitted from a task", "ms",
         "ax_lateness_from_task_max_ms", None, "none", None),
        # Split by when the sleep began: while the bench's one submitting
        # thread still ran (three busy threads on 2 cores), or after. No peer.
        ("timer lateness p99, sleeps begun while submitting", "ms",
         "ax_lateness_submitting_p99_ms", None, "none", None),
        ("timer lateness p99, sleeps begun after the last submit", "ms",
         "ax_lateness_after_p99_ms", None, "none", None),
        # Beside one busy thread per CPU that is not ax's (bench/ax_beside.c):
        # what a worker that gives its CPU away too long costs. No peer.
        ("sleep lateness p50 beside busy threads (1-2 ms sleeps)", "us",
         "ax_beside_sleep_p50_us", None, "none", None),
        ("sleep lateness p99 beside busy threads (1-2 ms sleeps)", "us",
         "ax_beside_sleep_p99_us", None, "none", None),
        ("dispatch latency p50 beside busy threads (1 task / 200 us)", "us",
         "ax_beside_start_p50_us", None, "none", None),
        ("dispatch latency p99 beside busy threads (1 task / 200 us)", "us",
         "ax_beside_start_p99_us", None, "none", None),
        (f"idle CPU over {idle_s:g} s, sleeping tasks", "CPU s", "ax_idle_cpu_s",
         "go_idle_cpu_s", "Go goroutines in time.Sleep", at_most(0.01 * idle_s / 5, "CPU s")),
        ("instructions per task (full path)", "instr/task", "ax_instr_per_task", None, "n/a",
         None),
        # Issue 10's hot-path budget (bench/locked.awk): what is left are the
        # job's own state word and the worker's own wheel lock (src/SCALING.md).
        ("locked instructions per task (full path, ax's code)", "instr/task",
         "ax_locked_per_task", None, "n/a", None),
        ("mutexes taken per task (full path)", "locks/task", "ax_mutex_per_task", None, "n/a",
         None),
    ]
    for n in ("100", "1000", "10000"):
        r += [
            (f"HTTP requests/s, {n} in flight (ax-upstream, 10 ms)", "req/s", f"ax_http_rps_{n}",
             f"tp_http_rps_{n}", f"pthread pool of {n}, blocking curl", None),
            (f"memory per in-flight request, {n}", "bytes", f"ax_http_rss_per_req_{n}",
             f"tp_http_rss_per_req_{n}", f"pthread pool of {n}", None),
            (f"threads at {n} in flight", "threads", f"ax_http_threads_{n}", f"tp_http_threads_{n}",
             f"pthread pool of {n}", None),
            (f"descriptors at {n} in flight", "fds", f"ax_http_fds_{n}", f"tp_http_fds_{n}",
             f"pthread pool of {n}", None),
            (f"failed requests, {n} in flight", "requests", f"ax_http_failed_{n}",
             f"tp_http_failed_{n}", f"pthread pool of {n}", None),
        ]
    # Issue 11: keep-alive against nginx serving a static file, beside wrk on
    # the same server. New connections: ax's after a 1 s warm-up, wrk's
    # over its whole run (it opens its N connections at the start).
    for n in ("100", "1000"):
        r += [
            (f"HTTP requests/s, {n} in flight (nginx, static file)", "req/s",
             f"ax_nginx_rps_{n}", f"wrk_nginx_rps_{n}", f"wrk -c{n}", at_least(0.5)),
            (f"new connections per 1000 requests, {n} in flight (nginx)", "conn/1k req",
             f"ax_nginx_newconn_per_1k_{n}", f"wrk_nginx_newconn_per_1k_{n}", f"wrk -c{n}",
             at_most(1, "conn/1k req")),
            (f"client CPU per request, {n} in flight (nginx)", "us/req",
             f"ax_nginx_cpu_us_per_req_{n}", f"wrk_nginx_cpu_us_per_req_{n}", f"wrk -c{n}", None),
        ]
    # Issue 13: libax_redis end to end (XADD -> empty handler -> XACK), one
    # producer and two consumer processes, beside BullMQ on the same
    # redis-server with two Worker processes.
    bull = "BullMQ, 2 Worker processes"
    r += [
        ("Redis queue end to end, 2 consumer processes", "tasks/s", "ax_redis_e2e_tasks_per_s",
         "bullmq_e2e_tasks_per_s", bull, at_least(3)),
        ("Redis queue consumer CPU per task (both consumer processes)", "us/task",
         "ax_redis_e2e_cpu_us_per_task", "bullmq_e2e_cpu_us_per_task", bull, None),
        # The burst's producers send as fast as they can, and each side's
        # differs: the tail of a burst waits about N / consumed per s - N /
        # submitted per s, so a slower producer shortens its own side's
        # wait. The paced rows below give both sides the same arrivals.
        ("Redis queue producer, burst of N (Queue.addBulk / ax_redis_submit_batch)", "msg/s",
         "ax_redis_e2e_submit_per_s", "bullmq_e2e_submit_per_s", bull, None),
        ("Redis queue submit -> start p50, burst of N", "us", "ax_redis_e2e_p50_us",
         "bullmq_e2e_p50_us", bull, None),
        ("Redis queue submit -> start p99, burst of N", "us", "ax_redis_e2e_p99_us",
         "bullmq_e2e_p99_us", bull, below_peer()),
        ("Redis queue submit -> start p50, paced (500 msg/s)", "us", "ax_redis_e2e_paced_p50_us",
         "bullmq_e2e_paced_p50_us", bull, None),
        ("Redis queue submit -> start p99, paced (500 msg/s)", "us", "ax_redis_e2e_paced_p99_us",
         "bullmq_e2e_paced_p99_us", bull, below_peer()),
    ]
    r += [
        # peer = the same ax run with events off (metrics are always kept): the
        # ratio is the share of throughput left with full JSON logging on.
        ("full path with every event as JSON lines", "ns/task", "ax_obs_json_ns", "ax_obs_off_ns",
         "ax, events off", at_least(0.8)),
        # What the ratio above mostly pays for on 2 cores: the event thread's
        # own CPU (schedstat), which the rest of the machine barely moves.
        ("event thread CPU per task, every event as JSON lines", "ns/task",
         "ax_obs_json_thread_ns", None, "none", None),
    ]
    return r


# Keys printed by the micro-benchmarks of ax internals (bench_switch.c,
# bench_wheel.c): their rows are left out when those programs do not exist.
INTERNAL = ("coro_", "wheel_")


def load(path):
    values = defaultdict(list)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2:
                continue
            try:
                values[parts[0]].append(float(parts[1]))
            except ValueError:
                pass
    return values


def fmt(v):
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 0.01:
        return f"{v:.2f}"
    return f"{v:.2g}"


def main():
    raw, out = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    idle_s = float(sys.argv[sys.argv.index("--idle-s") + 1]) if "--idle-s" in sys.argv else 5
    values = load(raw)

    def med(key):
        v = values.get(key)
        return statistics.median(v) if v else None

    results = []
    for name, unit, ax_key, peer_key, peer_name, target in rows(idle_s):
        axv = values.get(ax_key, [])
        peerv = values.get(peer_key, []) if peer_key else []
        if not axv and (not peerv or ax_key.startswith(INTERNAL)):
            continue  # nothing measured, or an optional micro-benchmark that is absent
        ax = statistics.median(axv) if axv else None
        peer = statistics.median(peerv) if peerv else None
        ratio = None
        if ax is not None and peer is not None:
            if unit in HIGHER_IS_BETTER:
                ratio = ax / peer if peer > 0 else None
            else:
                ratio = peer / ax if ax > 0 else None  # ax at 0: unbounded, shown as inf
        met = None
        if target and ax is not None and not quick:
            met = target[1](ax, peer, ratio, med)
        results.append({
            "name": name, "unit": unit, "ax": ax, "peer": peer, "peer_name": peer_name,
            "ratio": ratio,
            "ax_min": min(axv) if axv else None, "ax_max": max(axv) if axv else None,
            "peer_min": min(peerv) if peerv else None, "peer_max": max(peerv) if peerv else None,
            "target": target[0] if target else None, "met": met,
            "runs": len(axv),
        })

    with open(out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")

    head = ["benchmark", "unit", "ax", "peer", "peer name", "ratio", "ax min-max",
            "peer min-max", "target", "met"]
    table = [head]
    for r in results:
        if r["ratio"] is not None:
            ratio = f"{r['ratio']:.2f}x"
        elif r["ax"] == 0 and r["peer"]:
            ratio = "inf"
        else:
            ratio = "-"
        table.append([
            r["name"], r["unit"], fmt(r["ax"]), fmt(r["peer"]), r["peer_name"], ratio,
            f"{fmt(r['ax_min'])}-{fmt(r['ax_max'])}" if r["ax"] is not None else "-",
            f"{fmt(r['peer_min'])}-{fmt(r['peer_max'])}" if r["peer"] is not None else "-",
            r["target"] or "", {True: "yes", False: "NO", None: ""}[r["met"]],
        ])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    right = {2, 3, 5}
    for i, row in enumerate(table):
        cells = [c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in
                 enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    missing = [r["name"] for r in results if r["ax"] is None]
    if missing:
        print(f"\nno ax figure for: {', '.join(missing)}")
    if not any(k.startswith("machine_line_rtt_") for k in values):
        print("\nmachine: no cache-line reading (machine_line needs two CPUs it may pin a "
              "thread to each of; its reason is in build-bench/stderr.log): compare these "
              "rows with another run's only if both ran on an idle machine at the same hour")
    print(f"\n{'quick run: smoke test, targets not judged. ' if quick else ''}"
          f"ratio = peer / ax (> 1: ax better). Written: {out}")


if __name__ == "__main__":
    main()
