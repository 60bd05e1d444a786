package main

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// benchIdiomatic: what a Go user writes instead of the seed's scheduler, the
// idiomatic peer of ax's full path (ax_fullpath.c):
//
//	sem := make(chan struct{}, maxConcurrency)
//	for each task {
//	    sem <- struct{}{}                      // block while cap tasks run
//	    wg.Add(1)
//	    go func() {                            // one goroutine per task
//	        defer wg.Done()
//	        defer func() { <-sem }()
//	        ctx, cancel := context.WithTimeout(bg, timeout)
//	        defer cancel()
//	        if err := body(ctx); err != nil { failed++ }
//	    }()
//	}
//	wg.Wait()
//
// Same work as ax_fullpath.c: `tasks` empty task bodies from one goroutine,
// 1 s timeout each, cap 500 (ax's default max_concurrency), first send on
// the semaphore -> wg.Wait returning. Per task, Go does what ax does not: a
// goroutine start, a context with a runtime timer armed and stopped, two
// channel operations on the semaphore. It does not do what ax does: no
// priorities and no queue (the submitter blocks at the cap instead of
// queueing), no admission, no id, no result struct, no on_done callback.
// bench/run runs it at GOMAXPROCS=1 (the 1-worker row) and GOMAXPROCS=2
// (the 2-worker row); the key names the GOMAXPROCS it ran with:
//
//	go_idiom_fullpath_p<GOMAXPROCS>_ns  (wg.Wait returning - start) / tasks
func benchIdiomatic(a args) {
	tasks, limit := a.int("tasks", 200000), a.int("cap", 500)
	bg := context.Background()
	body := func(ctx context.Context) error { return nil }
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	var failed int64

	start := time.Now()
	for i := 0; i < tasks; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			if err := body(ctx); err != nil {
				atomic.AddInt64(&failed, 1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failed != 0 {
		fail("idiomatic: %d tasks failed", failed)
	}
	report("go_idiom_fullpath_p"+strconv.Itoa(runtime.GOMAXPROCS(0))+"_ns",
		float64(elapsed.Nanoseconds())/float64(tasks))
}
