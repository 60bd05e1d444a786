package main

import (
	"runtime"
	"sync"
	"time"
)

// benchGosched: the peer of ax_yield (ax_switch.c). Two goroutines on one P
// (this benchmark sets GOMAXPROCS=1 itself, as ax_switch runs one worker)
// each call runtime.Gosched `rounds` times once both have started; every
// call puts the caller on the global run queue and schedules the other, so
// the pair makes 2 * rounds hand-offs.
//
//	go_gosched_ns  (both done - both started) / (2 * rounds)
//
// Per hand-off Go does what ax does not: it puts the caller on the global
// run queue under the scheduler's lock, and schedule() checks timers and the
// run queues before it picks the other goroutine. ax does what Go does not:
// a deadline and cancel check on every yield, and a publish of the running
// task for the watchdog.
func benchGosched(a args) {
	rounds := a.int("rounds", 1000000)
	runtime.GOMAXPROCS(1)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(2)
	done.Add(2)
	for g := 0; g < 2; g++ {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			for i := 0; i < rounds; i++ {
				runtime.Gosched()
			}
		}()
	}
	ready.Wait() // both exist and wait on start
	t0 := time.Now()
	close(start)
	done.Wait()
	elapsed := time.Since(t0)
	report("go_gosched_ns", float64(elapsed.Nanoseconds())/float64(2*rounds))
}
