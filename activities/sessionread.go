package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
)

// sessionReads shares the describes of a session's run among the calls of
// one worker that read it at once. A thousand calls arriving in one
// session would otherwise describe the same run a thousand times, and the
// server throttles describes of a busy run (BusyWorkflow).
//
// Sharing keeps each read as fresh as its caller needs: a caller names
// the moment its describe must not be sent before (notBefore: its arrival,
// or the moment its registration landed in a waiting room), and joins a
// describe in flight only if it was sent at or after that moment, else the
// one queued behind it. So the calls of one batch of registrations share
// one describe sent after the batch landed, and what any caller reads is
// never older than what it asked for. At most one describe of a run is in
// flight per worker, and one queued.
//
// It also remembers what the last describe of each session read (known):
// its owner, which never changes while its session's runs exist, and
// whether it showed no sticky decision and no end.
type sessionReads struct {
	mu       sync.Mutex
	queued   map[string]*sessionRead // sent once the run's flight lands
	inFlight map[string]*sessionRead
	sessions map[string]knownSession
}

// sessionRead is one describe that any number of callers wait for.
type sessionRead struct {
	done chan struct{}
	sent time.Time // when it was sent; zero while it is queued
	resp *workflowservice.DescribeWorkflowExecutionResponse
	err  error
}

// knownSession is a session as a describe sent at At read it: its owner,
// and Quiet when it showed no sticky decision and no end.
type knownSession struct {
	Owner string
	Quiet bool
	At    time.Time
}

// knownTTL bounds how long a session's owner is taken from memory: a
// session's owner changes only when its runs are gone (retention) and
// another agent opens it anew; maxKnownSessions bounds the memory.
const (
	knownTTL         = 30 * time.Second
	maxKnownSessions = 10000
)

// describeFunc describes a workflow's latest run.
type describeFunc func(ctx context.Context, workflowID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)

// read describes workflowID with a describe sent at or after notBefore,
// shared with the other callers it is fresh enough for, and returns it
// with the moment it was sent.
func (s *sessionReads) read(ctx context.Context, workflowID string, notBefore time.Time, describe describeFunc) (*workflowservice.DescribeWorkflowExecutionResponse, time.Time, error) {
	s.mu.Lock()
	if s.queued == nil {
		s.queued, s.inFlight = map[string]*sessionRead{}, map[string]*sessionRead{}
	}
	r := s.inFlight[workflowID]
	if r == nil || r.sent.Before(notBefore) {
		r = s.queued[workflowID]
		if r == nil {
			r = &sessionRead{done: make(chan struct{})}
			s.queued[workflowID] = r
			if s.inFlight[workflowID] == nil {
				s.sendLocked(workflowID, describe)
			}
		}
	}
	s.mu.Unlock()
	select {
	case <-r.done:
		return r.resp, r.sent, r.err
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
}

// sendLocked sends the queued describe of workflowID; when it lands, the
// one queued meanwhile is sent. s.mu is held.
func (s *sessionReads) sendLocked(workflowID string, describe describeFunc) {
	r := s.queued[workflowID]
	delete(s.queued, workflowID)
	r.sent = time.Now()
	s.inFlight[workflowID] = r
	go func() {
		// Not any one caller's context: they all wait for it.
		ctx, cancel := context.WithTimeout(context.Background(), sessionReadTimeout)
		resp, err := describe(ctx, workflowID)
		cancel()
		s.mu.Lock()
		r.resp, r.err = resp, err
		delete(s.inFlight, workflowID)
		close(r.done)
		if s.queued[workflowID] != nil {
			s.sendLocked(workflowID, describe)
		}
		s.mu.Unlock()
	}()
}

// known is what a describe read of the session within knownTTL.
func (s *sessionReads) known(workflowID string, now time.Time) (knownSession, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.sessions[workflowID]
	if !ok || now.Sub(k.At) > knownTTL {
		return knownSession{}, false
	}
	return k, true
}

// saw remembers what a describe read of a session that has an owner.
func (s *sessionReads) saw(workflowID string, k knownSession) {
	if k.Owner == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions == nil || len(s.sessions) >= maxKnownSessions {
		s.sessions = map[string]knownSession{} // forgetting is always safe
	}
	if old, ok := s.sessions[workflowID]; ok && old.At.After(k.At) {
		return // a later read landed first
	}
	s.sessions[workflowID] = k
}
