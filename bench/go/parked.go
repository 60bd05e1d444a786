package main

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// benchParked: `tasks` goroutines in time.Sleep(time.Hour).
//   go_parked_bytes  (RSS with all parked - RSS at start) / tasks, after a GC
//                    that returns free memory to the OS (Go's best figure)
//   go_idle_cpu_s    CPU seconds of the process over the next idle_s seconds
func benchParked(a args) {
	tasks, idle := a.int("tasks", 100000), a.int("idle_s", 5)
	rss0 := rssBytes()
	var parked int64
	for i := 0; i < tasks; i++ {
		go func() {
			atomic.AddInt64(&parked, 1)
			time.Sleep(time.Hour)
		}()
	}
	for atomic.LoadInt64(&parked) < int64(tasks) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	runtime.GC()
	debug.FreeOSMemory()
	rss1 := rssBytes()
	report("go_parked_bytes", float64(rss1-rss0)/float64(tasks))

	cpu0 := cpuSeconds()
	time.Sleep(time.Duration(idle) * time.Second)
	report("go_idle_cpu_s", cpuSeconds()-cpu0)
}

// benchLateness: `tasks` goroutines each time.Sleep(sleep_ms) and note how
// late they woke (wake - (before sleep + sleep_ms)).
func benchLateness(a args) {
	tasks, sleepMs := a.int("tasks", 100000), a.int("sleep_ms", 50)
	d := time.Duration(sleepMs) * time.Millisecond
	late := make([]time.Duration, tasks)
	var wg sync.WaitGroup
	wg.Add(tasks)
	for i := 0; i < tasks; i++ {
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			time.Sleep(d)
			late[i] = time.Since(t0) - d
		}(i)
	}
	wg.Wait()
	report("go_lateness_p50_ms", float64(percentile(late, 50).Nanoseconds())/1e6)
	report("go_lateness_p99_ms", float64(percentile(late, 99).Nanoseconds())/1e6)
}
