package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// A rule with `passkey: true` takes an approval only with the deciding
// person's passkey assertion over it: a WebAuthn signature of their own
// device over the call, its run, its tool, the arguments that will run,
// the decision and the person (package passkey). The workflow checks it
// against the passkey registered for that person, read by a local
// activity, never from the message: a door's word is not enough, since a
// compromised door could give it. Denials need no passkey; no sticky
// decision, coded handler or timeout approves such a call.

// needsPasskey reports whether d must carry the deciding person's passkey
// assertion: an approval of a call whose rule says passkey: true.
func (c *callRun) needsPasskey(d policy.Decision) bool {
	return c.state.Request != nil && c.state.Request.Passkey && d.Kind.Approves()
}

// passkeyMissing refuses, before anything reaches history, an approval a
// passkey rule needs an assertion for and that carries none.
func (c *callRun) passkeyMissing(d policy.Decision) error {
	if !c.needsPasskey(d) || d.Passkey != nil {
		return nil
	}
	return temporal.NewApplicationError(fmt.Sprintf(
		"call %s needs %s's passkey (rule %q): approve it on the call's page in the toolgate inbox, where the passkey signs the decision",
		c.state.Call.ID, d.DecidedBy, c.state.Request.Rule), ErrTypePasskeyRequired)
}

// passkeyOptions: the check reads the registry, whose failure to answer
// is retried a little; a refusal is final.
var passkeyOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3,
		NonRetryableErrorTypes: []string{activities.ErrTypePasskeyRefused}},
}

// verifyPasskey checks the passkey assertion of an approval that needs
// one against this call as the workflow knows it.
func (c *callRun) verifyPasskey(ctx workflow.Context, d policy.Decision) error {
	if !c.needsPasskey(d) {
		return nil
	}
	if err := c.passkeyMissing(d); err != nil {
		return err // a signal's decision reaches here unvalidated
	}
	args := c.state.Call.Args
	if d.Kind == policy.ApprovedWithEdits {
		args = d.EditedArgs
	}
	digest := statement.Digest(args) //workflowcheck:ignore canonical JSON: the same bytes every time
	in := activities.VerifyPasskeyInput{Assertion: d.Passkey, Decision: passkey.Decision{
		Call: c.state.Call.ID, Run: workflow.GetInfo(ctx).WorkflowExecution.RunID, Tool: c.state.Call.Tool,
		Args: digest, Kind: d.Kind.String(), By: d.DecidedBy, Expires: d.Passkey.Expires,
	}, At: workflow.Now(ctx)}
	c.checking = "passkey"
	defer func() { c.checking = "" }()
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, passkeyOptions), a.VerifyPasskey, in).Get(ctx, nil)
	if err == nil {
		return nil
	}
	msg := "passkey refused: the registry could not be read"
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == activities.ErrTypePasskeyRefused {
		msg = appErr.Message()
	}
	workflow.GetLogger(ctx).Warn("Refused an approval: its passkey does not hold", "callID", c.state.Call.ID, "by", d.DecidedBy, "error", msg)
	return temporal.NewApplicationError(msg+" (call "+c.state.Call.ID+")", ErrTypePasskeyRefused)
}
