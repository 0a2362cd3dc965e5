package worker

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/toolgate/toolgate/workflows"
)

// EnsureSearchAttributes registers toolgate's search attributes in the
// namespace when they are missing. It needs operator rights; on a cluster
// where the worker has none, an administrator registers them once (the
// README lists them).
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	ops := c.OperatorService()
	have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range workflows.SearchAttributeTypes() {
		if _, ok := have.GetCustomAttributes()[name]; !ok {
			missing[name] = typ
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	if err != nil {
		return fmt.Errorf("register search attributes: %w", err)
	}
	return nil
}
