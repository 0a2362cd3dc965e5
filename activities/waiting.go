package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/policy"
)

// Calls that wait for a person do not register with their session: the
// session finds them through visibility when it has something to tell them
// (a sticky decision, its end). The race between a call that starts to
// wait and a session that lists the waiting calls is closed from both
// sides: the session writes its news to its memo before it lists, and a
// call reads the memo only after it sees itself in the listings
// (AwaitListed). Whichever comes second sees the other.

// SessionWord is what a session says to one call: a sticky decision of the
// call's key, or the denial of the session's end (who ended it, with their
// groups). Empty: nothing.
type SessionWord struct {
	Sticky *policy.Decision `json:"sticky,omitempty"`
	End    *policy.Decision `json:"end,omitempty"`
}

// ListedInput is the argument of AwaitListed.
type ListedInput struct {
	// Listed is a visibility query that finds the call's run.
	Listed  string       `json:"listed"`
	Session StickyLookup `json:"session"`
	Key     string       `json:"key"`
}

// Backoff of AwaitListed's polls: visibility usually follows within tens
// of milliseconds, and lags by seconds under a burst.
const (
	listedFirstPoll = 25 * time.Millisecond
	listedMaxPoll   = time.Second
)

// StatusAttribute is the search attribute of a call's status, and
// pendingStatus its value while the call waits for a person.
const (
	StatusAttribute  = "ToolgateStatus"
	pendingStatus    = "pending"
	evaluatingStatus = "evaluating" // what a call shows from its start until it waits or is decided
)

// AwaitListed waits until visibility lists the call as waiting, then reads
// what its session says to it. A call that listings show past waiting
// (decided meanwhile) needs no word: it returns at once.
func (a *Activities) AwaitListed(ctx context.Context, in ListedInput) (SessionWord, error) {
	if a.Client == nil {
		return SessionWord{}, temporal.NewNonRetryableApplicationError("worker has no Temporal client to read visibility", "Misconfigured", nil)
	}
	for wait := listedFirstPoll; ; wait = min(2*wait, listedMaxPoll) {
		status, err := a.listedStatus(ctx, in.Listed)
		if err != nil {
			return SessionWord{}, err
		}
		switch status {
		case pendingStatus:
			word, err := a.readSession(ctx, in.Session, in.Key)
			if err != nil {
				return SessionWord{}, fmt.Errorf("read the session: %w", err)
			}
			return word, nil
		case "", evaluatingStatus: // not listed as waiting yet: the listing lags the call
		default:
			return SessionWord{}, nil
		}
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return SessionWord{}, ctx.Err()
		case <-activity.GetWorkerStopChannel(ctx):
			return SessionWord{}, errors.New("the worker is stopping; another one takes over")
		case <-time.After(wait):
		}
	}
}

// listedStatus is the call's status as visibility lists it, or "".
func (a *Activities) listedStatus(ctx context.Context, query string) (string, error) {
	resp, err := a.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 1})
	if err != nil {
		return "", fmt.Errorf("look for the call in visibility: %w", err)
	}
	for _, e := range resp.GetExecutions() {
		p := e.GetSearchAttributes().GetIndexedFields()[StatusAttribute]
		if p == nil {
			return "", nil
		}
		var status string
		if err := converter.GetDefaultDataConverter().FromPayload(p, &status); err != nil {
			return "", fmt.Errorf("decode the call's listed status: %w", err)
		}
		return status, nil
	}
	return "", nil
}

// readSession reads what the session says to a call of key. No session
// has nothing to say; a closed one only its end, if it ended.
func (a *Activities) readSession(ctx context.Context, l StickyLookup, key string) (SessionWord, error) {
	desc, err := a.Client.DescribeWorkflowExecution(ctx, l.WorkflowID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return SessionWord{}, nil
	case err != nil:
		return SessionWord{}, err
	}
	return sessionWordOf(desc.GetWorkflowExecutionInfo(), l, key)
}

// sessionWordOf reads key's sticky decision and the end from a session's
// memo. A session that is no longer running has no sticky decisions, but
// one that ended stays ended: its closed run's memo keeps the end, so a
// call that comes later is denied instead of asking a person.
func sessionWordOf(info *workflowpb.WorkflowExecutionInfo, l StickyLookup, key string) (SessionWord, error) {
	running := info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	var word SessionWord
	fields := info.GetMemo().GetFields()
	if shown, ok := fields[l.Memo]; ok && running {
		var byKey map[string]*policy.Decision
		if err := converter.GetDefaultDataConverter().FromPayload(shown, &byKey); err != nil {
			return SessionWord{}, fmt.Errorf("decode the sticky decisions: %w", err)
		}
		word.Sticky = byKey[key]
	}
	if end, ok := fields[l.Ended]; ok && l.Ended != "" {
		if err := converter.GetDefaultDataConverter().FromPayload(end, &word.End); err != nil {
			return SessionWord{}, fmt.Errorf("decode the session's end: %w", err)
		}
	}
	return word, nil
}

// ReleaseInput is the argument of ReleaseWaiting.
type ReleaseInput struct {
	// Query finds the calls to tell.
	Query string `json:"query"`
	// Name and Arg are the signal each call gets.
	Name string          `json:"name"`
	Arg  json.RawMessage `json:"arg,omitempty"`
	// Limit caps the calls told.
	Limit int `json:"limit"`
}

// ReleaseWaiting tells every call the query finds, by signals sent from
// here, in parallel: one activity in the session's history however many
// calls wait. It returns how many calls it told. A retry tells the calls
// still listed again; they take a repeated answer as one.
func (a *Activities) ReleaseWaiting(ctx context.Context, in ReleaseInput) (int, error) {
	defer heartbeat(ctx, releaseHeartbeat)()
	ids, err := a.ListWorkflowIDs(ctx, ListInput{Query: in.Query, Limit: in.Limit})
	if err != nil {
		return 0, err
	}
	signals := make([]Signal, len(ids))
	for i, id := range ids {
		signals[i] = Signal{WorkflowID: id, Name: in.Name, Arg: in.Arg}
	}
	gone, err := a.SendSignals(ctx, SignalsInput{Signals: signals})
	if err != nil {
		return 0, err
	}
	return len(ids) - len(gone), nil
}

// releaseHeartbeat is how often a release says it is alive, well within
// its heartbeat timeout: a release of 10,000 calls takes minutes.
const releaseHeartbeat = 5 * time.Second

// CheckWaitingInput is the argument of CheckWaiting.
type CheckWaitingInput struct {
	Query    string          `json:"query"`
	Approver policy.Approver `json:"approver"`
}

// CheckWaiting returns why the approver may not act on one of the calls
// the query finds (their groups, as listed), or "" when they may act on
// all.
func (a *Activities) CheckWaiting(ctx context.Context, in CheckWaitingInput) (string, error) {
	if a.Client == nil {
		return "", temporal.NewNonRetryableApplicationError("worker has no Temporal client to read visibility", "Misconfigured", nil)
	}
	var token []byte
	for {
		resp, err := a.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: in.Query, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return "", fmt.Errorf("list waiting calls: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			groups, err := listedGroups(e.GetSearchAttributes().GetIndexedFields()[GroupsAttribute])
			if err != nil {
				return "", fmt.Errorf("call %s: %w", e.GetExecution().GetWorkflowId(), err)
			}
			if err := in.Approver.MayAct(groups); err != nil {
				return fmt.Sprintf("waiting call %s: %v", e.GetExecution().GetWorkflowId(), err), nil
			}
		}
		activity.RecordHeartbeat(ctx)
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return "", nil
		}
	}
}

// GroupsAttribute is the search attribute of a waiting call's approver
// groups ("*": any approver).
const GroupsAttribute = "ToolgateGroups"

// listedGroups decodes a call's listed groups; "*" and none mean any
// approver may act.
func listedGroups(p *commonpb.Payload) ([]string, error) {
	if p == nil {
		return nil, nil
	}
	var groups []string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &groups); err != nil {
		return nil, fmt.Errorf("decode its groups: %w", err)
	}
	if len(groups) == 1 && groups[0] == "*" {
		return nil, nil
	}
	return groups, nil
}
