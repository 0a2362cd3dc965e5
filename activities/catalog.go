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
// listed. toolgate's own definition_change, never an agent's to call, is
// not.
func (a *Activities) DescribeTools(_ context.Context) ([]tool.Descriptor, error) {
	denier, _ := a.Policy.(policy.OutrightDenier)
	out := []tool.Descriptor{}
	for _, d := range a.Tools.Describe() {
		switch {
		case d.Name == policy.DefinitionChangeTool: // toolgate's own, never an agent's
		case denier != nil && denier.DeniesOutright(policy.Call{Tool: d.Name, Annotations: d.Annotations}):
		default:
			out = append(out, d)
		}
	}
	return out, nil
}
