package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/toolgate/toolgate/policy"
)

// SessionNews is what a session has decided for all of its calls: its
// sticky decisions, as a call applies them, and its end. The session shows
// it in its memo (MemoNews), where a call's policy evaluation reads it with
// a describe, and sends it to its waiting rooms whenever it changes;
// Revision orders the copies.
type SessionNews struct {
	Revision int64           `json:"revision"`
	Sticky   []KeyedDecision `json:"sticky,omitempty"`
	// End is the denial of the session's end (who ended it, with their
	// groups), once it ended.
	End *policy.Decision `json:"end,omitempty"`
}

// KeyedDecision is one sticky decision of a session. Since is the revision
// that recorded it: a room hands out a decision whose Since it has not seen.
type KeyedDecision struct {
	Key      string          `json:"key"`
	Since    int64           `json:"since"`
	Decision policy.Decision `json:"decision"`
}

// StickyFor is key's sticky decision, or nil.
func (n *SessionNews) StickyFor(key string) *KeyedDecision {
	if n == nil {
		return nil
	}
	for i := range n.Sticky {
		if n.Sticky[i].Key == key {
			return &n.Sticky[i]
		}
	}
	return nil
}

// Memo keys of a session workflow.
const (
	// MemoNews holds the session's SessionNews.
	MemoNews = "news"
	// MemoOwner holds the name of the agent the session belongs to.
	MemoOwner = "owner"
)

// SessionWord is what a session says to one call at its evaluation: the
// sticky decision of the call's key, the denial of its end, and whose
// session it is.
type SessionWord struct {
	Sticky *policy.Decision `json:"sticky,omitempty"`
	End    *policy.Decision `json:"end,omitempty"`
	Owner  string           `json:"owner,omitempty"`
}

// sessionReadTimeout bounds the describe at evaluation: without an answer
// the call joins its waiting room, which knows the session's decisions.
const sessionReadTimeout = 2 * time.Second

// readSession reads what the session says to a call of key from its memo,
// which the server answers (strongly consistent, unlike a visibility
// listing). A session that is no longer running has no sticky decisions,
// but one that ended stays ended, and its owner stays its owner. A session
// that was never opened says nothing; a read that fails is an error, as
// the owner it would tell must not be guessed.
func (a *Activities) readSession(ctx context.Context, workflowID, key string) (SessionWord, error) {
	if a.Client == nil {
		return SessionWord{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sessionReadTimeout)
	defer cancel()
	return a.describeSession(ctx, workflowID, key, time.Now())
}

// describeSession reads what the session says to a call of key with a
// describe of its run sent at or after notBefore (shared with the
// worker's other calls that read it at once: sessionReads), and remembers
// what it read.
func (a *Activities) describeSession(ctx context.Context, workflowID, key string, notBefore time.Time) (SessionWord, error) {
	desc, sent, err := a.reads.read(ctx, workflowID, notBefore, func(ctx context.Context, id string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		return a.Client.DescribeWorkflowExecution(ctx, id, "")
	})
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return SessionWord{}, nil
	case err != nil:
		return SessionWord{}, fmt.Errorf("read session %s: %w", workflowID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	news, owner, err := SessionMemo(a.dataConverter(), info)
	if err != nil {
		return SessionWord{}, err
	}
	a.reads.saw(workflowID, knownSession{Owner: owner, Quiet: len(news.Sticky) == 0 && news.End == nil, At: sent})
	word := SessionWord{End: news.End, Owner: owner}
	if d := news.StickyFor(key); d != nil && info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		word.Sticky = &d.Decision
	}
	return word, nil
}

// ReadSessionInput is the argument of ReadSession.
type ReadSessionInput struct {
	// Session is the session's workflow ID.
	Session string `json:"session"`
	// Key is the sticky key of the call that asks.
	Key string `json:"key,omitempty"`
}

// ReadSession reads what the session says now to a call of the key: its
// owner, its end and the sticky decision of the key (strongly consistent).
// An agent-run call reads it when its approval is claimed, since the end
// or a revoke voids an approval not yet taken.
func (a *Activities) ReadSession(ctx context.Context, in ReadSessionInput) (SessionWord, error) {
	return a.readSession(ctx, in.Session, in.Key)
}

// SessionMemo decodes a session run's news and owner from its memo, with
// the data converter the memo was written with.
func SessionMemo(dc converter.DataConverter, info *workflowpb.WorkflowExecutionInfo) (SessionNews, string, error) {
	var news SessionNews
	var owner string
	fields := info.GetMemo().GetFields()
	if p, ok := fields[MemoNews]; ok {
		if err := dc.FromPayload(p, &news); err != nil {
			return news, "", fmt.Errorf("decode the session's news: %w", err)
		}
	}
	if p, ok := fields[MemoOwner]; ok {
		if err := dc.FromPayload(p, &owner); err != nil {
			return news, "", fmt.Errorf("decode the session's owner: %w", err)
		}
	}
	return news, owner, nil
}

// SignalWithStartInput names a workflow to start if absent and signal.
type SignalWithStartInput struct {
	WorkflowID   string `json:"workflow_id"`
	WorkflowType string `json:"workflow_type"`
	TaskQueue    string `json:"task_queue"`
	SignalName   string `json:"signal_name"`
	Signal       any    `json:"signal"`
	StartInput   any    `json:"start_input"`
	// Memo is the memo of a run this starts.
	Memo map[string]any `json:"memo,omitempty"`
	// UnlessEnded drops the signal when the workflow is a session whose
	// last run ended it: a fresh run would forget the end.
	UnlessEnded bool `json:"unless_ended,omitempty"`
}

// SignalWithStart atomically starts the workflow if it is not running and
// delivers the signal: how a call lazily creates its waiting room (or its
// session), even when many calls arrive at once.
func (a *Activities) SignalWithStart(ctx context.Context, in SignalWithStartInput) error {
	if a.Client == nil {
		return temporal.NewNonRetryableApplicationError("worker has no Temporal client to start workflows", "Misconfigured", nil)
	}
	if in.UnlessEnded {
		desc, err := a.Client.DescribeWorkflowExecution(ctx, in.WorkflowID, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
		case err != nil:
			return fmt.Errorf("describe %s: %w", in.WorkflowID, err)
		case desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			news, _, err := SessionMemo(a.dataConverter(), desc.GetWorkflowExecutionInfo())
			if err != nil {
				return err
			}
			if news.End != nil {
				return nil // the session ended: nobody is left to tell
			}
		}
	}
	_, err := a.Client.SignalWithStartWorkflow(ctx, in.WorkflowID, in.SignalName, in.Signal,
		client.StartWorkflowOptions{ID: in.WorkflowID, TaskQueue: in.TaskQueue, Memo: in.Memo}, in.WorkflowType, in.StartInput)
	if err != nil {
		return fmt.Errorf("signal-with-start %s: %w", in.WorkflowID, err)
	}
	return nil
}

// JoinInput is the argument of JoinWaitingRoom: the call's registration,
// the session's waiting rooms (the worker picks the one that takes it),
// and the session to read once a room has the call.
type JoinInput struct {
	CallID       string `json:"call_id"`
	Registration any    `json:"registration"`
	// Rooms are the session's rooms; WorkflowType, TaskQueue and
	// SignalName start and signal them (the signal is a list of
	// registrations).
	Rooms        []RoomStart `json:"rooms"`
	WorkflowType string      `json:"workflow_type"`
	TaskQueue    string      `json:"task_queue"`
	SignalName   string      `json:"signal_name"`
	Session      string      `json:"session"`
	Key          string      `json:"key"`
}

// RoomStart is one waiting room: its workflow ID, and its input if a
// batch has to start it.
type RoomStart struct {
	WorkflowID string `json:"workflow_id"`
	StartInput any    `json:"start_input"`
}

// Joined is what JoinWaitingRoom returns: what the session said once a
// room had the call, and which room that is.
type Joined struct {
	SessionWord
	// Room indexes JoinInput.Rooms. Absent from joins recorded before
	// calls shared their rooms' signals: those went to the room of the
	// call's ID.
	Room *int `json:"room,omitempty"`
}

// JoinWaitingRoom registers a call with one of its session's waiting
// rooms, in one signal with the registrations of the worker's other calls
// of the session that join at once (roomJoins), starting the room if it
// does not run; then it reads what the session says to a call of the key.
// The two together leave no gap: what the session decided before the room
// had the call is in the memo read after; what it decides later reaches
// the room after the call. A read that fails fails the attempt.
func (a *Activities) JoinWaitingRoom(ctx context.Context, in JoinInput) (Joined, error) {
	if len(in.Rooms) == 0 {
		return Joined{}, temporal.NewNonRetryableApplicationError("a join names no waiting room", "Misconfigured", nil)
	}
	room, landed, err := a.joins.join(ctx, in, a.SignalWithStart)
	if err != nil {
		return Joined{}, err
	}
	// Sent after the registration landed: the calls of one batch share it.
	word, err := a.describeSession(ctx, in.Session, in.Key, landed)
	if err != nil {
		return Joined{}, err
	}
	return Joined{SessionWord: word, Room: &room}, nil
}

// Census counts the calls waiting in a session's rooms, with the groups
// that may decide them at a moment: who ends a session must be allowed to
// act on all of them.
type Census struct {
	Waiting int        `json:"waiting"`
	Groups  [][]string `json:"groups,omitempty"`
}

// CensusInput is the argument of TakeCensus: the rooms' workflow IDs and
// the query each answers with its Census.
type CensusInput struct {
	Rooms []string `json:"rooms"`
	Query string   `json:"query"`
}

// TakeCensus asks every waiting room of a session for its Census by a
// query, which the room's worker answers from the room's state (strongly
// consistent, unlike visibility). A room that does not run holds nobody.
func (a *Activities) TakeCensus(ctx context.Context, in CensusInput) (Census, error) {
	if a.Client == nil {
		return Census{}, temporal.NewNonRetryableApplicationError("worker has no Temporal client to ask the waiting rooms", "Misconfigured", nil)
	}
	var total Census
	now := time.Now()
	for _, id := range in.Rooms {
		resp, err := a.Client.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
			WorkflowID: id, QueryType: in.Query, Args: []any{now},
			QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
		})
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf), err == nil && resp.QueryRejected != nil:
			continue
		case err != nil:
			return Census{}, fmt.Errorf("ask waiting room %s: %w", id, err)
		}
		var c Census
		if err := resp.QueryResult.Get(&c); err != nil {
			return Census{}, fmt.Errorf("decode the census of %s: %w", id, err)
		}
		total.Waiting += c.Waiting
		total.Groups = append(total.Groups, c.Groups...)
	}
	return total, nil
}
