package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/policy"
)

// validateEnd refuses a malformed end, a second one, and one whose author
// may not act on every sticky decision the session holds (an admin's "*"
// always may): ending forgets them. The calls waiting are checked by end.
func (s *sessionRun) validateEnd(ctx workflow.Context, req EndRequest) error {
	if err := s.checkEnd(req); err != nil {
		return err
	}
	return checkNow(ctx, s.doors, "end", s.in.Session, req.Statement, policy.EndStatement(s.in.Session, req.approver())) //workflowcheck:ignore
}

func (s *sessionRun) checkEnd(req EndRequest) error {
	if err := policy.CheckIdentity("who ends the session (by)", req.By); err != nil {
		return temporal.NewApplicationError("end session: "+err.Error(), ErrTypeInvalidDecision)
	}
	if s.state.End != nil {
		return temporal.NewApplicationError("session "+s.in.Session+" has already ended", ErrTypeSessionEnded)
	}
	for _, d := range s.state.Sticky {
		if err := req.approver().MayAct(d.Groups); err != nil {
			return temporal.NewApplicationError(fmt.Sprintf("%s may not end session %s: sticky decision for %q: %v", req.By, s.in.Session, d.Key, err), ErrTypeNotAuthorized)
		}
	}
	return nil
}

// censusOptions bound the rooms' census: a query per room, answered by
// their worker.
var censusOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
}

// end ends the session, once the rooms' census shows no waiting call that
// the ender may not act on: every waiting call is denied (each checks the
// ender's groups again, so one that began to wait meanwhile is not denied
// by someone who may not act on it), a call that waits later is denied at
// once, and the sticky decisions are forgotten. It returns, once every
// room has the news, how many calls were waiting.
func (s *sessionRun) end(ctx workflow.Context, req EndRequest) (int, error) {
	var census activities.Census
	in := activities.CensusInput{Rooms: roomIDs(s.in.Session), Query: QueryCensus}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, censusOptions), a.TakeCensus, in).Get(ctx, &census); err != nil {
		return 0, temporal.NewApplicationError("end session "+s.in.Session+": could not ask its waiting rooms: "+err.Error(), ErrTypeUnavailable)
	}
	for _, groups := range census.Groups {
		if err := req.approver().MayAct(groups); err != nil {
			return 0, temporal.NewApplicationError(fmt.Sprintf("%s may not end session %s: a waiting call is asked of %v: %v", req.By, s.in.Session, groups, err), ErrTypeNotAuthorized)
		}
	}
	if s.state.End != nil { // another end came first
		return 0, temporal.NewApplicationError("session "+s.in.Session+" has already ended", ErrTypeSessionEnded)
	}
	s.state.End = &policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session was ended by " + req.By,
		DecidedBy: req.By, DeciderGroups: req.Groups, Identity: req.Identity, Channel: "session", DecidedAt: workflow.Now(ctx),
		Statement: req.Statement}
	s.state.Sticky = nil
	if err := s.log(ctx, s.endedEntry(*s.state.End, census.Waiting)); err != nil {
		return 0, err
	}
	awaitAll(ctx, s.publish(ctx))
	workflow.GetLogger(ctx).Info("Session ended", "session", s.in.Session, "by", req.By, "waiting", census.Waiting)
	return census.Waiting, nil
}

// sessionEndedDenial answers a call that would wait in a session that has
// ended.
var sessionEndedDenial = policy.Decision{Kind: policy.DeniedWithReason, Reason: "the session has ended", DecidedBy: "session", Channel: "session"}
