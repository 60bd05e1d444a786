package main

import (
	"sync"
	"time"
)

// benchSpawn: `go f()` with a sync.WaitGroup, f empty (go_spawn_ns per task,
// first go statement to wg.Wait returning).
func benchSpawn(a args) {
	tasks := a.int("tasks", 1000000)
	var wg sync.WaitGroup
	f := func() { wg.Done() }
	start := time.Now()
	for i := 0; i < tasks; i++ {
		wg.Add(1)
		go f()
	}
	wg.Wait()
	report("go_spawn_ns", float64(time.Since(start).Nanoseconds())/float64(tasks))
}
