package workflows

import "go.temporal.io/sdk/workflow"

// Changes to the workflows since the 1.0 baseline, each behind
// workflow.GetVersion so that the histories of runs that began before it
// replay (docs/production.md, "Changing the workflows after 1.0"). A
// change's ID is checked where its new behaviour begins, so a run in
// flight when its worker is upgraded takes the new path from there on.
const (
	// versionLeaveDelivered: a call waits until its waiting room has its
	// leave (done) before it ends. Before, a call denied or cancelled while
	// it waited ended in the task that sent the leave, and Temporal drops
	// a signal whose sender has closed: the room kept counting the call.
	versionLeaveDelivered = "leave-room-delivered"
	// versionEditRuleGoverns: the rule that edited arguments fall under
	// governs the edit whole: an edit into a rule that needs more than one
	// approval is refused, as four eyes counts no edit.
	versionEditRuleGoverns = "edit-rule-governs"
	// versionClaimChecksSession: a claim first reads the call's session;
	// an approval whose session has ended, or whose sticky decision was
	// revoked, is void: the claim is refused and the call ends denied.
	versionClaimChecksSession = "claim-checks-session"
	// versionReserved: a call into what toolgate keeps for its own calls
	// (policy.ReservedProblem) that the pins workflow did not start is
	// denied by the call itself. Before, it took the submission's word.
	versionReserved = "reserved-for-toolgate"
	// versionToolSeesPreview: a call hands its previews to the tool it
	// runs, so that write_file writes only the file its preview showed.
	// Before, the tool was scheduled with the bare call.
	versionToolSeesPreview = "tool-sees-preview"
	// versionLedger: calls, sessions and pins write their events to the
	// decision ledger (AppendLedger, a local activity) where they happen:
	// an approved call's tool waits for its call.decided entry, and a
	// call's Result for its call.finished entry.
	versionLedger = "ledger"
	// versionStatements: a decide signal, a sticky decision signalled to
	// the session and a decision a waiting room hands a call count only
	// with a valid statement from a toolgate door (statements.go), checked
	// once and recorded (a side effect). Update validators and the
	// submission's check (in the Evaluate activity) need no version: they
	// write nothing new to a history.
	versionStatements = "door-statements"
	// versionReportStatements: an agent's report counts only with a valid
	// statement from a toolgate door (SignalReport), checked once and
	// recorded; one without is not recorded and the call ends unknown.
	versionReportStatements = "report-statements"
	// versionBaseline: a call that begins with it takes every change
	// above as made, without a marker of its own for each (baselined):
	// the first of them it meets records this one marker instead. Each
	// marker also upserts a search attribute (TemporalChangeVersion), a
	// write the server makes at every step of a busy session's calls.
	// Such a call also leaves its waiting room from its tool's activity,
	// while the tool runs (activities.RunToolInput.LeaveRoom), instead
	// of with a signal whose acknowledgement woke the call for one more
	// workflow task between its decision and its result.
	//
	// A call evaluated by this release or a later one takes the baseline
	// from its evaluation's recorded result (activities.Evaluation's
	// AtBaseline), without the marker: no change is met before it is
	// evaluated but the reserved calls', which record the marker.
	versionBaseline = "baseline-wave5"
)

// Some changes since the baseline take their path from a field of the
// call's recorded evaluation (activities.Evaluation) instead of a marker,
// so they cost no search-attribute write: a result recorded by an earlier
// release lacks the field, and the call takes the old path on replay.
//   - LedgerOff: a worker without a ledger schedules no AppendLedger.
//   - BeforeCall: an auto-approved call's before-call checks ran in its
//     evaluation; no BeforeCall local activity.
//   - ChecksWithTool: the tool runs as RunToolChecked, which runs the
//     before-call checks (unless the evaluation did), the tool, the output
//     middleware and the after-call checks; no local activity around the
//     tool, and the raw output never reaches the history.
//
// Likewise from a field of another recorded result or input:
//   - activities.Joined.Room (the join's result): the room the worker
//     picked for the call, which the call's leave goes to; a join recorded
//     before says nothing, and the call waited in the room of its ID.
//   - RoomInput.Revision (a room's input), 1: the room keeps its timer
//     while its earliest deadline stays (rooms started before cancel and
//     start one at every message), and drains registrations before
//     leaves (before, a call that registered and left before the room's
//     next task was kept as waiting until its deadline).

// baselined are the changes a call that began at versionBaseline has, at
// the version each had then. A change made later gets its own marker.
var baselined = map[string]workflow.Version{
	versionLeaveDelivered:     1,
	versionEditRuleGoverns:    1,
	versionClaimChecksSession: 1,
	versionReserved:           1,
	versionToolSeesPreview:    1,
	versionLedger:             1,
	versionStatements:         1,
	versionReportStatements:   1,
}

// version is workflow.GetVersion(changeID, DefaultVersion, max) for the
// call workflow: a baselined change of a call that began at
// versionBaseline is known without a marker.
func (c *callRun) version(ctx workflow.Context, changeID string, max workflow.Version) workflow.Version {
	if v, ok := baselined[changeID]; ok && c.atBaseline(ctx) {
		return v
	}
	return workflow.GetVersion(ctx, changeID, workflow.DefaultVersion, max)
}

// atBaseline reports whether the call began at versionBaseline, asked the
// first time a baselined change is (so a run from before replays: it has
// no marker there, and meets its own markers after). Its evaluation says
// so when a worker of this release made it; a result recorded before
// says nothing, and the marker answers.
func (c *callRun) atBaseline(ctx workflow.Context) bool {
	if !c.baseline.checked {
		c.baseline.checked = true
		c.baseline.on = c.eval.AtBaseline || workflow.GetVersion(ctx, versionBaseline, workflow.DefaultVersion, 1) >= 1
	}
	return c.baseline.on
}
