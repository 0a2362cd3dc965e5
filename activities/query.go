package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
)

// ErrTypeNoSuchWorkflow: QueryWorkflow found no workflow of that ID.
const ErrTypeNoSuchWorkflow = "NoSuchWorkflow"

// QueryInput names a workflow (its latest run) and one of its queries.
type QueryInput struct {
	WorkflowID string `json:"workflow_id"`
	Query      string `json:"query"`
}

// QueryWorkflow asks a workflow a query, running or closed (Temporal
// answers a closed one by replaying its history), and returns the answer
// as JSON, for workflow code to decode: the answer is recorded in the
// asking workflow's history, so a replay reads it again, never the other
// workflow. A workflow that does not exist is a non-retryable
// ErrTypeNoSuchWorkflow.
func (a *Activities) QueryWorkflow(ctx context.Context, in QueryInput) (json.RawMessage, error) {
	if a.Client == nil {
		return nil, temporal.NewNonRetryableApplicationError("no Temporal client to query with", "NoClient", nil)
	}
	v, err := a.Client.QueryWorkflow(ctx, in.WorkflowID, "", in.Query)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil, temporal.NewNonRetryableApplicationError("no workflow "+in.WorkflowID, ErrTypeNoSuchWorkflow, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("query %s of %s: %w", in.Query, in.WorkflowID, err)
	}
	var raw json.RawMessage
	if err := v.Get(&raw); err != nil {
		return nil, fmt.Errorf("decode query %s of %s: %w", in.Query, in.WorkflowID, err)
	}
	return raw, nil
}
