package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var priorityCycle = [3]Priority{High, Normal, Low}

func fullCapacity(n int) [numPriorities]int {
	return [numPriorities]int{n, n, n}
}

// benchFullPath: the seed scheduler's full path, same work as ax_fullpath.c:
// `tasks` empty tasks from one goroutine, priorities cycling high/normal/low,
// 1 s timeout, cap 500 (ax's default), until the last OnDone. Per task the
// seed does what ax does not: a send to and a receive from its loop
// goroutine over channels, two goroutines (run + body), a context with a
// runtime timer, a done channel, a select, recover(), a completion message
// back to the loop. ax does what the seed does not: admission checks (bounds,
// shed, rate), an id in a process-wide table, a coroutine with its own stack,
// an ax_result for on_done, wait/run histograms. bench/run runs it at
// GOMAXPROCS=1 and 2 beside ax's 1 and 2 workers:
//
//	go_seed_fullpath_p<GOMAXPROCS>_ns  (last OnDone - first Submit) / tasks
func benchFullPath(a args) {
	tasks := a.int("tasks", 200000)
	s := NewScheduler(Config{MaxConcurrency: a.int("cap", 500), Capacity: fullCapacity(tasks)})
	var wg sync.WaitGroup
	var failed int64
	wg.Add(tasks)
	onDone := func(t *Task, err error) {
		if err != nil {
			atomic.AddInt64(&failed, 1)
		}
		wg.Done()
	}
	exec := func(ctx context.Context) error { return nil }

	start := time.Now()
	for i := 0; i < tasks; i++ {
		t := &Task{Priority: priorityCycle[i%3], Timeout: time.Second, Execute: exec, OnDone: onDone}
		if err := s.Submit(t); err != nil {
			fail("submit: %v", err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	s.Stop()
	if failed != 0 {
		fail("fullpath: %d tasks failed", failed)
	}
	report("go_seed_fullpath_p"+strconv.Itoa(runtime.GOMAXPROCS(0))+"_ns",
		float64(elapsed.Nanoseconds())/float64(tasks))
}

// benchQueued: bytes per task held in the seed scheduler's buckets (nothing
// dispatched: cap 0). Garbage is collected and returned to the OS before the
// reading, which gives Go its best figure.
func benchQueued(a args) {
	tasks := a.int("tasks", 1000000)
	rss0 := rssBytes()
	s := NewScheduler(Config{MaxConcurrency: 0, Capacity: fullCapacity(tasks)})
	exec := func(ctx context.Context) error { return nil }
	for i := 0; i < tasks; i++ {
		if err := s.Submit(&Task{Priority: Normal, Timeout: time.Second, Execute: exec}); err != nil {
			fail("submit: %v", err)
		}
	}
	for s.Stats().Queued[Normal] < tasks {
		time.Sleep(time.Millisecond)
	}
	runtime.GC()
	debug.FreeOSMemory()
	rss1 := rssBytes()
	report("go_seed_queued_bytes", float64(rss1-rss0)/float64(tasks))
	runtime.KeepAlive(s)
}

// benchLatency: submit -> start latency of the seed scheduler, the same
// arrival pattern as ax_latency.c, in one of two modes:
//   - workers awake (default): ~50 % of its cap, bursts of `burst` every
//     burst/rate s; tasks wait task_ms on a timer or their context;
//     prints go_seed_latency_p{50,99}_us;
//   - workers asleep (idle_gap_ms=G > 0): a burst of `burst` (default 1)
//     every G ms, task bodies empty (task_ms default 0), so the loop and
//     every P are idle when the next burst comes; prints
//     go_seed_latency_asleep_p{50,99}_us.
func benchLatency(a args) {
	gap := a.int("idle_gap_ms", 0)
	rate, ms, burst, taskMs := a.int("rate", 25000), a.int("ms", 1000), a.int("burst", 25),
		a.int("task_ms", 10)
	n := rate * ms / 1000 / burst * burst
	period := time.Duration(burst) * time.Second / time.Duration(rate)
	prefix := "go_seed_latency_"
	if gap > 0 {
		burst, taskMs = a.int("burst", 1), a.int("task_ms", 0)
		n = ms / gap * burst
		period = time.Duration(gap) * time.Millisecond
		prefix = "go_seed_latency_asleep_"
	}
	if n < 10 {
		fail("latency: %d tasks are too few; raise ms", n)
	}
	submitted := make([]time.Duration, n)
	started := make([]time.Duration, n)
	s := NewScheduler(Config{MaxConcurrency: 500, Capacity: fullCapacity(n)})
	var wg sync.WaitGroup
	wg.Add(n)
	onDone := func(t *Task, err error) { wg.Done() }
	base := time.Now().Add(time.Millisecond)

	for i, b := 0, 0; i < n; b++ {
		time.Sleep(time.Until(base.Add(time.Duration(b) * period)))
		for j := 0; j < burst; j, i = j+1, i+1 {
			i := i
			exec := func(ctx context.Context) error {
				started[i] = time.Since(base)
				if taskMs == 0 {
					return nil
				}
				timer := time.NewTimer(time.Duration(taskMs) * time.Millisecond)
				defer timer.Stop()
				select {
				case <-timer.C:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			submitted[i] = time.Since(base)
			if err := s.Submit(&Task{Priority: Normal, Timeout: time.Second, Execute: exec,
				OnDone: onDone}); err != nil {
				fail("submit: %v", err)
			}
		}
	}
	wg.Wait()
	s.Stop()

	skip := n / 10
	lat := make([]time.Duration, 0, n-skip)
	for i := skip; i < n; i++ {
		lat = append(lat, started[i]-submitted[i])
	}
	report(prefix+"p50_us", float64(percentile(lat, 50).Nanoseconds())/1e3)
	report(prefix+"p99_us", float64(percentile(lat, 99).Nanoseconds())/1e3)
}
