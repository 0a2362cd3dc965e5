package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/toolgate/toolgate/activities"
)

// WaitingRoom is where the calls of one session that wait for a person
// hear the session's decisions. A session has Rooms of them; a call waits
// in the room its worker's join picked (activities.Joined.Room), which it
// records; a join recorded before workers picked, in the room of its ID
// (RoomOf).
//
// Why rooms. A decision the session takes (approve or deny for the
// session, a revoke, its end) must reach every call it covers that waits
// now and every call that begins to wait later, whatever visibility does.
// A call joins a room (a signal, or signal-with-start when the room does
// not run, which carries the registrations of the worker's other calls of
// the session that join at once) and then reads the session's news from
// the session's memo (a describe, strongly consistent, shared by those
// calls too), in one local activity. The session
// writes each change of its news to its memo and then signals it to each
// room. So whatever the session decided before the room had the call, the
// call reads itself; whatever it decides after reaches the room after the
// call's registration, and the room, which takes one message at a time,
// hands it to the call. Neither side can miss the other, and nothing here
// reads visibility.
//
// Why several. One workflow takes a bounded rate of messages and 10,000
// signals per run; spreading the calls over Rooms rooms spreads both, and
// keeps the session itself out of the path of parking: the session
// receives nothing when a call parks.
//
// Trade-offs. A waiting call costs its room a share of one registration
// signal (a busy session's calls join in batches, at most one per 250 ms
// from each worker, so a call parks up to that much later) and a
// done signal of its own; the room sends it nothing unless the session
// decides something for it. The room keeps its timer while its earliest
// deadline stays (RoomInput.Revision). A session change costs Rooms
// signals, sent whether or not a room runs (a room that does not run holds
// no call). Answers are worked out when they are sent, from the room's
// state at that moment: a revoke or replacement stops a release before the
// next batch, so at most one batch (maxBatch calls) per room still gets a
// decision after the revoke returned.
//
// Numbers for 10,000 calls waiting in one session, against a stock
// server's limits:
//   - per room 1,250 calls: at most 2,500 signals in, fewer when
//     registrations share them (limit 10,000 per run; continue-as-new
//     after maxMessagesPerRun), at most about 3,000 history events (limit
//     50,000); a shared registration signal carries at most 200 calls,
//     about 60 KB (limit 2 MiB);
//   - a release goes out 250 answers per SendSignals activity (32 in
//     parallel, from a client), so no room has more than maxInlineSignals
//     signals of its own pending (limit 2,000);
//   - a waiting call is about 60 bytes of state; 1,250 are 75 KB across
//     continue-as-new (limit 2 MiB);
//   - no updates (limit 10 in flight); the end asks each room one query.
func WaitingRoom(ctx workflow.Context, in RoomInput) error {
	r := newRoomRun(in)
	if err := workflow.SetQueryHandler(ctx, QueryCensus, r.census); err != nil {
		return err
	}
	return r.run(ctx)
}

// Rooms is how many waiting rooms a session has.
const Rooms = 8

const (
	// maxBatch bounds the answers one batch sends (and so what a revoke
	// can no longer stop).
	maxBatch = 250
	// maxInlineSignals: a batch of up to this many answers is sent by the
	// workflow itself; larger ones by SendSignals.
	maxInlineSignals = 8
	// maxMessagesPerRun continues a room or session as new well before
	// Temporal's 10,000 signals per run.
	maxMessagesPerRun = 4000
	// pruneGrace leaves a call that reaches its deadline the time to say it
	// is done before it is dropped.
	pruneGrace = time.Minute
	// roomIdleTimeout ends a room that holds nobody; the next call starts
	// it again.
	roomIdleTimeout = time.Hour
)

// RoomWorkflowID is the workflow ID of a session's waiting room.
func RoomWorkflowID(session string, room int) string {
	return fmt.Sprintf("%s/room/%d", SessionWorkflowID(session), room)
}

// roomIDs are the workflow IDs of all of a session's rooms.
func roomIDs(session string) []string {
	ids := make([]string, Rooms)
	for i := range ids {
		ids[i] = RoomWorkflowID(session, i)
	}
	return ids
}

// roomStarts are a session's rooms as a join names them: any of them may
// take the call.
func roomStarts(session string) []activities.RoomStart {
	rooms := make([]activities.RoomStart, Rooms)
	for i := range rooms {
		rooms[i] = activities.RoomStart{WorkflowID: RoomWorkflowID(session, i), StartInput: RoomInput{Session: session, Room: i, Revision: RoomRevision}}
	}
	return rooms
}

// RoomOf is the room a call waited in when its join was recorded without
// one (before a worker's calls shared their rooms' signals).
func RoomOf(callID string) int { return activities.RoomIndex(callID, Rooms) }

// RoomInput starts (or continues) a WaitingRoom.
type RoomInput struct {
	Session string    `json:"session"`
	Room    int       `json:"room"`
	State   RoomState `json:"state"`
	// IdleTimeout ends a room that holds nobody for that long; zero means
	// roomIdleTimeout.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// ContinueAsNewAfter forces continue-as-new after that many messages
	// (tests).
	ContinueAsNewAfter int `json:"continue_as_new_after,omitempty"`
	// Revision says what the room does that rooms recorded before it did
	// not (its input is in its history, so a room started before replays
	// as it ran; continue-as-new keeps it):
	//   - 1 (roomKeepsTimer): it keeps its timer while the deadline it
	//     waits for stays, instead of cancelling it and starting another
	//     at every message (two events and a timer task each); and it
	//     takes the registrations that arrived with leaves first, so a
	//     call that registered and left before the room's next task is
	//     not kept as waiting until its deadline.
	Revision int `json:"revision,omitempty"`
}

// The revisions of a room (RoomInput.Revision); RoomRevision is the one
// this release starts rooms at.
const (
	roomKeepsTimer = 1
	RoomRevision   = roomKeepsTimer
)

// RoomState is what a room remembers, carried across continue-as-new.
type RoomState struct {
	// News is the session's latest news; nil until a fresh run heard it.
	News *activities.SessionNews `json:"news,omitempty"`
	// Calls wait for a person; what they share is in Profiles.
	Calls    []WaitingCall `json:"calls,omitempty"`
	Profiles []CallProfile `json:"profiles,omitempty"`
	// Owed are the calls owed a decision, oldest first; the decision is
	// worked out when it is sent.
	Owed []string `json:"owed,omitempty"`
}

// WaitingCall is one call waiting for a person: about 60 bytes of JSON.
type WaitingCall struct {
	CallID string `json:"c"`
	// Profile indexes RoomState.Profiles.
	Profile int `json:"p"`
	// RequestedAt is when the call was requested, in Unix milliseconds,
	// rounded up (so escalation is never seen early).
	RequestedAt int64 `json:"t"`
}

// CallProfile is what many waiting calls have in common.
type CallProfile struct {
	Tool          string        `json:"tool"`
	Key           string        `json:"key"`
	Requester     string        `json:"requester,omitempty"`
	User          string        `json:"user,omitempty"`
	Groups        []string      `json:"groups,omitempty"`
	EscalateTo    []string      `json:"escalate_to,omitempty"`
	EscalateAfter time.Duration `json:"escalate_after,omitempty"`
	Timeout       time.Duration `json:"timeout,omitempty"`
}

type roomRun struct {
	in    RoomInput
	state RoomState
	// index maps a waiting call's ID to its place in state.Calls; a
	// forgotten call leaves an empty CallID until the next reindex. owed
	// mirrors state.Owed. Maps are only looked up, never ranged over.
	index map[string]int
	owed  map[string]bool
	// received counts this run's messages, for continue-as-new.
	received int
	// pruneAt is the earliest deadline of a waiting call.
	pruneAt time.Time
	// timer fires at timerAt; stopTimer cancels it (roomKeepsTimer).
	timer     workflow.Future
	timerAt   time.Time
	stopTimer workflow.CancelFunc
}

func newRoomRun(in RoomInput) *roomRun {
	r := &roomRun{in: in, state: in.State}
	r.reindex()
	return r
}

// reindex drops forgotten calls and rebuilds the maps.
func (r *roomRun) reindex() {
	r.state.Calls = slices.DeleteFunc(r.state.Calls, func(w WaitingCall) bool { return w.CallID == "" })
	r.index = make(map[string]int, len(r.state.Calls))
	for i, w := range r.state.Calls {
		r.index[w.CallID] = i
	}
	r.owed = make(map[string]bool, len(r.state.Owed))
	for _, id := range r.state.Owed {
		r.owed[id] = true
	}
}

// roomInbox is a room's signal channels.
type roomInbox struct {
	news, register, registerAll, done workflow.ReceiveChannel
}

func (in roomInbox) pending() bool {
	return in.news.Len() > 0 || in.register.Len() > 0 || in.registerAll.Len() > 0 || in.done.Len() > 0
}

func (r *roomRun) run(ctx workflow.Context) error {
	box := roomInbox{
		news:        workflow.GetSignalChannel(ctx, SignalNews),
		register:    workflow.GetSignalChannel(ctx, SignalRegister),
		registerAll: workflow.GetSignalChannel(ctx, SignalRegisterAll),
		done:        workflow.GetSignalChannel(ctx, SignalDone),
	}
	if r.state.News == nil {
		r.state.News = &activities.SessionNews{} // what came before, each call read itself
	}
	r.pruneAt = r.nextPrune(ctx)
	for {
		gotWork, err := r.awaitWork(ctx, box)
		if err != nil {
			return err
		}
		r.prune(ctx)
		if !gotWork && len(r.index) == 0 && len(r.state.Owed) == 0 && !box.pending() {
			return nil // idle: the next call starts the room again
		}
		r.drain(ctx, box)
		r.flush(ctx, box)
		if r.continueAsNewNow(ctx) {
			r.drain(ctx, box)
			r.reindex()
			next := r.in
			next.State = r.state
			return workflow.NewContinueAsNewError(ctx, RoomWorkflowType, next)
		}
	}
}

// awaitWork waits for a message, an answer to send or the next deadline of
// a waiting call; with nobody waiting, for at most roomIdleTimeout. It
// reports whether there is work.
func (r *roomRun) awaitWork(ctx workflow.Context, box roomInbox) (bool, error) {
	hasWork := func() bool { return box.pending() || len(r.state.Owed) > 0 }
	if hasWork() {
		return true, nil
	}
	wait := r.in.IdleTimeout
	if wait <= 0 {
		wait = roomIdleTimeout
	}
	if len(r.index) > 0 {
		wait = max(r.pruneAt.Sub(workflow.Now(ctx)), time.Second)
	}
	if r.in.Revision < roomKeepsTimer {
		return awaitWithTimeout(ctx, wait, hasWork)
	}
	// The earliest deadline rarely moves while calls come and go: the
	// timer set for it stays.
	if at := workflow.Now(ctx).Add(wait); r.timer == nil || r.timer.IsReady() || !at.Equal(r.timerAt) {
		if r.stopTimer != nil {
			r.stopTimer()
		}
		tctx, cancel := workflow.WithCancel(ctx)
		r.timer, r.timerAt, r.stopTimer = workflow.NewTimer(tctx, wait), at, cancel
	}
	if err := workflow.Await(ctx, func() bool { return hasWork() || r.timer.IsReady() }); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil && !hasWork() {
		return false, err
	}
	return hasWork(), nil
}

// drain takes every message already delivered: the news, then the
// registrations, then the leaves (a room recorded before its revision took
// leaves first).
func (r *roomRun) drain(ctx workflow.Context, box roomInbox) {
	r.drainNews(ctx, box)
	if r.in.Revision < roomKeepsTimer {
		r.drainLeaves(box)
	}
	r.drainRegistrations(box)
	if r.in.Revision >= roomKeepsTimer {
		r.drainLeaves(box)
	}
}

func (r *roomRun) drainLeaves(box roomInbox) {
	for {
		var callID string
		if !box.done.ReceiveAsync(&callID) {
			return
		}
		r.received++
		r.forget(callID)
	}
}

func (r *roomRun) drainRegistrations(box roomInbox) {
	for {
		var reg Registration
		if !box.register.ReceiveAsync(&reg) {
			break
		}
		r.received++
		r.register(reg)
	}
	for {
		var regs []Registration
		if !box.registerAll.ReceiveAsync(&regs) {
			break
		}
		r.received++
		for _, reg := range regs {
			r.register(reg)
		}
	}
}

func (r *roomRun) drainNews(ctx workflow.Context, box roomInbox) {
	for {
		var news activities.SessionNews
		if !box.news.ReceiveAsync(&news) {
			return
		}
		r.received++
		r.takeNews(news)
	}
}

// takeNews keeps the newest news and owes an answer to every waiting call
// it changes: all of them at the end, those of a new or replaced sticky
// decision's key otherwise. A revoked decision is simply gone: answers
// not yet sent are worked out without it.
func (r *roomRun) takeNews(news activities.SessionNews) {
	old := r.state.News
	if old != nil && news.Revision <= old.Revision {
		return // an older copy, overtaken
	}
	r.state.News = &news
	ended := news.End != nil && (old == nil || old.End == nil)
	for _, w := range r.state.Calls {
		if w.CallID == "" {
			continue
		}
		key := r.state.Profiles[w.Profile].Key
		if now := news.StickyFor(key); ended || (now != nil && (old.StickyFor(key) == nil || old.StickyFor(key).Since != now.Since)) {
			r.owe(w.CallID)
		}
	}
}

// register takes a call that waits for a person. The news it came with
// was in the call's own read, but a registration and a news that came in
// the same batch are drained news first: a call the room's news covers is
// owed it all the same (a call takes a repeated decision as one).
func (r *roomRun) register(reg Registration) {
	if _, known := r.index[reg.CallID]; known {
		return // a retried registration
	}
	w := WaitingCall{CallID: reg.CallID, Profile: r.profileOf(reg), RequestedAt: unixMilliUp(reg.RequestedAt)}
	r.index[reg.CallID] = len(r.state.Calls)
	r.state.Calls = append(r.state.Calls, w)
	if d := r.deadlineOf(w); d.Before(r.pruneAt) {
		r.pruneAt = d
	}
	if news := r.state.News; news.End != nil || news.StickyFor(reg.StickyKey) != nil {
		r.owe(reg.CallID)
	}
}

func (r *roomRun) owe(callID string) {
	if !r.owed[callID] {
		r.owed[callID] = true
		r.state.Owed = append(r.state.Owed, callID)
	}
}

// profileOf returns the index of reg's profile, adding it when new.
func (r *roomRun) profileOf(reg Registration) int {
	p := CallProfile{Tool: reg.Tool, Key: reg.StickyKey, Requester: reg.Requester, User: reg.User, Groups: reg.Groups,
		EscalateTo: reg.EscalateTo, EscalateAfter: reg.EscalateAfter, Timeout: reg.Timeout}
	if i := slices.IndexFunc(r.state.Profiles, func(q CallProfile) bool { return sameProfile(p, q) }); i >= 0 {
		return i
	}
	r.state.Profiles = append(r.state.Profiles, p)
	return len(r.state.Profiles) - 1
}

func sameProfile(a, b CallProfile) bool {
	return a.Tool == b.Tool && a.Key == b.Key && a.Requester == b.Requester && a.User == b.User && slices.Equal(a.Groups, b.Groups) &&
		slices.Equal(a.EscalateTo, b.EscalateTo) && a.EscalateAfter == b.EscalateAfter && a.Timeout == b.Timeout
}

// forget drops a call; the slot is reclaimed at the next reindex.
func (r *roomRun) forget(callID string) {
	if i, ok := r.index[callID]; ok {
		r.state.Calls[i].CallID = ""
		delete(r.index, callID)
	}
}

// prune forgets the calls past their deadline (and a grace period): they
// ended without saying so, e.g. terminated.
func (r *roomRun) prune(ctx workflow.Context) {
	now := workflow.Now(ctx)
	if now.Before(r.pruneAt) {
		return
	}
	for _, w := range r.state.Calls {
		if w.CallID != "" && !now.Before(r.deadlineOf(w)) {
			r.forget(w.CallID)
		}
	}
	r.pruneAt = r.nextPrune(ctx)
}

// deadlineOf is when w is dropped if it never says it is done.
func (r *roomRun) deadlineOf(w WaitingCall) time.Time {
	return time.UnixMilli(w.RequestedAt).Add(r.state.Profiles[w.Profile].Timeout + pruneGrace)
}

// nextPrune is the earliest deadline of a waiting call.
func (r *roomRun) nextPrune(ctx workflow.Context) time.Time {
	next := workflow.Now(ctx).Add(roomIdleTimeout)
	for _, w := range r.state.Calls {
		if w.CallID != "" {
			if d := r.deadlineOf(w); d.Before(next) {
				next = d
			}
		}
	}
	return next
}

// census answers QueryCensus: how many calls wait, and the groups that may
// decide them at the given moment, each set once.
func (r *roomRun) census(at time.Time) (activities.Census, error) {
	c := activities.Census{Waiting: len(r.index)}
	seen := map[string]bool{}
	for _, w := range r.state.Calls {
		if w.CallID == "" {
			continue
		}
		groups := r.groupsAt(w, at)
		if k := strings.Join(groups, "\x00"); !seen[k] {
			seen[k] = true
			c.Groups = append(c.Groups, groups)
		}
	}
	return c, nil
}

func (r *roomRun) continueAsNewNow(ctx workflow.Context) bool {
	if r.in.ContinueAsNewAfter > 0 && r.received >= r.in.ContinueAsNewAfter {
		return true
	}
	return r.received >= maxMessagesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// unixMilliUp is t in Unix milliseconds, rounded up.
func unixMilliUp(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.Sub(time.UnixMilli(ms)) > 0 {
		ms++
	}
	return ms
}
