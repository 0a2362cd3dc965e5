package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/toolgate/toolgate/worker"
)

func (a *app) namespaceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "namespace",
		Short: "Prepare a Temporal namespace for toolgate",
		Args:  exactArgs(),
	}
	cmd.AddCommand(a.namespaceSetupCommand())
	return cmd
}

func (a *app) namespaceSetupCommand() *cobra.Command {
	var (
		retention time.Duration
		wait      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Register the namespace (when absent) and toolgate's search attributes, and wait until calls can use them",
		Long: `Make a self-hosted Temporal cluster's namespace ready for toolgate, once,
with operator access to the frontend: register the namespace with
--retention when it does not exist (an existing one keeps its settings),
register toolgate's search attributes that are missing, then wait until the
frontend accepts queries on all of them. Safe to run again at any time.

--wait keeps retrying while the frontend is not reachable yet, e.g. right
after the cluster starts. On Temporal Cloud, create the namespace and the
search attributes in the Cloud UI or with tcld instead (docs/production.md).`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), wait)
			defer cancel()
			a.conn.keys.skip() // it registers names and types, no payloads
			tc, err := a.dialWithin(ctx)
			if err != nil {
				return err
			}
			defer tc.Close()
			created, added, err := worker.SetupNamespace(ctx, tc, a.conn.namespace, retention)
			if err != nil {
				return fmt.Errorf("namespace %s: %w", a.conn.namespace, err)
			}
			what := "exists"
			if created {
				what = fmt.Sprintf("registered (retention %s)", retention)
			}
			attrs := "toolgate's search attributes were registered already"
			if len(added) > 0 {
				attrs = "registered search attributes " + strings.Join(added, ", ")
			}
			fmt.Fprintf(a.stdout, "namespace %s %s; %s; ready for toolgate\n", a.conn.namespace, what, attrs)
			return nil
		},
	}
	a.conn.addFlags(cmd)
	cmd.Flags().DurationVar(&retention, "retention", 7*24*time.Hour, "how long finished calls (their audit trail) stay, for a namespace this registers")
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "how long to keep trying while the frontend is unreachable or not ready")
	return cmd
}

// dialWithin dials Temporal, retrying while the frontend refuses, until
// ctx ends.
func (a *app) dialWithin(ctx context.Context) (client.Client, error) {
	for {
		tc, err := a.conn.dial(a.logger, nil)
		var usage *exitError
		if err == nil || errors.As(err, &usage) {
			return tc, err // a bad flag does not get better with time
		}
		a.logger.Info("Temporal not reachable yet; retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}
