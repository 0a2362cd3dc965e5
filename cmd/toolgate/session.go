package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/visible"
)

func (a *app) sessionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Show a session's sticky decisions, revoke one, or end the session",
	}
	var asJSON bool
	show := &cobra.Command{
		Use:   "show SESSION [--json]",
		Short: "Show sticky decisions and calls waiting in a session",
		Args:  exactArgs("SESSION"),
		RunE: a.withApprover(func(cmd *cobra.Command, c approverAPI, args []string) error {
			view, err := c.Session(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				writeJSON(a.stdout, view)
				return nil
			}
			fmt.Fprintf(a.stdout, "session %s\n", view.Session)
			if view.Owner != "" {
				fmt.Fprintf(a.stdout, "owner: %s\n", view.Owner)
			}
			if view.End != nil {
				fmt.Fprintf(a.stdout, "ended by %s\n", view.End.DecidedBy)
			}
			if len(view.Sticky) == 0 {
				fmt.Fprintln(a.stdout, "sticky decisions: none")
			}
			for _, s := range view.Sticky {
				fmt.Fprintf(a.stdout, "sticky: %s  %s by %s via %s (call %s)\n", visible.Line(s.Key), s.Decision.Kind, s.Decision.DecidedBy, s.Decision.Channel, s.FromCall)
			}
			for _, w := range view.Waiting {
				fmt.Fprintf(a.stdout, "waiting: %s  %s\n", w.CallID, w.Tool)
			}
			return nil
		}),
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	var revoker, ender deciderFlags
	revoke := &cobra.Command{
		Use:   "revoke SESSION TOOL --by NAME",
		Short: "Forget a sticky decision: the tool asks again",
		Long: `Forget a sticky decision: the next call of the tool asks again. Over
Temporal, --groups must cover the groups of the call the decision was taken
on ("*" for an admin); over --api the token's groups count.`,
		Args:    exactArgs("SESSION", "TOOL"),
		PreRunE: revoker.need(a, "revokes"),
		RunE: a.withApprover(func(cmd *cobra.Command, c approverAPI, args []string) error {
			if err := c.Revoke(cmd.Context(), args[0], args[1], revoker.approver()); err != nil {
				return sessionError(err)
			}
			fmt.Fprintf(a.stdout, "session %s: sticky decision for %s revoked\n", args[0], args[1])
			return nil
		}),
	}
	revoker.add(revoke, "revokes (required unless --api)", "")
	end := &cobra.Command{
		Use:   "end SESSION --by NAME",
		Short: "End a session: deny its waiting calls and forget its sticky decisions",
		Long: `End a session: deny its waiting calls and forget its sticky decisions. It
needs groups that cover every waiting call and every sticky decision of
the session ("*", or an admin token over --api).`,
		Args:    exactArgs("SESSION"),
		PreRunE: ender.need(a, "ends the session"),
		RunE: a.withApprover(func(cmd *cobra.Command, c approverAPI, args []string) error {
			denied, err := c.EndSession(cmd.Context(), args[0], ender.approver())
			if err != nil {
				return sessionError(err)
			}
			fmt.Fprintf(a.stdout, "session %s ended; %d waiting calls denied\n", args[0], denied)
			return nil
		}),
	}
	ender.add(end, "ends the session (required unless --api)", "")
	for _, sub := range []*cobra.Command{show, revoke, end} {
		a.conn.addFlags(sub)
		a.api.add(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}

func sessionError(err error) error {
	var refused *tgclient.RefusedError
	if errors.As(err, &refused) {
		return &exitError{code: exitFailure, err: fmt.Errorf("refused: %w", err)}
	}
	return err
}
