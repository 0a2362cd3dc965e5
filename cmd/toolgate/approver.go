package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/apiclient"
	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/workflows"
)

// approverAPI is what the approver verbs need. Package client provides it
// over Temporal, package apiclient over the HTTP API (--api), so approvers
// need no Temporal access.
type approverAPI interface {
	Pending(ctx context.Context, f tgclient.ListFilter, p tgclient.PageRequest) (tgclient.Page, error)
	Decide(ctx context.Context, callID string, d policy.Decision) (policy.Decision, error)
	Cancel(ctx context.Context, callID string, by policy.Approver) (policy.Decision, error)
	CancelOwn(ctx context.Context, callID, requester string) (policy.Decision, error)
	Session(ctx context.Context, session string) (workflows.SessionView, error)
	Revoke(ctx context.Context, session, key string, by policy.Approver) error
	EndSession(ctx context.Context, session string, by policy.Approver) (int, error)
	Status(ctx context.Context, callID string) (tgclient.Status, error)
}

// deciderFlags are --by and --groups: who decides over Temporal, and the
// approver groups they act for. Over --api the token says both.
type deciderFlags struct {
	by     string
	groups []string
}

func (f *deciderFlags) add(cmd *cobra.Command, verb, defaultBy string) {
	cmd.Flags().StringVar(&f.by, "by", defaultBy, "who "+verb+", recorded with the decision (over --api the token names you)")
	cmd.Flags().StringSliceVar(&f.groups, "groups", nil, `approver groups you act for over Temporal ("*": every group); a call asked of groups needs one of them (over --api the token's groups count)`)
}

func (f *deciderFlags) approver() policy.Approver {
	return policy.Approver{Name: f.by, Groups: f.groups}
}

var (
	_ approverAPI = (*tgclient.Client)(nil)
	_ approverAPI = (*apiclient.Client)(nil)
)

// apiFlags are --api and --token of the approver verbs.
type apiFlags struct{ url, token string }

func (f *apiFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "api", os.Getenv("TOOLGATE_API"), "use toolgate's HTTP API at this URL instead of Temporal (env TOOLGATE_API)")
	cmd.Flags().StringVar(&f.token, "token", os.Getenv("TOOLGATE_TOKEN"), "bearer token for --api (env TOOLGATE_TOKEN)")
}

// approver returns the API the approver verbs use.
func (a *app) approver() (approverAPI, func(), error) {
	if a.api.url == "" {
		return a.client()
	}
	if a.api.token == "" {
		return nil, nil, usageError("--api needs --token (or TOOLGATE_TOKEN)")
	}
	return apiclient.New(a.api.url, a.api.token), func() {}, nil
}

// withApprover wraps a command's body: it opens the approver API (Temporal
// or --api) for the body and closes it after.
func (a *app) withApprover(body func(cmd *cobra.Command, c approverAPI, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, closeFn, err := a.approver()
		if err != nil {
			return err
		}
		defer closeFn()
		return body(cmd, c, args)
	}
}
