package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	tgclient "github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/workflows"
)

// EnsureSearchAttributes registers toolgate's search attributes in the
// namespace when they are missing. It needs operator rights; on a cluster
// where the worker has none, an administrator registers them once
// (`toolgate namespace setup`, docs/production.md).
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	missing, err := MissingSearchAttributes(ctx, c, namespace)
	if err != nil || len(missing) == 0 {
		return err
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	if err != nil {
		return fmt.Errorf("register search attributes %s: %w", strings.Join(slices.Sorted(maps.Keys(missing)), ", "), err)
	}
	return nil
}

// MissingSearchAttributes returns toolgate's search attributes that the
// namespace does not have, with their types. One registered with another
// type is an error: visibility cannot change a type in place.
func MissingSearchAttributes(ctx context.Context, c client.Client, namespace string) (map[string]enumspb.IndexedValueType, error) {
	have, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range workflows.SearchAttributeTypes() {
		got, ok := have.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case got != typ:
			return nil, fmt.Errorf("search attribute %s is registered as %v; toolgate needs %v", name, got, typ)
		}
	}
	return missing, nil
}

// ErrSearchAttributesNotUsable says the namespace cannot take toolgate's
// calls yet: its search attributes are missing, or registered but not yet
// known to the frontend that answered (a frontend refreshes its namespace
// cache every few seconds).
var ErrSearchAttributesNotUsable = errors.New("toolgate's search attributes are not usable in the namespace yet")

// SearchAttributesUsable checks that a call can be started in the
// namespace now: every toolgate search attribute is registered with its
// type, and the frontend maps each in a query (the check that fails with
// "no mapping defined for search attribute" right after registration). It
// costs one visibility request.
func SearchAttributesUsable(ctx context.Context, c client.Client, namespace string) error {
	missing, err := MissingSearchAttributes(ctx, c, namespace)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not registered (run `toolgate namespace setup`, or see docs/production.md)",
			ErrSearchAttributesNotUsable, strings.Join(slices.Sorted(maps.Keys(missing)), ", "))
	}
	types := workflows.SearchAttributeTypes()
	var terms []string
	for _, name := range slices.Sorted(maps.Keys(types)) {
		terms = append(terms, name+" = "+zeroLiteral[types[name]])
	}
	_, err = c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Namespace: namespace, Query: "WorkflowId = 'toolgate/readiness-probe' AND " + strings.Join(terms, " AND "),
	})
	if err != nil {
		if tgclient.IsSearchAttributeNotMapped(err) {
			return fmt.Errorf("%w: %v", ErrSearchAttributesNotUsable, err)
		}
		return fmt.Errorf("query with toolgate's search attributes: %w", err)
	}
	return nil
}

// zeroLiteral is a value of each search attribute type in a query.
var zeroLiteral = map[enumspb.IndexedValueType]string{
	enumspb.INDEXED_VALUE_TYPE_KEYWORD:      "''",
	enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST: "''",
	enumspb.INDEXED_VALUE_TYPE_INT:          "0",
	enumspb.INDEXED_VALUE_TYPE_DATETIME:     "'1970-01-01T00:00:00Z'",
}

// AwaitSearchAttributes retries SearchAttributesUsable until it passes or
// ctx ends, calling waiting (when not nil) with each failure.
func AwaitSearchAttributes(ctx context.Context, c client.Client, namespace string, waiting func(error)) error {
	const interval = time.Second
	for {
		err := SearchAttributesUsable(ctx, c, namespace)
		if err == nil {
			return nil
		}
		if waiting != nil {
			waiting(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// SetupNamespace makes the namespace ready for toolgate: it registers it
// with the given retention when it does not exist, registers the missing
// search attributes, and waits until calls can use them. An existing
// namespace keeps its settings.
func SetupNamespace(ctx context.Context, c client.Client, namespace string, retention time.Duration) (created bool, added []string, err error) {
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &notFound):
		_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: namespace, WorkflowExecutionRetentionPeriod: durationpb.New(retention),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err != nil && !errors.As(err, &exists) {
			return false, nil, fmt.Errorf("register namespace %s: %w", namespace, err)
		}
		created = err == nil
	case err != nil:
		return false, nil, fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	// A namespace registered a moment ago is unknown to the operator
	// service until the frontend's namespace cache refreshes.
	for {
		missing, err := MissingSearchAttributes(ctx, c, namespace)
		if err == nil {
			added = slices.Sorted(maps.Keys(missing))
			break
		}
		if !errors.As(err, &notFound) {
			return created, nil, err
		}
		select {
		case <-ctx.Done():
			return created, nil, fmt.Errorf("namespace %s registered but not yet known to the frontend: %w", namespace, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	if err := EnsureSearchAttributes(ctx, c, namespace); err != nil {
		return created, nil, err
	}
	return created, added, AwaitSearchAttributes(ctx, c, namespace, nil)
}
