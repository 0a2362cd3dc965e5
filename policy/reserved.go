package policy

import (
	"fmt"
	"slices"
	"strings"
)

// ReservedNames are the names toolgate writes itself as who decided or
// requested a call (Decision.DecidedBy, Call.Requester): its own calls
// (ToolgateRequester), the session, the policy, the timeout, a Go approval
// handler and a cancellation. No token, agent or person may carry one, as
// any role or as an agent's owner, so a record naming one of them was
// written by toolgate.
var ReservedNames = []string{ToolgateRequester, "session", "policy", "timeout", "handler", "cancel"}

// IsReservedName reports whether name is one of ReservedNames (compared
// without regard to case, so "Toolgate" cannot pass for toolgate in a
// listing either).
func IsReservedName(name string) bool {
	return slices.ContainsFunc(ReservedNames, func(r string) bool { return strings.EqualFold(r, name) })
}

// ReservedSessionPrefix starts the sessions toolgate opens for its own
// calls (DefinitionChangeSession); an agent cannot submit into one.
const ReservedSessionPrefix = "toolgate."

// ReservedCallIDPrefix starts the IDs of toolgate's own calls
// (DefinitionChangeCallID); an agent cannot take one.
const ReservedCallIDPrefix = "definition-change."

// IsReservedSession reports whether session is one toolgate keeps for its
// own calls.
func IsReservedSession(session string) bool {
	return strings.HasPrefix(strings.ToLower(session), ReservedSessionPrefix)
}

// IsReservedCallID reports whether id is one toolgate keeps for its own
// calls.
func IsReservedCallID(id string) bool {
	return strings.HasPrefix(strings.ToLower(id), ReservedCallIDPrefix)
}

// DefinitionChangeSession is the session of the definition_change calls
// about an upstream MCP server's tools.
func DefinitionChangeSession(server string) string { return ReservedSessionPrefix + "pins." + server }

// DefinitionChangeCallID names the nth definition_change call about a
// server's definition (by its hex hash): every worker that meets the same
// change joins one call, and a question that ended without a person's
// decision is asked again under the next number.
func DefinitionChangeCallID(server, hash string, n int) string {
	if len(hash) > 40 {
		hash = hash[:40]
	}
	id := ReservedCallIDPrefix + server + "." + hash
	if n > 1 {
		id += fmt.Sprintf(".%d", n)
	}
	return id
}

// ReservedProblem says why a call an agent submits touches what toolgate
// keeps for itself (a reserved session, call-ID prefix, requester name or
// toolgate's definition_change tool); "" when it does not.
func ReservedProblem(call Call) string {
	switch {
	case IsReservedSession(call.Session):
		return fmt.Sprintf("session %q is reserved: sessions starting with %q are toolgate's own", call.Session, ReservedSessionPrefix)
	case IsReservedCallID(call.ID):
		return fmt.Sprintf("call ID %q is reserved: call IDs starting with %q are toolgate's own", call.ID, ReservedCallIDPrefix)
	case IsReservedName(call.Requester):
		return fmt.Sprintf("requester %q is reserved: the name is toolgate's own", call.Requester)
	case call.Tool == DefinitionChangeTool:
		return "definition_change calls are made by toolgate itself, when an upstream MCP server changes a tool"
	}
	return ""
}
