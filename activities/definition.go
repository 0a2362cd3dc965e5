package activities

import (
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/policy"
)

// definitionChangeProblem refuses a definition_change call that toolgate
// did not make itself: an agent must not ask to have a tool pinned.
func definitionChangeProblem(call policy.Call) string {
	if call.Tool != policy.DefinitionChangeTool || call.Requester == policy.ToolgateRequester {
		return ""
	}
	return "definition_change calls are made by toolgate itself, when an upstream MCP server changes a tool"
}

// definitionChangeAsk is how a definition_change call asks, whatever the
// policy said short of a denial: a person always decides. The policy's
// request, if any, gives the groups (default policy.DefinitionChangeGroups),
// timeout, reminders and escalation; the message says what changed, and
// a sticky decision covers only this very definition.
func definitionChangeAsk(call policy.Call, req *policy.ApprovalRequest) *policy.ApprovalRequest {
	ask := policy.ApprovalRequest{Rule: "definition_change"}
	if req != nil {
		ask = *req
	}
	if len(ask.Groups) == 0 {
		ask.Groups = policy.DefinitionChangeGroups
	}
	var change policy.DefinitionChange
	_ = json.Unmarshal(call.Args, &change) // the tool's schema checked the arguments
	if change.Change == "new" {
		ask.Message = fmt.Sprintf("MCP server %q offers a new tool %q. Approve to offer it to agents.", change.Server, change.Tool)
	} else {
		ask.Message = fmt.Sprintf("MCP server %q changed the definition of its tool %q (see the diff). Approve to offer the new definition to agents; until then the tool is not offered.", change.Server, change.Tool)
	}
	ask.StickyKey = policy.DefinitionChangeTool + ":" + change.Server + ":" + change.Tool + ":" + change.Hash
	return &ask
}
