package main

import (
	"context"
	"runtime"
	"runtime/debug"
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
// 1 s timeout, cap 500 (ax's default), until the last OnDone.
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
	report("go_seed_fullpath_ns", float64(elapsed.Nanoseconds())/float64(tasks))
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

// benchLatency: submit -> start latency of the seed scheduler at ~50 % of its
// cap, the same arrival pattern as ax_latency.c (bursts of `burst` every
// burst/rate s); tasks wait task_ms on a timer or their context.
func benchLatency(a args) {
	rate, ms, burst, taskMs := a.int("rate", 25000), a.int("ms", 1000), a.int("burst", 25),
		a.int("task_ms", 10)
	n := rate * ms / 1000 / burst * burst
	submitted := make([]time.Duration, n)
	started := make([]time.Duration, n)
	s := NewScheduler(Config{MaxConcurrency: 500, Capacity: fullCapacity(n)})
	var wg sync.WaitGroup
	wg.Add(n)
	onDone := func(t *Task, err error) { wg.Done() }
	base := time.Now().Add(time.Millisecond)
	period := time.Duration(burst) * time.Second / time.Duration(rate)

	for i, b := 0, 0; i < n; b++ {
		time.Sleep(time.Until(base.Add(time.Duration(b) * period)))
		for j := 0; j < burst; j, i = j+1, i+1 {
			i := i
			exec := func(ctx context.Context) error {
				started[i] = time.Since(base)
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
	report("go_seed_latency_p50_us", float64(percentile(lat, 50).Nanoseconds())/1e3)
	report("go_seed_latency_p99_us", float64(percentile(lat, 99).Nanoseconds())/1e3)
}
