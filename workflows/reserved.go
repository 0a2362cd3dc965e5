package workflows

import (
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/policy"
)

// reservedDenial is the denial of a call that touches a reserved session,
// call-ID prefix, requester name or toolgate's definition_change tool
// without being toolgate's own: ""
// when the call is toolgate's own or touches nothing reserved. Toolgate's
// own calls are started by the pins workflow of their server as its
// children; the parent is recorded by Temporal when the call starts, so no
// name a submission carries can pass for it.
func (c *callRun) reservedDenial(ctx workflow.Context) string {
	call := c.state.Call
	problem := policy.ReservedProblem(call)
	if problem == "" {
		return ""
	}
	if c.version(ctx, versionReserved, 1) == workflow.DefaultVersion {
		return ""
	}
	if startedByPins(ctx, call) {
		return ""
	}
	return problem + "; toolgate refuses such a call it did not start itself"
}

// startedByPins reports whether the call is a definition_change call the
// pins workflow of its server started: its session, ID and requester are
// those the pins workflow gives, and Temporal names that workflow as the
// call's parent.
func startedByPins(ctx workflow.Context, call policy.Call) bool {
	parent := workflow.GetInfo(ctx).ParentWorkflowExecution
	server, ok := strings.CutPrefix(call.Session, policy.DefinitionChangeSession(""))
	return ok && server != "" && parent != nil && parent.ID == PinsWorkflowID(server) &&
		call.Tool == policy.DefinitionChangeTool && call.Requester == policy.ToolgateRequester &&
		strings.HasPrefix(call.ID, policy.DefinitionChangeCallID(server, "", 1))
}
