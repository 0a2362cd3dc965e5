package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// Door statements in the ledger (package statement): a person's decision
// (Decision.Statement), a submission, a revoke and a session's end
// (Entry.Statement) carry the statement of the door that authenticated
// whoever made them, signed by its door key. An entry stores a
// statement's bytes exactly as they were signed, in base64: the entry's
// canonical JSON sorts an object's keys, and the signature covers the
// bytes. StatementCheck holds each statement to the doors an auditor
// trusts and to what its entry says, offline.

// storedStatement is a statement as an entry stores it.
type storedStatement struct {
	// Bytes are the statement's bytes as the door signed them (base64).
	Bytes     []byte `json:"statement_bytes"`
	KeyID     string `json:"key_id"`
	Signature []byte `json:"sig"`
}

func storeStatement(sd *statement.Signed) *storedStatement {
	if sd == nil {
		return nil
	}
	return &storedStatement{Bytes: sd.Statement, KeyID: sd.KeyID, Signature: sd.Signature}
}

func (s *storedStatement) signed() *statement.Signed {
	if s == nil {
		return nil
	}
	return &statement.Signed{Statement: s.Bytes, KeyID: s.KeyID, Signature: s.Signature}
}

// MarshalJSON writes e with its statement's signed bytes in base64.
func (e Entry) MarshalJSON() ([]byte, error) {
	type entry Entry // its fields, without these methods
	return json.Marshal(struct {
		entry
		Statement *storedStatement `json:"statement,omitempty"`
	}{entry(e), storeStatement(e.Statement)})
}

// UnmarshalJSON reads an entry that MarshalJSON wrote.
func (e *Entry) UnmarshalJSON(b []byte) error {
	type entry Entry
	var v struct {
		entry
		Statement *storedStatement `json:"statement,omitempty"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Entry(v.entry)
	e.Statement = v.Statement.signed()
	return nil
}

// MarshalJSON writes d with its statement's signed bytes in base64.
func (d Decision) MarshalJSON() ([]byte, error) {
	type decision Decision
	return json.Marshal(struct {
		decision
		Statement *storedStatement `json:"statement,omitempty"`
	}{decision(d), storeStatement(d.Statement)})
}

// UnmarshalJSON reads a decision that MarshalJSON wrote.
func (d *Decision) UnmarshalJSON(b []byte) error {
	type decision Decision
	var v struct {
		decision
		Statement *storedStatement `json:"statement,omitempty"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*d = Decision(v.decision)
	d.Statement = v.Statement.signed()
	return nil
}

// ErrNoDoors: a statement was not checked, for want of the doors' keys.
var ErrNoDoors = errors.New("not checked: no doors' public keys given")

// Vouched is one statement an entry carries, as checked.
type Vouched struct {
	// Of is what it vouches for: "submission", "decision", "revoke",
	// "end" or, on an entry toolgate writes none on, "statement".
	Of string
	// KeyID is the key it says it was signed with.
	KeyID string
	// Statement is what it says: believe it only when Err is nil.
	Statement statement.Statement
	// Err says why it does not verify, or where it does not say what its
	// entry says; nil when it does both.
	Err error
}

// StatementReport says what a StatementCheck found.
type StatementReport struct {
	// Verified counts the statements that verified and say what their
	// entries say; Keys counts them by door key.
	Verified int        `json:"verified"`
	Keys     []KeyCount `json:"keys,omitempty"`
	// Unsigned counts the entries that record who asked or decided and
	// carry no statement: recorded before statements, or by toolgate
	// itself (its policy, a timeout, a handler, the session).
	Unsigned int `json:"unsigned"`
	// NoStatement names the first MaxNamed of them that record a person's
	// or an agent's word, which a door vouches for nowadays;
	// NoStatementCount counts them all.
	NoStatement      []string `json:"no_statement,omitempty"`
	NoStatementCount int      `json:"no_statement_count,omitempty"`
	// Sealed and Redacted count the arguments whose digests were not
	// compared with a statement's: sealed (no key opened them), or
	// redacted by the policy's secret patterns before they were logged.
	Sealed   int `json:"sealed,omitempty"`
	Redacted int `json:"redacted,omitempty"`
	// Failures name the first MaxNamed statements that do not verify or
	// do not say what their entries say; FailureCount counts them all.
	Failures     []string `json:"failures,omitempty"`
	FailureCount int      `json:"failure_count,omitempty"`
}

// KeyCount is how many statements one door key signed.
type KeyCount struct {
	Door  string `json:"door"`
	KeyID string `json:"key_id"`
	Count int    `json:"count"`
}

// MaxNamed bounds the entries a StatementReport names of each sort.
const MaxNamed = 20

// StatementCheck holds the statements in a log's entries to the doors an
// auditor trusts (their public keys, some revoked) and to what their
// entries say. Feed it the entries in the order of their indices (Entry);
// Finish reports.
type StatementCheck struct {
	doors  *statement.Doors
	sealer Sealer
	// args is each call's arguments' digest, from its call.submitted
	// entry, which its decision's statement must name.
	args map[string]string
	rep  StatementReport
}

// NewStatementCheck checks statements against doors (nil: it reads them
// but verifies none, ErrNoDoors); sealer, optional, opens sealed
// arguments so their digests are compared too.
func NewStatementCheck(doors *statement.Doors, sealer Sealer) *StatementCheck {
	return &StatementCheck{doors: doors, sealer: sealer, args: map[string]string{}}
}

// Entry checks the statements of the entry at index, given its bytes as
// stored, and returns them.
func (c *StatementCheck) Entry(index int64, data []byte) []Vouched {
	what := fmt.Sprintf("entry #%d", index)
	e, err := Decode(data, c.sealer)
	if err != nil && e.Kind == "" {
		c.fail(what, fmt.Errorf("does not read: %v", err))
		return nil
	}
	what += fmt.Sprintf(" (%s %s)", e.Kind, e.Event)
	var out []Vouched
	if e.Statement != nil {
		out = append(out, c.check(e, ofEntry(e.Kind), e.Statement))
	}
	if e.Decision != nil && e.Decision.Statement != nil {
		out = append(out, c.check(e, "decision", e.Decision.Statement))
	}
	if len(out) == 0 {
		if who, ok := unsigned(e); ok {
			c.rep.Unsigned++
			if who != "" {
				c.rep.NoStatementCount++
				if len(c.rep.NoStatement) < MaxNamed {
					c.rep.NoStatement = append(c.rep.NoStatement, what+": "+who)
				}
			}
		}
	}
	for _, v := range out {
		if errors.Is(v.Err, ErrNoDoors) {
			continue
		}
		if v.Err != nil {
			c.fail(what, v.Err)
			continue
		}
		c.rep.Verified++
		c.count(v.Statement.Door, v.KeyID)
	}
	if e.Kind == KindCallSubmitted && e.CallID != "" {
		c.noteArgs(e, out)
	}
	return out
}

// Finish reports, with an error naming every statement that failed (the
// first MaxNamed of them).
func (c *StatementCheck) Finish() (StatementReport, error) {
	rep := c.rep
	rep.Keys = slices.Clone(rep.Keys)
	slices.SortFunc(rep.Keys, func(a, b KeyCount) int { return strings.Compare(a.Door+a.KeyID, b.Door+b.KeyID) })
	switch n := rep.FailureCount; {
	case n == 0:
		return rep, nil
	case n == 1:
		return rep, errors.New(rep.Failures[0])
	default:
		msg := fmt.Sprintf("%d statements fail:\n  %s", n, strings.Join(rep.Failures, "\n  "))
		if n > len(rep.Failures) {
			msg += fmt.Sprintf("\n  … and %d more", n-len(rep.Failures))
		}
		return rep, errors.New(msg)
	}
}

func (c *StatementCheck) fail(what string, err error) {
	c.rep.FailureCount++
	if len(c.rep.Failures) < MaxNamed {
		c.rep.Failures = append(c.rep.Failures, what+": "+err.Error())
	}
}

func (c *StatementCheck) count(door, key string) {
	for i, k := range c.rep.Keys {
		if k.KeyID == key && k.Door == door {
			c.rep.Keys[i].Count++
			return
		}
	}
	c.rep.Keys = append(c.rep.Keys, KeyCount{Door: door, KeyID: key, Count: 1})
}

// noteArgs keeps the digest of a call's arguments that its decision's
// statement must name: its verified submission's, or its logged
// arguments'.
func (c *StatementCheck) noteArgs(e Entry, vouched []Vouched) {
	for _, v := range vouched {
		if v.Of == "submission" && v.Err == nil {
			c.args[e.CallID] = v.Statement.Args
			return
		}
	}
	if e.Sealed == nil && !redacted(e.Args) {
		c.args[e.CallID] = statement.Digest(e.Args)
	}
}

func ofEntry(kind string) string {
	switch kind {
	case KindCallSubmitted:
		return "submission"
	case KindSessionRevoked:
		return "revoke"
	case KindSessionEnded:
		return "end"
	}
	return "statement"
}

// unsigned reports whether e records who asked or decided, so that a door
// could have vouched for it, and who: "" when it was toolgate itself.
func unsigned(e Entry) (who string, ok bool) {
	person := func(name string) bool { return name != "" && !policy.IsReservedName(name) }
	switch e.Kind {
	case KindCallSubmitted:
		if person(e.Requester) {
			who = "requested by " + e.Requester
		}
		return who, true
	case KindCallDecided, KindSessionSticky:
		d := e.Decision
		if d == nil {
			return "", false
		}
		if person(d.DecidedBy) && !slices.Contains([]string{"policy", "timeout", "handler"}, d.Channel) {
			who = d.Kind + " by " + d.DecidedBy
			if d.Channel != "" {
				who += " via " + d.Channel
			}
		}
		return who, true
	case KindSessionRevoked, KindSessionEnded:
		if person(e.By) {
			who = strings.TrimPrefix(e.Kind, "session.") + " by " + e.By
		}
		return who, true
	}
	return "", false
}

// check verifies sd, a statement e carries as of, and holds it to e.
func (c *StatementCheck) check(e Entry, of string, sd *statement.Signed) Vouched {
	v := Vouched{Of: of, KeyID: sd.KeyID}
	v.Statement, _ = statement.Parse(sd)
	if c.doors == nil {
		v.Err = ErrNoDoors
		return v
	}
	st, err := c.doors.Verify(sd)
	if err != nil {
		v.Err = c.verifyError(sd, v.Statement, err)
		return v
	}
	v.Statement = st
	v.Err = c.says(e, of, st)
	return v
}

// verifyError says why a statement does not verify, naming its key and
// its door (the statement's word for it, when the key is unknown).
func (c *StatementCheck) verifyError(sd *statement.Signed, said statement.Statement, err error) error {
	door := said.Door
	for _, k := range c.doors.Keys() {
		if k.KeyID == sd.KeyID {
			door = k.Door
		}
	}
	switch {
	case errors.Is(err, statement.ErrBadSignature):
		return fmt.Errorf("statement altered: %w (key %s of door %s)", statement.ErrBadSignature, sd.KeyID, door)
	case errors.Is(err, statement.ErrUnknownKey):
		return fmt.Errorf("statement signed by key %s (door %q, as it says) that the verifier was not given", sd.KeyID, door)
	case errors.Is(err, statement.ErrRevokedKey):
		return fmt.Errorf("statement signed by revoked key %s of door %s", sd.KeyID, door)
	}
	return err
}

// says holds a verified statement to what its entry says, and names the
// first thing it says otherwise.
func (c *StatementCheck) says(e Entry, of string, st statement.Statement) error {
	d := e.Decision
	switch {
	case of == "submission":
		return c.saysSubmission(e, st)
	case of == "decision" && d.Channel == "cancel":
		if err := saysWho(e, st, statement.Cancel, d.DecidedBy, "decided_by", d.Groups, d.Identity); err != nil {
			return err
		}
		if err := c.onCall(e, st); err != nil {
			return err
		}
		return within(st, decidedAt(e), true)
	case of == "decision" && d.Channel == "session" && d.Sticky == "" && e.Kind == KindCallDecided:
		// A session's end, handed on to a call that was waiting: made
		// before, on the session.
		if err := saysWho(e, st, statement.End, d.DecidedBy, "decided_by", d.Groups, d.Identity); err != nil {
			return err
		}
		return within(st, decidedAt(e), false)
	case of == "decision":
		return c.saysDecision(e, st)
	case of == "revoke", of == "end":
		kind, ended := statement.Revoke, of == "end"
		if ended {
			kind = statement.End
		}
		groups, id := detailsWho(e.Details)
		if err := saysWho(e, st, kind, e.By, "by", groups, id); err != nil {
			return err
		}
		if key, _ := e.Details["key"].(string); !ended && st.Key != key {
			return differs("key", st.Key, "details.key", key)
		}
		return within(st, e.At, true)
	}
	return nil
}

func (c *StatementCheck) saysSubmission(e Entry, st statement.Statement) error {
	if st.Kind != statement.Submit {
		return kindDiffers(st, statement.Submit)
	}
	for _, f := range [][4]string{
		{"call", st.Call, "call_id", e.CallID},
		{"session", st.Session, "session", e.Session},
		{"tool", st.Tool, "tool", e.Tool},
		{"by", st.By, "requester", e.Requester},
		{"acting_user", st.ActingUser, "acting_user", e.ActingUser},
	} {
		if f[1] != f[3] {
			return differs(f[0], f[1], f[2], f[3])
		}
	}
	if got, ok := c.digest(e, e.Args); ok && got != st.Args {
		return fmt.Errorf("its statement says arguments %s but the entry's arguments digest to %s", quoted(st.Args), got)
	}
	return within(st, e.At, true)
}

// saysWho holds the statement of what someone did to the entry: its
// kind, who, for which groups, and the session.
func saysWho(e Entry, st statement.Statement, kind statement.Kind, by, byField string, groups []string, id *Identity) error {
	switch {
	case st.Kind != kind:
		return kindDiffers(st, kind)
	case st.By != by:
		return differs("by", st.By, byField, by)
	case !slices.Equal(st.Groups, groups):
		return differs("groups", strings.Join(st.Groups, ","), "groups", strings.Join(groups, ","))
	case !sameIdentity(st.Identity, id):
		return differs("identity", identityText(st.Identity), "identity", identityTextOf(id))
	case st.Session != e.Session:
		return differs("session", st.Session, "session", e.Session)
	}
	return nil
}

// onCall holds a statement made on the entry's call to it: the call, and
// the arguments of its call.submitted entry.
func (c *StatementCheck) onCall(e Entry, st statement.Statement) error {
	if st.Call != e.CallID {
		return differs("call", st.Call, "call_id", e.CallID)
	}
	if want, ok := c.args[e.CallID]; ok && st.Args != want {
		return fmt.Errorf("its statement says arguments %s but the call.submitted entry's arguments digest to %s", quoted(st.Args), want)
	}
	return nil
}

// saysDecision holds a decide statement to a decision: made on the
// entry's call, or, handed on by the session, on the call its sticky
// decision was taken on.
func (c *StatementCheck) saysDecision(e Entry, st statement.Statement) error {
	d := e.Decision
	if err := saysWho(e, st, statement.Decide, d.DecidedBy, "decided_by", d.Groups, d.Identity); err != nil {
		return err
	}
	switch {
	case st.Decision != d.Kind:
		return differs("decision", st.Decision, "decision", d.Kind)
	case st.User != d.User:
		return differs("user", strconv.FormatBool(st.User), "user", strconv.FormatBool(d.User))
	}
	if d.Channel == "session" && e.Kind == KindCallDecided {
		// Handed on: its channel and call are those it was taken on.
		from, ok := strings.CutPrefix(d.Sticky, "session/"+e.Session+"/sticky/")
		if ok && st.Call != from {
			return differs("call", st.Call, "sticky decision was taken on call", from)
		}
		return within(st, decidedAt(e), false)
	}
	if st.Channel != d.Channel {
		return differs("channel", st.Channel, "channel", d.Channel)
	}
	if key, ok := e.Details["key"].(string); ok && e.Kind == KindSessionSticky && st.Key != key {
		return differs("key", st.Key, "details.key", key)
	}
	if err := c.onCall(e, st); err != nil {
		return err
	}
	if len(d.EditedArgs) > 0 || st.Edited != "" {
		if got, ok := c.digest(e, d.EditedArgs); ok && got != st.Edited {
			return fmt.Errorf("its statement says edited arguments %s but the entry's edited_args digest to %s", quoted(st.Edited), got)
		}
	}
	return within(st, decidedAt(e), true)
}

func sameIdentity(s *statement.Identity, e *Identity) bool {
	if s == nil || e == nil {
		return s == nil && e == nil
	}
	return s.Issuer == e.Issuer && s.Subject == e.Subject
}

func identityText(id *statement.Identity) string {
	if id == nil {
		return ""
	}
	return id.Subject + " at " + id.Issuer
}

func identityTextOf(id *Identity) string {
	if id == nil {
		return ""
	}
	return id.Subject + " at " + id.Issuer
}

// detailsWho reads the groups and identity a revoke's or an end's entry
// keeps in its details.
func detailsWho(details map[string]any) ([]string, *Identity) {
	var groups []string
	if gs, ok := details["groups"].([]any); ok {
		for _, g := range gs {
			s, _ := g.(string)
			groups = append(groups, s)
		}
	}
	var id *Identity
	if m, ok := details["identity"].(map[string]any); ok {
		iss, _ := m["iss"].(string)
		sub, _ := m["sub"].(string)
		id = &Identity{Issuer: iss, Subject: sub}
	}
	return groups, id
}

func decidedAt(e Entry) time.Time {
	if e.Decision != nil && !e.Decision.At.IsZero() {
		return e.Decision.At
	}
	return e.At
}

// within holds the time the entry recorded to the statement's: not
// before it was issued and, when the statement was made for this message
// (direct), not after it expired; a workflow's clock may lag a door's by
// statement.Skew.
func within(st statement.Statement, at time.Time, direct bool) error {
	if at.IsZero() {
		return nil
	}
	switch {
	case st.Issued.After(at.Add(statement.Skew)):
		return fmt.Errorf("its statement says issued %s but the entry says recorded %s, before", stamp(st.Issued), stamp(at))
	case direct && at.After(st.Expires.Add(statement.Skew)):
		return fmt.Errorf("its statement says expires %s but the entry says recorded %s, after", stamp(st.Expires), stamp(at))
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// digest is the digest of arguments e holds, false (and counted) when
// they cannot be compared: sealed, or redacted before they were logged.
func (c *StatementCheck) digest(e Entry, args json.RawMessage) (string, bool) {
	switch {
	case e.Sealed != nil:
		c.rep.Sealed++
		return "", false
	case redacted(args):
		c.rep.Redacted++
		return "", false
	}
	return statement.Digest(args), true
}

// redacted reports whether the policy's secret redaction (package
// policy/rules, "[REDACTED:<name>]") changed args before they were
// logged: their digest is no longer the one a door signed.
func redacted(args json.RawMessage) bool {
	return bytes.Contains(args, []byte(`[REDACTED:`))
}

// kindDiffers says a statement is of another kind than its entry records.
func kindDiffers(st statement.Statement, want statement.Kind) error {
	return fmt.Errorf("its statement says kind %s but the entry says %s", quoted(string(st.Kind)), quoted(string(want)))
}

// differs says that a statement says one thing and its entry another.
func differs(field, said, entryField, recorded string) error {
	return fmt.Errorf("its statement says %s %s but the entry says %s %s", field, quoted(said), entryField, quoted(recorded))
}

func quoted(s string) string {
	if s == "" {
		return "(none)"
	}
	return strconv.Quote(s)
}
