package main

// The seed's scheduler (the design article, §3.2 - §3.4 and §5), written
// idiomatically and without handicaps, as the Go peer of ax's full path:
//
//   - Submit validates, assigns an id and sends the task to the loop;
//   - one loop goroutine selects on submitCh / doneCh / delayCh / stopCh /
//     a 10 ms ticker. The ticker only moves delayed (retry) tasks whose time
//     has come back to their bucket; dispatch runs after *every* event, so a
//     submission never waits for a tick (the article's loop only dispatched
//     one task per tick - that would be a handicap, not the design);
//   - three bounded FIFO buckets with quota rounds: up to N = cap/2 from
//     high, then up to M = cap/3 from normal, then LowGuaranteed (1) from low;
//     a bucket that is empty passes its turn on;
//   - a concurrency cap: dispatch loops until the cap or empty buckets;
//   - one goroutine per task: context.WithTimeout, the task body in its own
//     goroutine writing a buffered (cap 1) done channel, select on done vs
//     ctx.Done(), recover() around the body;
//   - completion tells the loop over a buffered doneCh (the article's
//     `runningCount--` from the task goroutine is a data race);
//   - timeouts: OnTimeout runs on its own goroutine (§5.2), then a retry with
//     exponential back-off and jitter if MaxRetry allows (§5.5).

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"
)

type Priority int

const (
	High Priority = iota
	Normal
	Low
	numPriorities
)

type TaskState int32

const (
	Pending TaskState = iota
	Running
	Succeeded
	Failed
	TimedOut
	Retrying
)

var (
	ErrInvalid = errors.New("invalid task")
	ErrFull    = errors.New("queue full")
	ErrStopped = errors.New("scheduler stopped")
	ErrTimeout = errors.New("task timed out")
)

type Task struct {
	ID        uint64
	Priority  Priority
	Timeout   time.Duration
	MaxRetry  int
	State     TaskState
	Execute   func(ctx context.Context) error
	OnDone    func(t *Task, err error) // once, with nil, the error, ErrTimeout or ErrFull
	OnTimeout func(t *Task)            // each timed-out attempt, on its own goroutine

	attempt int
	readyAt time.Time // for delayed (retry) tasks
}

type Config struct {
	MaxConcurrency int
	Capacity       [numPriorities]int
	LowGuaranteed  int
	RetryBase      time.Duration
	RetryMax       time.Duration
	RetryJitter    time.Duration
}

type Stats struct {
	Queued  [numPriorities]int
	Running int
}

type Scheduler struct {
	cfg   Config
	quota [numPriorities]int

	submitCh chan *Task
	doneCh   chan struct{}
	delayCh  chan *Task
	statsCh  chan chan Stats
	stopCh   chan struct{}
	loopDone chan struct{}
	nextID   uint64
	wg       sync.WaitGroup

	// owned by the loop goroutine
	buckets [numPriorities]fifo
	delayed delayHeap
	running int
	turn    Priority // bucket whose turn it is in the current round
	taken   int      // tasks taken from it in this turn
}

func NewScheduler(cfg Config) *Scheduler {
	if cfg.LowGuaranteed <= 0 {
		cfg.LowGuaranteed = 1
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase, cfg.RetryMax, cfg.RetryJitter = time.Second, 30*time.Second, time.Second
	}
	s := &Scheduler{
		cfg:      cfg,
		submitCh: make(chan *Task, 1024),
		doneCh:   make(chan struct{}, cfg.MaxConcurrency+1),
		delayCh:  make(chan *Task, 1024),
		statsCh:  make(chan chan Stats),
		stopCh:   make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	s.quota = [numPriorities]int{max(1, cfg.MaxConcurrency/2), max(1, cfg.MaxConcurrency/3),
		cfg.LowGuaranteed}
	go s.loop()
	return s
}

func (s *Scheduler) Submit(t *Task) error {
	if t.Execute == nil || t.Timeout <= 0 || t.Priority < 0 || t.Priority >= numPriorities {
		return ErrInvalid
	}
	t.ID = atomic.AddUint64(&s.nextID, 1)
	t.State = Pending
	select {
	case s.submitCh <- t:
		return nil
	case <-s.stopCh:
		return ErrStopped
	}
}

func (s *Scheduler) Stats() Stats {
	reply := make(chan Stats)
	s.statsCh <- reply
	return <-reply
}

// Stop ends the loop and waits for running tasks; queued tasks are dropped.
func (s *Scheduler) Stop() {
	close(s.stopCh)
	<-s.loopDone
	s.wg.Wait()
}

func (s *Scheduler) loop() {
	defer close(s.loopDone)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-s.stopCh:
			return
		case <-ticker.C:
			s.moveExpiredToReady()
		case t := <-s.submitCh:
			s.enqueue(t)
		case <-s.doneCh:
			s.running--
		case t := <-s.delayCh:
			heap.Push(&s.delayed, t)
		case reply := <-s.statsCh:
			st := Stats{Running: s.running}
			for p := range s.buckets {
				st.Queued[p] = s.buckets[p].n
			}
			reply <- st
		}
		s.dispatch()
	}
}

func (s *Scheduler) enqueue(t *Task) {
	b := &s.buckets[t.Priority]
	if b.n >= s.cfg.Capacity[t.Priority] {
		if t.OnDone != nil {
			t.OnDone(t, ErrFull)
		}
		return
	}
	b.push(t)
}

func (s *Scheduler) moveExpiredToReady() {
	now := time.Now()
	for len(s.delayed) > 0 && !s.delayed[0].readyAt.After(now) {
		s.enqueue(heap.Pop(&s.delayed).(*Task))
	}
}

// dispatch starts tasks until the cap is reached or the buckets are empty.
func (s *Scheduler) dispatch() {
	for s.running < s.cfg.MaxConcurrency {
		t := s.popTask()
		if t == nil {
			return
		}
		s.running++
		s.wg.Add(1)
		go s.run(t)
	}
}

// popTask takes the next task by quota rounds: high up to quota[High], normal
// up to quota[Normal], low up to LowGuaranteed, then the next round. An empty
// bucket passes its turn on, so with high and normal empty low takes all.
func (s *Scheduler) popTask() *Task {
	for i := 0; i <= int(numPriorities); i++ {
		b := &s.buckets[s.turn]
		if s.taken < s.quota[s.turn] && b.n > 0 {
			s.taken++
			return b.pop()
		}
		s.turn = (s.turn + 1) % numPriorities
		s.taken = 0
	}
	return nil
}

func (s *Scheduler) run(t *Task) {
	defer s.wg.Done()
	defer func() { s.doneCh <- struct{}{} }()

	ctx, cancel := context.WithTimeout(context.Background(), t.Timeout)
	defer cancel()
	t.State = Running
	done := make(chan error, 1) // buffered: a late body must not leak
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v", r)
			}
		}()
		done <- t.Execute(ctx)
	}()
	select {
	case err := <-done:
		s.handleResult(t, err)
	case <-ctx.Done():
		s.handleTimeout(t)
	}
}

func (s *Scheduler) handleResult(t *Task, err error) {
	if err == nil {
		t.State = Succeeded
	} else if t.attempt < t.MaxRetry {
		s.retry(t)
		return
	} else {
		t.State = Failed
	}
	if t.OnDone != nil {
		t.OnDone(t, err)
	}
}

func (s *Scheduler) handleTimeout(t *Task) {
	if t.OnTimeout != nil {
		go t.OnTimeout(t)
	}
	if t.attempt < t.MaxRetry {
		s.retry(t)
		return
	}
	t.State = TimedOut
	if t.OnDone != nil {
		t.OnDone(t, ErrTimeout)
	}
}

// retry: delay = min(max, base * 2^attempt) + random(0, jitter), via the loop.
func (s *Scheduler) retry(t *Task) {
	d := s.cfg.RetryBase << uint(t.attempt)
	if d > s.cfg.RetryMax || d <= 0 {
		d = s.cfg.RetryMax
	}
	if s.cfg.RetryJitter > 0 {
		d += time.Duration(rand.Int63n(int64(s.cfg.RetryJitter)))
	}
	t.attempt++
	t.State = Retrying
	t.readyAt = time.Now().Add(d)
	select {
	case s.delayCh <- t:
	case <-s.stopCh:
	}
}

// fifo is a growable ring buffer of tasks.
type fifo struct {
	buf     []*Task
	head, n int
}

func (q *fifo) push(t *Task) {
	if q.n == len(q.buf) {
		nb := make([]*Task, max(16, 2*len(q.buf)))
		for i := 0; i < q.n; i++ {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = t
	q.n++
}

func (q *fifo) pop() *Task {
	t := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return t
}

// delayHeap orders delayed tasks by readyAt.
type delayHeap []*Task

func (h delayHeap) Len() int            { return len(h) }
func (h delayHeap) Less(i, j int) bool  { return h[i].readyAt.Before(h[j].readyAt) }
func (h delayHeap) Swap(i, j int)       { h[i], h[j] = h[j], h[i] }
func (h *delayHeap) Push(x interface{}) { *h = append(*h, x.(*Task)) }
func (h *delayHeap) Pop() interface{} {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func max(a, b int) int {
	if a > b {
		return a
	}
	return b
}
