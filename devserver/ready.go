package devserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

// pollInterval paces the readiness and visibility checks: short, because
// the server is local and usually ready within a few hundred milliseconds.
const pollInterval = 50 * time.Millisecond

// dialWhenReady retries until a client can dial the frontend and describe
// the namespace: the services start asynchronously, so the gRPC port may
// refuse or answer Unavailable for a moment after Server.Start returns.
func dialWhenReady(ctx context.Context, opts client.Options) (client.Client, error) {
	var lastErr error
	for {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			_, err = c.WorkflowService().DescribeNamespace(ctx,
				&workflowservice.DescribeNamespaceRequest{Namespace: opts.Namespace})
			if err == nil {
				return c, nil
			}
			c.Close()
		}
		lastErr = err
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return nil, fmt.Errorf("devserver: frontend %s not ready: %w (last error: %v)", opts.HostPort, err, lastErr)
		}
	}
}

// ensureNamespace registers the namespace through the frontend unless it
// exists, retrying until the frontend answers. (SQLite namespaces are
// written into the file before start instead.)
func ensureNamespace(ctx context.Context, opts client.Options, namespace string) error {
	var lastErr error
	for {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
				Namespace:                        namespace,
				WorkflowExecutionRetentionPeriod: durationpb.New(7 * 24 * time.Hour),
			})
			c.Close()
			var exists *serviceerror.NamespaceAlreadyExists
			if err == nil || errors.As(err, &exists) {
				return nil
			}
		}
		lastErr = err
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return fmt.Errorf("devserver: register namespace %s: %w (last error: %v)", namespace, err, lastErr)
		}
	}
}

// ensureSearchAttributes adds the custom search attributes that are not yet
// registered in the namespace, waits until all are listed, and reports
// whether it added any. An attribute registered with another type is an
// error: SQLite visibility cannot change a type in place.
func ensureSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) (bool, error) {
	missing, err := missingSearchAttributes(ctx, c, namespace, want)
	if err != nil || len(missing) == 0 {
		return false, err
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        namespace,
		SearchAttributes: missing,
	})
	if err != nil {
		return false, fmt.Errorf("devserver: add search attributes %v: %w", slices.Sorted(maps.Keys(missing)), err)
	}
	for len(missing) > 0 {
		if err := sleepCtx(ctx, pollInterval); err != nil {
			return false, fmt.Errorf("devserver: search attributes %v not visible: %w", slices.Sorted(maps.Keys(missing)), err)
		}
		if missing, err = missingSearchAttributes(ctx, c, namespace, want); err != nil {
			return false, err
		}
	}
	return true, nil
}

// missingSearchAttributes returns the subset of want not registered in the
// namespace.
func missingSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) (map[string]enumspb.IndexedValueType, error) {
	if len(want) == 0 {
		return nil, nil
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx,
		&operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("devserver: list search attributes: %w", err)
	}
	have := resp.GetCustomAttributes()
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range want {
		got, ok := have[name]
		switch {
		case !ok:
			missing[name] = typ
		case got != typ:
			return nil, fmt.Errorf("devserver: search attribute %q is registered as %v, want %v", name, got, typ)
		}
	}
	return missing, nil
}

// sleepCtx waits for d or until ctx is done, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
