package activities

import (
	"context"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/tool"
)

// DescribeTools lists the registered tools an agent may ask for: every
// tool's descriptor, sorted by name, minus the tools the policy denies
// whatever their arguments (when it implements policy.OutrightDenier). A
// tool the policy would ask about, or allows only for some arguments, is
// listed.
func (a *Activities) DescribeTools(_ context.Context) ([]tool.Descriptor, error) {
	all := a.Tools.Describe()
	denier, ok := a.Policy.(policy.OutrightDenier)
	if !ok {
		return all, nil
	}
	out := make([]tool.Descriptor, 0, len(all))
	for _, d := range all {
		if denier.DeniesOutright(policy.Call{Tool: d.Name, Annotations: d.Annotations}) {
			continue
		}
		out = append(out, d)
	}
	return out, nil
}
