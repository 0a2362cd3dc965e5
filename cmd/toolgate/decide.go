package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
)

func (a *app) approveCommand() *cobra.Command {
	var (
		decider             deciderFlags
		editedArgs, comment string
		forSession          bool
	)
	cmd := &cobra.Command{
		Use:   "approve CALL_ID --by NAME [--for-session] [--args EDITED_JSON]",
		Short: "Approve a waiting call",
		Long: `Approve a call that waits for a person. --for-session also approves every
later call of the same tool in the session (and the calls of that tool
waiting now). --args runs the call with arguments you fixed; the policy
checks them again. Exit status 0 when the decision was taken; 1 with the
reason when it was refused (unknown call, already decided, timed out).`,
		Args: exactArgs("CALL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := policy.Decision{Kind: policy.Approved, DecidedBy: decider.by, DeciderGroups: decider.groups, Channel: "cli", Comment: comment}
			switch {
			case forSession && editedArgs != "":
				return usageError("--for-session and --args cannot be combined: edited arguments approve one call")
			case forSession:
				d.Kind = policy.ApprovedForSession
			case editedArgs != "":
				if !json.Valid([]byte(editedArgs)) {
					return usageError("--args is not valid JSON")
				}
				d.Kind, d.EditedArgs = policy.ApprovedWithEdits, json.RawMessage(editedArgs)
			}
			return a.decide(cmd, args[0], d)
		},
	}
	decider.add(cmd, "approves (required unless --api)", "")
	cmd.Flags().BoolVar(&forSession, "for-session", false, "approve this tool for the rest of the session")
	cmd.Flags().StringVar(&editedArgs, "args", "", "run the call with these arguments instead (JSON object)")
	cmd.Flags().StringVar(&comment, "comment", "", "a note for the audit trail")
	a.conn.addFlags(cmd)
	a.api.add(cmd)
	return cmd
}

func (a *app) denyCommand() *cobra.Command {
	var (
		decider         deciderFlags
		reason, comment string
		always          bool
	)
	cmd := &cobra.Command{
		Use:   "deny CALL_ID --by NAME [--reason TEXT] [--always]",
		Short: "Deny a waiting call",
		Long: `Deny a call that waits for a person. --reason goes back to the model as the
call's result. --always also denies every later call of the same tool in
the session (and the calls of that tool waiting now).`,
		Args: exactArgs("CALL_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			d := policy.Decision{Kind: policy.Denied, DecidedBy: decider.by, DeciderGroups: decider.groups, Channel: "cli", Reason: reason, Comment: comment}
			switch {
			case always:
				d.Kind = policy.DeniedAlways
			case reason != "":
				d.Kind = policy.DeniedWithReason
			}
			return a.decide(cmd, args[0], d)
		},
	}
	decider.add(cmd, "denies (required unless --api)", "")
	cmd.Flags().StringVar(&reason, "reason", "", "why; the model reads it")
	cmd.Flags().BoolVar(&always, "always", false, "deny this tool for the rest of the session")
	cmd.Flags().StringVar(&comment, "comment", "", "a note for the audit trail")
	a.conn.addFlags(cmd)
	a.api.add(cmd)
	return cmd
}

func (a *app) cancelCommand() *cobra.Command {
	var canceller deciderFlags
	var own bool
	cmd := &cobra.Command{
		Use:   "cancel CALL_ID --by NAME [--own]",
		Short: "Cancel a call that waits for a person",
		Long: `Cancel a call that waits for a person: it ends at once, denied, with the
reason "cancelled by NAME", and its session forgets it. The agent that
requested the call may withdraw it (over --api: an agent token, its own calls;
over Temporal: --own with --by naming the agent); an approver whose groups
cover it may cancel it, or an admin. A name alone cancels nothing: an approver
named like the agent still needs the call's groups. Exit status 0 when it was
cancelled; 1 with the reason when it was refused (unknown call, already
decided, not waiting, not allowed).`,
		Args:    exactArgs("CALL_ID"),
		PreRunE: canceller.need(a, "cancels"),
		RunE: a.withApprover(func(cmd *cobra.Command, c approverAPI, args []string) error {
			cancel := c.Cancel
			if own {
				cancel = func(ctx context.Context, callID string, by policy.Approver) (policy.Decision, error) {
					return c.CancelOwn(ctx, callID, by.Name)
				}
			}
			applied, err := cancel(cmd.Context(), args[0], canceller.approver())
			if err := refusedDecision(err); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "call %s: %s\n", args[0], applied.Reason)
			return nil
		}),
	}
	canceller.add(cmd, "cancels (the requester, or an approver)", "")
	cmd.Flags().BoolVar(&own, "own", false, "withdraw the call as its requester, the agent --by names (over Temporal; over --api an agent token cancels as itself)")
	a.conn.addFlags(cmd)
	a.api.add(cmd)
	return cmd
}

// refusedDecision turns a refused decision or cancellation into exit
// status 1 with the reason.
func refusedDecision(err error) error {
	var refused *tgclient.RefusedError
	var decided *tgclient.AlreadyDecidedError
	switch {
	case errors.As(err, &decided), errors.As(err, &refused), errors.Is(err, tgclient.ErrUnknownCall):
		return &exitError{code: exitFailure, err: fmt.Errorf("refused: %w", err)}
	}
	return err
}

// need refuses, before anything is dialled, a verb without --by over
// Temporal, where nothing else names who acts (over --api the token
// does): a decision never records a name the person did not give.
func (f *deciderFlags) need(a *app, verb string) func(*cobra.Command, []string) error {
	return func(*cobra.Command, []string) error {
		if f.by == "" && a.api.url == "" {
			return usageError("--by must name who %s (with --api the token names you)", verb)
		}
		return nil
	}
}

func (a *app) decide(cmd *cobra.Command, callID string, d policy.Decision) error {
	if d.DecidedBy == "" && a.api.url == "" {
		return usageError("--by must name who decides (with --api the token names you)")
	}
	c, closeFn, err := a.approver()
	if err != nil {
		return err
	}
	defer closeFn()
	applied, err := c.Decide(cmd.Context(), callID, d)
	if err := refusedDecision(err); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "call %s: %s by %s\n", callID, applied.Kind, applied.DecidedBy)
	if applied.Kind.Approves() {
		// A four-eyes call counts the approval and may wait for more.
		if st, err := c.Status(cmd.Context(), callID); err == nil && st.State != nil && st.State.Approvals != nil && st.State.Decision == nil {
			ap := st.State.Approvals
			fmt.Fprintf(a.stdout, "%d of %d approvals: the call waits for another approver\n", len(ap.Given), ap.Needed)
		}
	}
	return nil
}
