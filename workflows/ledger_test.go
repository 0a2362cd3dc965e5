package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolgate/toolgate/ledger"
	"github.com/toolgate/toolgate/policy"
)

// testLedger is a real ledger (SQLite in a temporary directory) that can
// be made to fail, as a database that is down or a worker that dies
// after the commit does.
type testLedger struct {
	*ledger.Ledger
	mu sync.Mutex
	// down fails this many appends before they reach the database.
	down int
	// lostAnswers commits this many appends and then fails them, as a
	// worker that crashed before the result was recorded.
	lostAnswers int
	attempts    int
}

func newTestLedger(t *testing.T) *testLedger {
	dir := t.TempDir()
	keys, _, err := ledger.LoadOrCreateKey(filepath.Join(dir, "ledger.key"), "test")
	require.NoError(t, err)
	l, err := ledger.Open(context.Background(), ledger.Options{DSN: filepath.Join(dir, "ledger.db"), Keys: keys})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return &testLedger{Ledger: l}
}

func (l *testLedger) Append(ctx context.Context, entries ...ledger.Entry) ([]int64, error) {
	l.mu.Lock()
	l.attempts++
	down := l.down > 0
	if down {
		l.down--
	}
	lost := !down && l.lostAnswers > 0
	if lost {
		l.lostAnswers--
	}
	l.mu.Unlock()
	if down {
		return nil, errors.New("connection refused")
	}
	idx, err := l.Ledger.Append(ctx, entries...)
	if lost {
		return nil, errors.New("worker lost before the answer")
	}
	return idx, err
}

// kinds returns the kinds of a call's entries, in log order, and the
// entries decoded.
func (l *testLedger) kinds(t *testing.T, callID string) ([]string, []map[string]any) {
	stored, err := l.CallEntries(context.Background(), callID)
	require.NoError(t, err)
	var kinds []string
	var entries []map[string]any
	for _, s := range stored {
		var e map[string]any
		require.NoError(t, json.Unmarshal(s.Entry, &e))
		kinds = append(kinds, e["kind"].(string))
		entries = append(entries, e)
	}
	return kinds, entries
}

var callKinds = []string{ledger.KindCallSubmitted, ledger.KindCallDecided, ledger.KindCallFinished}

func (s *CallSuite) TestAnAutoApprovedCallIsInTheLedgerOnceBeforeItsToolRunsAndItsResultReturns() {
	started := 0
	s.hooks.onStart = func(policy.Call) {
		started++
		kinds, _ := s.ledger.kinds(s.T(), "c1")
		s.Equal(callKinds[:2], kinds, "the tool starts once its approval is in the ledger")
	}
	r := s.runOne(call("c1", "echo", `{"text":"hi"}`))

	s.Equal(StatusOK, r.Status)
	s.Equal(1, started)
	kinds, e := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
	s.Equal("agent-1", e[0]["requester"])
	s.Equal("echo", e[0]["tool"])
	s.Equal("server", e[0]["execution"])
	s.Equal("test/1", e[0]["policy_version"])
	s.Equal("allow", e[0]["verdict"])
	s.Nil(e[0]["shadow"], "no shadow rule decided it")
	s.Equal(map[string]any{"text": "hi"}, e[0]["args"])
	s.Equal("policy", e[1]["decision"].(map[string]any)["decided_by"])
	s.Equal("ok", e[2]["status"])
	s.Equal(map[string]any{"text": "hi"}, e[2]["output"])
}

func (s *CallSuite) TestAPersonsDecisionAndTheRedactedOutputAreInTheLedger() {
	s.policy.ask["leak"] = policy.ApprovalRequest{Message: "leak?", Rule: "ask-leak", Groups: []string{"ops"}}
	decideAt(s.env, time.Hour, "c1", approverIn(policy.Approved, "alice", "ops"))
	r := s.runAsked(call("c1", "leak", `{"token":"sk-live-123"}`))

	s.Equal(StatusOK, r.Status)
	kinds, e := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
	s.Equal("ask-leak", e[0]["rule"])
	s.Equal("ask", e[0]["verdict"])
	d := e[1]["decision"].(map[string]any)
	s.Equal("alice", d["decided_by"])
	s.Equal([]any{"ops"}, d["groups"])
	s.Equal("approved", d["kind"])
	raw, _ := json.Marshal(e)
	s.NotContains(string(raw), "sk-live-123", "arguments and output pass the policy's redaction")
}

func (s *CallSuite) TestDeniedAndTimedOutCallsAreInTheLedger() {
	s.policy.deny["write"] = "frozen"
	r := s.runOne(call("c1", "write", `{"path":"a","content":"x"}`))
	s.Equal(StatusDenied, r.Status)
	kinds, e := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
	s.Equal("frozen", e[1]["decision"].(map[string]any)["reason"])
	s.Equal("deny", e[0]["verdict"])
	s.Equal("denied", e[2]["status"])

	s.SetupTest()
	s.policy.ask["write"] = policy.ApprovalRequest{Message: "write?", Rule: "ask-write", Timeout: time.Hour}
	r = s.runAsked(call("c2", "write", `{"path":"a","content":"x"}`))
	s.Equal(StatusTimedOut, r.Status)
	kinds, e = s.ledger.kinds(s.T(), "c2")
	s.Equal([]string{ledger.KindCallSubmitted, ledger.KindCallFinished}, kinds, "nobody decided")
	s.Equal("timed_out", e[1]["status"])
	s.Equal("ask", e[0]["verdict"])
}

// A shadow rule's verdict is recorded in the call's submission and
// enforces nothing: the call its shadow deny would refuse runs.
func (s *CallSuite) TestAShadowRulesVerdictIsRecordedAndNotEnforced() {
	s.policy.shadows = map[string]*policy.Shadow{"echo": {Rule: "no-echo", Action: "deny"}}
	r := s.runOne(call("c1", "echo", `{"text":"hi"}`))

	s.Equal(StatusOK, r.Status, "the tool ran")
	kinds, e := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
	s.Equal("allow", e[0]["verdict"])
	s.Equal(map[string]any{"rule": "no-echo", "action": "deny"}, e[0]["shadow"])
	s.Equal("policy", e[1]["decision"].(map[string]any)["decided_by"])
}

// A ledger that is down holds the call: its status says why, the tool does
// not run, and once the ledger is back the call finishes, logged once.
func (s *CallSuite) TestALedgerThatIsDownMakesTheCallWaitAndSaySo() {
	s.ledger.down = 7 // two rounds of three quick tries, and one more
	during := s.stateAt(time.Second, "c1")
	ranWhileDown := -1
	s.env.RegisterDelayedCallback(func() { ranWhileDown = s.runs.count("c1") }, time.Second)
	r := s.runOne(call("c1", "echo", `{"text":"hi"}`))

	s.Contains(during.LedgerWait, "the ledger cannot be written since")
	s.Contains(during.LedgerWait, "connection refused")
	s.Equal(StatusEvaluating, during.Status)
	s.Equal(0, ranWhileDown, "no tool ran while the ledger was down")
	s.Equal(StatusOK, r.Status)
	s.Equal(1, s.runs.count("c1"))
	kinds, _ := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
}

// An append whose answer is lost after it committed (a worker killed at
// the wrong moment) is tried again, and the log still has each event once.
func (s *CallSuite) TestAnAppendRetriedAfterItsCommitLogsNothingTwice() {
	s.ledger.lostAnswers = 2
	r := s.runOne(call("c1", "echo", `{"text":"hi"}`))

	s.Equal(StatusOK, r.Status)
	s.Greater(s.ledger.attempts, 2)
	kinds, _ := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)
	size, err := s.ledger.Size(context.Background())
	s.NoError(err)
	s.EqualValues(3, size)
}

// The session's sticky decision, the call it covers (which names it), the
// revoke and the end are each in the ledger once, though answers are lost.
func (s *CallSuite) TestTheSessionsDecisionsAreInTheLedger() {
	s.ledger.lostAnswers = 4
	s.policy.ask["Bash"] = policy.ApprovalRequest{Message: "run it?", Rule: "ask-bash"}
	decideAt(s.env, time.Hour, "c1", approverIn(policy.ApprovedForSession, "alice", "*"))
	revoke := sessionUpdate(s.env, 5*time.Hour, UpdateRevoke, RevokeRequest{Key: "write", By: "bob", Groups: []string{"*"}})
	end := sessionUpdate(s.env, 6*time.Hour, UpdateEnd, EndRequest{By: "root", Groups: []string{"*"}})
	rs := s.runSession(harnessInput{Sequential: true, Gap: time.Hour, Calls: []CallInput{
		call("c1", "write", `{"path":"a","content":"x"}`),
		call("c2", "write", `{"path":"b","content":"y"}`),
		agentCall("c3", "Bash", `{"command":"make"}`), // waits until the end
	}})

	s.Equal(StatusOK, rs[1].Status)
	s.Equal(StatusDenied, rs[2].Status)
	s.NoError(*revoke)
	s.NoError(*end)
	all, err := s.ledger.Entries(context.Background(), 0, 100)
	s.Require().NoError(err)
	var kinds []string
	byKind := map[string]map[string]any{}
	for _, st := range all {
		var e map[string]any
		s.Require().NoError(json.Unmarshal(st.Entry, &e))
		kinds = append(kinds, e["kind"].(string))
		if e["kind"] != ledger.KindCallDecided || e["call_id"] == "c2" {
			byKind[e["kind"].(string)] = e
		}
	}
	count := map[string]int{}
	for _, k := range kinds {
		count[k]++
	}
	s.Equal(map[string]int{ledger.KindCallSubmitted: 3, ledger.KindCallDecided: 3, ledger.KindCallFinished: 3,
		ledger.KindSessionSticky: 1, ledger.KindSessionRevoked: 1, ledger.KindSessionEnded: 1}, count, "each event once")
	sticky := byKind[ledger.KindSessionSticky]
	s.Equal("session/s1/sticky/c1", sticky["event"])
	s.Equal("c2", byKind[ledger.KindCallDecided]["call_id"])
	s.Equal("session/s1/sticky/c1", byKind[ledger.KindCallDecided]["decision"].(map[string]any)["sticky"], "the covered call names the sticky entry")
	s.Equal("bob", byKind[ledger.KindSessionRevoked]["by"])
	s.Equal("root", byKind[ledger.KindSessionEnded]["by"])
	rep, err := s.ledger.VerifyStore(context.Background(), nil)
	s.Error(err, "no checkpoint was signed yet")
	_, err = s.ledger.SignCheckpoint(context.Background())
	s.Require().NoError(err)
	rep, err = s.ledger.VerifyStore(context.Background(), nil)
	s.NoError(err)
	s.EqualValues(len(all), rep.Entries)
}

// A worker that keeps no ledger says so in its evaluation, and its calls
// schedule no append at all: before, each call's first append ran only to
// answer Off. A worker with a ledger appends as before.
func (s *CallSuite) TestACallOnAWorkerWithoutALedgerSchedulesNoAppend() {
	n := countScheduled(s, s.acts.AppendLedger)
	s.Equal(StatusOK, s.runOne(call("c1", "echo", `{"text":"hi"}`)).Status)
	s.Positive(*n, "a worker with a ledger appends")
	kinds, _ := s.ledger.kinds(s.T(), "c1")
	s.Equal(callKinds, kinds)

	s.SetupTest()
	s.acts.Ledger = nil
	n = countScheduled(s, s.acts.AppendLedger)
	s.Equal(StatusOK, s.runOne(call("c2", "echo", `{"text":"hi"}`)).Status)
	s.Zero(*n, "a worker without a ledger schedules no append")
}
