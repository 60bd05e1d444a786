// Command axbench holds the Go peers of ax's benchmarks: one subcommand per
// benchmark, each printing "name value" lines that bench/run collects.
// Standard library only. bench/run sets GOMAXPROCS: the number of cores,
// except where a row compares with a given number of ax workers; keys of
// those benchmarks carry the GOMAXPROCS they ran with (_p<N>).
//
//	axbench gosched   rounds=N            go_gosched_ns (sets GOMAXPROCS=1)
//	axbench spawn     tasks=N             go_spawn_ns
//	axbench idiomatic tasks=N cap=C       go_idiom_fullpath_p<GOMAXPROCS>_ns
//	axbench fullpath  tasks=N cap=C       go_seed_fullpath_p<GOMAXPROCS>_ns
//	axbench timers    sizes=10000,...     go_timer_{insert,cancel,expire}_ns_<N>
//	axbench queued    tasks=N             go_seed_queued_bytes
//	axbench parked    tasks=N idle_s=S    go_parked_bytes, go_idle_cpu_s
//	axbench latency   rate=R ms=M burst=B task_ms=T   go_seed_latency_p{50,99}_us
//	axbench latency   idle_gap_ms=G ms=M [burst=1 task_ms=0]
//	                                      go_seed_latency_asleep_p{50,99}_us
//	axbench lateness  tasks=N sleep_ms=S  go_lateness_p{50,99}_ms
package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var benches = map[string]func(args){
	"gosched":   benchGosched,
	"spawn":     benchSpawn,
	"idiomatic": benchIdiomatic,
	"fullpath":  benchFullPath,
	"timers":    benchTimers,
	"queued":    benchQueued,
	"parked":    benchParked,
	"latency":   benchLatency,
	"lateness":  benchLateness,
}

func main() {
	if len(os.Args) < 2 || benches[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: axbench BENCH [name=value ...]; see main.go")
		os.Exit(2)
	}
	a := args{}
	for _, kv := range os.Args[2:] {
		if k, v, ok := strings.Cut(kv, "="); ok {
			a[k] = v
		}
	}
	benches[os.Args[1]](a)
}

// args are the "name=value" command-line arguments.
type args map[string]string

func (a args) int(name string, def int) int {
	if v, ok := a[name]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			fail("%s=%q: %v", name, v, err)
		}
		return n
	}
	return def
}

func (a args) ints(name string, def []int) []int {
	v, ok := a[name]
	if !ok {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			fail("%s=%q: %v", name, v, err)
		}
		out = append(out, n)
	}
	return out
}

func report(name string, value float64) {
	fmt.Printf("%s %.4g\n", name, value)
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(1)
}

// rssBytes is the resident set size from /proc/self/statm, as the C side reads it.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		fail("statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// cpuSeconds is user + system CPU time of the whole process.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// percentile is the nearest-rank percentile p (0..100) of v; sorts v.
func percentile(v []time.Duration, p float64) time.Duration {
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	k := int(p/100*float64(len(v)) + 0.999999)
	if k < 1 {
		k = 1
	}
	if k > len(v) {
		k = len(v)
	}
	return v[k-1]
}
