package main

import "time"

// benchSwitch: two goroutines ping-pong a token over two unbuffered
// channels; each round trip is two hand-offs (go_switch_ns per hand-off).
func benchSwitch(a args) {
	rounds := a.int("rounds", 1000000)
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	start := time.Now()
	for i := 0; i < rounds; i++ {
		ping <- i
		<-pong
	}
	elapsed := time.Since(start)
	close(ping)
	report("go_switch_ns", float64(elapsed.Nanoseconds())/float64(2*rounds))
}
