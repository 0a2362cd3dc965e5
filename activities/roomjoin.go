package activities

import (
	"context"
	"hash/fnv"
	"sync"
	"time"
)

// roomJoins gathers the registrations this worker's calls send to one
// session's waiting rooms, so that calls parking at once share one signal
// and one workflow task of one room.
//
// Why. A registration sent alone costs its room a signal and, at the rates
// a busy session parks at, a workflow task of its own (with its timer
// cancelled and started again): about what the call's own first task
// costs the server. One signal carrying every registration that arrived
// meanwhile costs the room one task for all of them.
//
// How. Per session, one sender: it sends what is queued (up to
// maxJoinBatch registrations) as one signal, waits until joinEvery has
// passed since, and sends what queued meanwhile, until nothing did. A
// registration that finds no sender leaves at once, so a quiet session
// parks as fast as before; a busy one parks its calls up to joinEvery
// later, in batches. Each batch goes to the room of its first call's ID,
// so batches spread over the rooms as calls did, and each caller learns
// the room that took it (the call records it: its leave goes there).
//
// A batch that fails fails every caller in it; their attempts are retried,
// and a room takes a call it already holds once. A call whose registration
// landed is remembered for a while (placed): an attempt retried after it
// (its describe of the session failed) is not registered again, in what
// could be another room, where it would linger until its deadline.
type roomJoins struct {
	mu       sync.Mutex
	sessions map[string]*sessionJoins
	placed   map[string]placement
}

// placement is the room a call's registration landed in, and when.
type placement struct {
	room int
	at   time.Time
}

// sessionJoins is one session's queue, and whether its sender runs.
type sessionJoins struct {
	queue   []*pendingJoin
	sending bool
}

// pendingJoin is one call's registration, waiting for its batch.
type pendingJoin struct {
	in   JoinInput
	done chan joined // buffered: the sender never waits for a caller
}

type joined struct {
	room   int
	landed time.Time // when the room's server acknowledged the batch
	err    error
}

const (
	// joinEvery is the least time between two batches of one session from
	// one worker. Each batch costs its room a workflow task and the
	// session a describe: at 250 ms, a session taking 40 calls a second
	// from one worker takes about 10 calls a batch (measured on the
	// cluster, docs/benchmarks.md: 2-3 ms of CPU less a parked call than
	// at 100 ms), and a person hears of a call in it at most 250 ms
	// later.
	joinEvery = 250 * time.Millisecond
	// maxJoinBatch bounds a batch: a registration is a few hundred bytes.
	maxJoinBatch = 200
	// joinTimeout bounds a batch's signal; its callers' attempts retry.
	joinTimeout = 10 * time.Second
	// placedTTL is how long a landed registration is remembered: longer
	// than a join's attempts take (signalOrStartOptions) between retries;
	// maxPlaced bounds the memory (forgetting only risks a second room).
	placedTTL = 5 * time.Minute
	maxPlaced = 10000
)

// sendJoin delivers a batch to a room: a signal-with-start.
type sendJoin func(ctx context.Context, in SignalWithStartInput) error

// join queues in's registration and returns, once a room took the batch
// it went in, the index of that room in in.Rooms and the moment the
// server acknowledged the batch.
func (j *roomJoins) join(ctx context.Context, in JoinInput, send sendJoin) (int, time.Time, error) {
	key := in.TaskQueue + "\x00" + in.Session
	p := &pendingJoin{in: in, done: make(chan joined, 1)}
	j.mu.Lock()
	if at, ok := j.placed[key+"\x00"+in.CallID]; ok && time.Since(at.at) < placedTTL {
		j.mu.Unlock()
		return at.room, at.at, nil // a retried attempt: its room has it
	}
	if j.sessions == nil {
		j.sessions = map[string]*sessionJoins{}
	}
	s := j.sessions[key]
	if s == nil {
		s = &sessionJoins{}
		j.sessions[key] = s
	}
	s.queue = append(s.queue, p)
	if !s.sending {
		s.sending = true
		go j.sendLoop(key, s, send)
	}
	j.mu.Unlock()
	select {
	case r := <-p.done:
		return r.room, r.landed, r.err
	case <-ctx.Done():
		return 0, time.Time{}, ctx.Err()
	}
}

// sendLoop sends s's queue in batches, at most one per joinEvery, until
// it is empty.
func (j *roomJoins) sendLoop(key string, s *sessionJoins, send sendJoin) {
	for {
		j.mu.Lock()
		n := min(len(s.queue), maxJoinBatch)
		if n == 0 {
			s.sending = false
			delete(j.sessions, key)
			j.mu.Unlock()
			return
		}
		batch := s.queue[:n:n]
		s.queue = s.queue[n:]
		j.mu.Unlock()
		sent := time.Now()
		r := sendBatch(batch, send)
		if r.err == nil {
			j.place(key, batch, r.room, r.landed)
		}
		for _, p := range batch {
			p.done <- r
		}
		time.Sleep(time.Until(sent.Add(joinEvery)))
	}
}

// place remembers the room batch's calls landed in.
func (j *roomJoins) place(key string, batch []*pendingJoin, room int, at time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.placed == nil || len(j.placed)+len(batch) > maxPlaced {
		j.placed = make(map[string]placement, len(batch))
	}
	for _, p := range batch {
		j.placed[key+"\x00"+p.in.CallID] = placement{room: room, at: at}
	}
}

// sendBatch signals batch's registrations, as one list, to the room of its
// first call.
func sendBatch(batch []*pendingJoin, send sendJoin) joined {
	first := batch[0].in
	regs := make([]any, len(batch))
	for i, p := range batch {
		regs[i] = p.in.Registration
	}
	room := RoomIndex(first.CallID, len(first.Rooms))
	r := first.Rooms[room]
	ctx, cancel := context.WithTimeout(context.Background(), joinTimeout) // not one caller's: they all wait for it
	defer cancel()
	err := send(ctx, SignalWithStartInput{WorkflowID: r.WorkflowID, WorkflowType: first.WorkflowType, TaskQueue: first.TaskQueue,
		SignalName: first.SignalName, Signal: regs, StartInput: r.StartInput})
	return joined{room: room, landed: time.Now(), err: err}
}

// RoomIndex spreads call IDs over n rooms: a batch goes to the room of its
// first call, and a call whose join was recorded without a room waited in
// the room of its ID (workflows.RoomOf).
func RoomIndex(callID string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(callID))
	return int(h.Sum32() % uint32(n))
}
