package main

import (
	"math/rand"
	"sync/atomic"
	"time"
)

func sizeName(n int) string {
	switch {
	case n%1000000 == 0:
		return itoa(n/1000000) + "M"
	case n%1000 == 0:
		return itoa(n/1000) + "k"
	}
	return itoa(n)
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// benchTimers: with N timers pending, the cost per timer of
//   insert  time.AfterFunc, expiries uniform over 60 s (as bench_wheel.c)
//   cancel  Timer.Stop of all of them
//   expire  N timers all due at one instant D: (last callback - D) / N; the
//           runtime's own firing of timers (each AfterFunc callback runs on a
//           new goroutine, as Go does it).
func benchTimers(a args) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range a.ints("sizes", []int{10000, 100000, 1000000}) {
		durs := make([]time.Duration, n)
		for i := range durs {
			durs[i] = time.Millisecond * time.Duration(1+rng.Intn(60000))
		}
		timers := make([]*time.Timer, n)
		noop := func() {}

		t0 := time.Now()
		for i := range timers {
			timers[i] = time.AfterFunc(durs[i], noop)
		}
		t1 := time.Now()
		for _, t := range timers {
			t.Stop()
		}
		t2 := time.Now()

		// Arm all n for one instant D far enough ahead that arming ends
		// before D; if it does not, stop them and try again further ahead.
		var last, due time.Time
		for margin := 2*t1.Sub(t0) + 20*time.Millisecond; ; margin *= 2 {
			var fired int64
			allFired := make(chan struct{})
			f := func() {
				if atomic.AddInt64(&fired, 1) == int64(n) {
					last = time.Now()
					close(allFired)
				}
			}
			due = time.Now().Add(margin)
			for i := range timers {
				timers[i] = time.AfterFunc(time.Until(due), f)
			}
			if time.Now().Before(due) {
				<-allFired
				break
			}
			for _, t := range timers {
				t.Stop()
			}
			if margin > 10*time.Second {
				fail("timers: cannot arm %d timers within %v", n, margin)
			}
		}

		name := sizeName(n)
		report("go_timer_insert_ns_"+name, float64(t1.Sub(t0).Nanoseconds())/float64(n))
		report("go_timer_cancel_ns_"+name, float64(t2.Sub(t1).Nanoseconds())/float64(n))
		report("go_timer_expire_ns_"+name, float64(last.Sub(due).Nanoseconds())/float64(n))
	}
}
