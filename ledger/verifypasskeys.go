package ledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/statement"
)

// Passkey approvals in the ledger (package passkey): a passkey.registered
// entry records a person's credential (its ID and COSE public key, the
// relying party), a passkey.removed entry its removal, and a call.decided
// entry the assertion of the deciding person's passkey over the decision
// (Decision.Passkey; under four eyes each approval's, Approval.Passkey).
// PasskeyCheck checks each assertion offline, from the log alone: the
// challenge is rebuilt from what the log says of the call, and the
// signature checked with the public key its registration recorded.

// PasskeyReport says what a PasskeyCheck found.
type PasskeyReport struct {
	// Verified counts the passkey assertions (a decision's, each
	// four-eyes approval's) that verified over the decision the log
	// records.
	Verified int `json:"verified"`
	// ByDigest counts those of Verified whose arguments were sealed (no
	// key given opened them) or redacted before they were logged: the
	// digest the decision's door statement names stood in for them.
	ByDigest int `json:"by_digest,omitempty"`
	// Registered and Removed count the passkey.registered and
	// passkey.removed entries read.
	Registered int `json:"registered"`
	Removed    int `json:"removed,omitempty"`
	// Unchecked names the first MaxNamed assertions that what was given
	// cannot check (arguments sealed with no statement naming their
	// digest; in a part of the log, a registration or submission before
	// it); UncheckedCount counts them all.
	Unchecked      []string `json:"unchecked,omitempty"`
	UncheckedCount int      `json:"unchecked_count,omitempty"`
	// Failures name the first MaxNamed assertions that do not verify, and
	// approvals a passkey rule needed one for that carry none;
	// FailureCount counts them all.
	Failures     []string `json:"failures,omitempty"`
	FailureCount int      `json:"failure_count,omitempty"`
}

// PasskeyCheck checks the passkey assertions a log's decisions carry
// against the passkeys its entries registered. Feed it the entries in the
// order of their indices (Entry); Finish checks and reports. It needs no
// key: the registrations are in the log. Believe it only when the log
// verified.
type PasskeyCheck struct {
	sealer Sealer
	// scope is what the entries are: "" the whole log, or a receipt or a
	// part of a log, which lack what is outside them.
	scope string
	creds map[string]*registeredPasskey
	calls map[string]submittedCall
	uses  []passkeyUse
	rep   PasskeyReport
}

// NewPasskeyCheck starts a check; sealer, optional, opens sealed
// arguments, whose digest the assertions' challenges name.
func NewPasskeyCheck(sealer Sealer) *PasskeyCheck {
	return &PasskeyCheck{sealer: sealer, creds: map[string]*registeredPasskey{}, calls: map[string]submittedCall{}}
}

const (
	scopeReceipt = "receipt"
	scopePart    = "part"
)

// registeredPasskey is a passkey.registered entry, and its first removal.
type registeredPasskey struct {
	cred    passkey.Credential
	index   int64
	removed *passkeyRemoval
}

type passkeyRemoval struct {
	index int64
	at    time.Time
}

// submittedCall is what a call.submitted entry says that an assertion's
// challenge names.
type submittedCall struct {
	tool     string
	args     json.RawMessage
	readable bool // not sealed, not redacted
	rule     string
	needs    bool
}

// passkeyUse is one assertion of a call.decided entry, and the decision
// it must be over.
type passkeyUse struct {
	index    int64
	what     string
	cred     string
	a        *passkey.Assertion
	d        passkey.Decision
	at       time.Time
	byDigest bool
	problem  string // why it cannot be checked: failed when fail, else unchecked
	fail     bool
}

// Entry reads the entry at index, given its bytes as stored.
func (c *PasskeyCheck) Entry(index int64, data []byte) {
	e, err := Decode(data, c.sealer)
	if err != nil && e.Kind == "" {
		return // not an entry: the log's check names it
	}
	what := fmt.Sprintf("entry #%d (%s %s)", index, e.Kind, e.Event)
	switch e.Kind {
	case KindPasskeyRegistered:
		c.rep.Registered++
		c.registered(index, what, e)
	case KindPasskeyRemoved:
		c.rep.Removed++
		id, _ := passkeyDetails(e)["credential_id"].(string)
		if r := c.creds[id]; r != nil && r.removed == nil {
			r.removed = &passkeyRemoval{index: index, at: e.At}
		}
	case KindCallSubmitted:
		if e.CallID != "" {
			c.calls[e.CallID] = submittedCall{tool: e.Tool, args: e.Args, readable: e.Sealed == nil && !redacted(e.Args),
				rule: e.Rule, needs: e.PasskeyRule}
		}
	case KindCallDecided:
		if e.Decision != nil {
			c.decided(index, what, e)
		}
	}
}

// passkeyDetails is what a passkey entry's details say of the passkey.
func passkeyDetails(e Entry) map[string]any {
	m, _ := e.Details["passkey"].(map[string]any)
	return m
}

// registered reads a passkey.registered entry as the registry writes it
// (package passkey/registry): By the person, details.passkey its
// credential ID (base64url), COSE public key (base64) and RP ID.
func (c *PasskeyCheck) registered(index int64, what string, e Entry) {
	p := passkeyDetails(e)
	sid, _ := p["credential_id"].(string)
	key, _ := p["public_key"].(string)
	rpID, _ := p["rp_id"].(string)
	id, err1 := base64.RawURLEncoding.DecodeString(sid)
	pub, err2 := base64.StdEncoding.DecodeString(key)
	switch {
	case sid == "" || err1 != nil || err2 != nil || len(pub) == 0 || rpID == "" || e.By == "":
		c.fail(what, "it does not say the passkey it registers (details.passkey: credential_id, public_key, rp_id; by)")
		return
	case c.creds[sid] != nil:
		c.fail(what, fmt.Sprintf("it registers passkey %s again, registered by entry #%d (a credential is registered once)", sid, c.creds[sid].index))
		return
	}
	c.creds[sid] = &registeredPasskey{cred: passkey.Credential{ID: id, PublicKey: pub, Person: e.By, RPID: rpID}, index: index}
}

// decided collects the assertions of a call.decided entry, each with the
// decision the workflow checked it over: the call and its run, the tool
// and the digest of the arguments that run (the edited ones for an edit),
// the decision's kind and the person. Under four eyes each approval is an
// approval of the arguments as submitted (an edit counts as none); the
// last approver's assertion is the decision's too, and checked once.
func (c *PasskeyCheck) decided(index int64, what string, e Entry) {
	d := e.Decision
	sub, known := c.calls[e.CallID]
	if known && sub.needs && approves(d.Kind) {
		if missing := missingPasskeys(d); missing != "" {
			c.fail(what, fmt.Sprintf("call %s's rule %s needs the approver's passkey for every approval, and the approval by %s carries none", e.CallID, quoted(sub.rule), missing))
		}
	}
	type one struct {
		by, kind string
		at       time.Time
		a        *passkey.Assertion
	}
	var all []one
	for _, ap := range d.Approvals {
		if ap.Passkey != nil {
			all = append(all, one{ap.By, policy.Approved.String(), ap.At, ap.Passkey})
		}
	}
	if a := d.Passkey; a != nil && !slices.ContainsFunc(all, func(o one) bool { return o.by == d.DecidedBy && o.a.Digest() == a.Digest() }) {
		all = append(all, one{d.DecidedBy, d.Kind, decidedAt(e), a})
	}
	if len(all) == 0 {
		return
	}
	st, _ := statement.Parse(d.Statement) // unverified: it only names a digest the signature must then cover
	run, runErr := decisionRun(e, st)
	for _, o := range all {
		u := passkeyUse{index: index, cred: passkey.IDString(o.a.CredentialID), a: o.a, at: o.at,
			what: fmt.Sprintf("%s: call %s, %s by %s", what, e.CallID, o.kind, o.by),
			d:    passkey.Decision{Call: e.CallID, Run: run, Kind: o.kind, By: o.by, Expires: o.a.Expires}}
		if u.at.IsZero() {
			u.at = e.At
		}
		switch {
		case runErr != "":
			u.problem, u.fail = runErr, true
		case !known && c.scope == scopePart:
			u.problem = "its call.submitted entry is not in this part of the log"
		case !known:
			u.problem, u.fail = "no call.submitted entry of the call before it: the arguments it approved are unknown", true
		}
		if u.problem == "" {
			u.d.Tool = sub.tool
			u.d.Args, u.byDigest, u.problem = argsDigest(e, sub, o.kind, st)
		}
		c.uses = append(c.uses, u)
	}
}

// approves reports whether a decision kind lets the call run.
func approves(kind string) bool {
	k, err := policy.ParseDecisionKind(kind)
	return err == nil && k.Approves()
}

// missingPasskeys names the approver of d whose approval carries no
// passkey assertion ("" when none lacks one).
func missingPasskeys(d *Decision) string {
	if len(d.Approvals) == 0 {
		if d.Passkey == nil {
			return d.DecidedBy
		}
		return ""
	}
	for _, ap := range d.Approvals {
		if ap.Passkey == nil {
			return ap.By
		}
	}
	return ""
}

// decisionRun is the call's workflow run that the challenge names: the
// decision's Run, which the workflow records beside an assertion; for an
// entry written before it did, the run the entry's event ID names
// (<call>/<run>/call.decided, as the workflow names its events), else the
// one the decision's door statement names. problem says when none does.
func decisionRun(e Entry, st statement.Statement) (run, problem string) {
	if e.Decision.Run != "" {
		return e.Decision.Run, ""
	}
	if r, ok := strings.CutPrefix(e.Event, e.CallID+"/"); ok {
		if r, ok = strings.CutSuffix(r, "/"+KindCallDecided); ok && r != "" && !strings.Contains(r, "/") {
			return r, ""
		}
	}
	if st.Run != "" {
		return st.Run, ""
	}
	return "", "run unknown: the entry names no workflow run (decision.run), and the challenge covers it"
}

// argsDigest is the digest of the arguments an assertion approved: the
// edited ones for an edit, else those the call was submitted with. When
// the log holds them sealed (no key given) or redacted, the digest the
// decision's door statement names stands in (byDigest); without one,
// problem says why it cannot be checked.
func argsDigest(e Entry, sub submittedCall, kind string, st statement.Statement) (digest string, byDigest bool, problem string) {
	args, readable, said := sub.args, sub.readable, st.Args
	if kind == policy.ApprovedWithEdits.String() {
		args, readable, said = e.Decision.EditedArgs, e.Sealed == nil && !redacted(e.Decision.EditedArgs), st.Edited
	}
	switch {
	case readable:
		return statement.Digest(args), false, ""
	case said != "":
		return said, true, ""
	}
	return "", false, "its arguments are sealed (give the keyring that opens them) or redacted, and no door statement names their digest"
}

// Finish checks every assertion read, in the order they were made (a
// four-eyes approval is logged when its call is decided, after others
// made later), and reports, with an error naming every one that failed
// (the first MaxNamed of them).
func (c *PasskeyCheck) Finish() (PasskeyReport, error) {
	uses := slices.Clone(c.uses)
	slices.SortStableFunc(uses, func(a, b passkeyUse) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.index, b.index))
	})
	last := map[string]lastUse{}
	for _, u := range uses {
		count, err := c.verify(u, last)
		switch {
		case errors.Is(err, errUnchecked):
			c.unchecked(u.what, strings.TrimPrefix(err.Error(), errUnchecked.Error()+": "))
		case err != nil:
			c.fail(u.what, err.Error())
		default:
			c.rep.Verified++
			if u.byDigest {
				c.rep.ByDigest++
			}
			last[u.cred] = lastUse{count: count, what: u.what}
		}
	}
	c.uses = nil
	rep := c.rep
	switch n := rep.FailureCount; {
	case n == 0:
		return rep, nil
	case n == 1:
		return rep, errors.New(rep.Failures[0])
	default:
		msg := fmt.Sprintf("%d passkey approvals fail:\n  %s", n, strings.Join(rep.Failures, "\n  "))
		if n > len(rep.Failures) {
			msg += fmt.Sprintf("\n  … and %d more", n-len(rep.Failures))
		}
		return rep, errors.New(msg)
	}
}

// lastUse is a credential's last verified assertion: its sign counter,
// and where it is.
type lastUse struct {
	count uint32
	what  string
}

// errUnchecked marks what the entries given cannot check.
var errUnchecked = errors.New("not checked")

// verify checks one assertion against its credential's registration and
// the last verified assertion of each credential, and returns its sign
// counter.
func (c *PasskeyCheck) verify(u passkeyUse, last map[string]lastUse) (uint32, error) {
	if u.problem != "" {
		if u.fail {
			return 0, errors.New(u.problem)
		}
		return 0, fmt.Errorf("%w: %s", errUnchecked, u.problem)
	}
	r := c.creds[u.cred]
	switch {
	case r == nil && c.scope == scopePart:
		return 0, fmt.Errorf("%w: the registration of passkey %s is not in this part of the log", errUnchecked, u.cred)
	case r == nil && c.scope == scopeReceipt:
		return 0, fmt.Errorf("unknown passkey %s: the receipt carries no passkey.registered entry of it", u.cred)
	case r == nil:
		return 0, fmt.Errorf("unknown passkey %s: no passkey.registered entry registers it", u.cred)
	case r.index > u.index:
		return 0, fmt.Errorf("passkey %s was registered after this decision, by entry #%d", u.cred, r.index)
	case r.cred.Person != u.d.By:
		return 0, fmt.Errorf("passkey %s is %s's (registered by entry #%d), not %s's, who decided", u.cred, r.cred.Person, r.index, u.d.By)
	case r.removed != nil && !u.at.Before(r.removed.at):
		return 0, fmt.Errorf("passkey %s was removed by entry #%d at %s, before this approval at %s", u.cred, r.removed.index, stamp(r.removed.at), stamp(u.at))
	}
	// The counter is checked below, against the assertions before it in
	// time: Verify is given none.
	rp, problem := relyingPartyOf(r.cred, u.a)
	if problem != "" {
		return 0, fmt.Errorf("passkey %s (registered by entry #%d): %w: %s", u.cred, r.index, passkey.ErrInvalid, problem)
	}
	count, err := passkey.Verify(r.cred, u.a, u.d, rp, 0, u.at)
	if err != nil {
		return 0, fmt.Errorf("passkey %s (registered by entry #%d): %w", u.cred, r.index, err)
	}
	// Authenticators that keep no counter say 0 every time; one that
	// keeps it must move it forward (passkey.Verify's rule).
	if prev, ok := last[u.cred]; ok && (count != 0 || prev.count != 0) && count <= prev.count {
		return 0, fmt.Errorf("passkey %s: %w (%d after %d, of %s)", u.cred, passkey.ErrClone, count, prev.count, prev.what)
	}
	return count, nil
}

// relyingPartyOf is the relying party an assertion is held to offline:
// its registration's RP ID, and the origin its client data names when
// that origin is one toolgate takes ceremonies at for that RP ID; else
// problem says why not. The verifier does not know the server's public
// URL, but toolgate's RP ID is its host name (the public URL's; localhost
// in dev), and a browser runs a get ceremony only for an RP ID that is
// its page's host (or a registrable suffix of it, which toolgate does not
// use) in a secure context. So the origin must be https://<rp_id>[:port],
// or http://localhost[:port] when the RP ID is localhost. go-webauthn then
// compares the client data's origin with the one origin given: its check
// and this rule agree.
func relyingPartyOf(cred passkey.Credential, a *passkey.Assertion) (rp passkey.RelyingParty, problem string) {
	rp = passkey.RelyingParty{ID: cred.RPID}
	var cd struct {
		Origin string `json:"origin"`
	}
	if json.Unmarshal(a.ClientDataJSON, &cd) != nil {
		return rp, "" // go-webauthn names what is wrong with it
	}
	u, err := url.Parse(cd.Origin)
	switch {
	case err != nil || u.Hostname() != cred.RPID || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
	case u.Scheme == "https", u.Scheme == "http" && cred.RPID == "localhost":
		rp.Origins = []string{cd.Origin}
		return rp, ""
	}
	want := "https://" + cred.RPID + "[:port]"
	if cred.RPID == "localhost" {
		want = "http(s)://localhost[:port]"
	}
	return rp, fmt.Sprintf("the assertion was made at origin %s, not at %s, where toolgate takes passkeys for relying party %s", quoted(cd.Origin), want, cred.RPID)
}

func (c *PasskeyCheck) fail(what, why string) {
	c.rep.FailureCount++
	if len(c.rep.Failures) < MaxNamed {
		c.rep.Failures = append(c.rep.Failures, what+": "+why)
	}
}

func (c *PasskeyCheck) unchecked(what, why string) {
	c.rep.UncheckedCount++
	if len(c.rep.Unchecked) < MaxNamed {
		c.rep.Unchecked = append(c.rep.Unchecked, what+": "+why)
	}
}

// passkeys gives an entry to the passkey check, if there is one.
func (o VerifyOptions) passkeys(index int64, data []byte) {
	if o.Passkeys != nil {
		o.Passkeys.Entry(index, data)
	}
}

// passkeyEvent is the event ID the registry gives a passkey's
// registration (kind KindPasskeyRegistered) or removal.
func passkeyEvent(kind string, id []byte) string { return kind + "/" + passkey.IDString(id) }

// passkeyEntries are the passkey.registered and passkey.removed entries,
// below size, of the passkeys whose assertions the call.decided entries
// among entries carry: what a receipt needs to check them.
func (l *Ledger) passkeyEntries(ctx context.Context, entries []Stored, size int64) ([]Stored, error) {
	var events []any
	seen := map[string]bool{}
	add := func(a *passkey.Assertion) {
		if a == nil || seen[string(a.CredentialID)] {
			return
		}
		seen[string(a.CredentialID)] = true
		events = append(events, passkeyEvent(KindPasskeyRegistered, a.CredentialID), passkeyEvent(KindPasskeyRemoved, a.CredentialID))
	}
	for _, s := range entries {
		if !bytes.Contains(s.Entry, []byte(`"passkey":`)) {
			continue
		}
		e, err := Decode(s.Entry, nil)
		if err != nil || e.Kind != KindCallDecided || e.Decision == nil {
			continue
		}
		add(e.Decision.Passkey)
		for _, ap := range e.Decision.Approvals {
			add(ap.Passkey)
		}
	}
	if len(events) == 0 {
		return nil, nil
	}
	found, err := l.st.queryEntries(ctx, "SELECT idx, entry FROM ledger_entries WHERE event IN ("+placeholders(len(events))+") AND idx < ? ORDER BY idx",
		append(events, size)...)
	if err != nil {
		return nil, fmt.Errorf("ledger: the passkeys' entries: %w", err)
	}
	return found, nil
}

// checkReceiptPasskeys checks that a receipt's passkey entries are
// passkey.registered or passkey.removed entries, each once and none of
// the call's, and returns them.
func checkReceiptPasskeys(r Receipt, cp Checkpoint) ([]Stored, error) {
	taken := map[int64]bool{}
	for _, e := range r.Entries {
		taken[e.Index] = true
	}
	var out []Stored
	for _, e := range r.Passkeys {
		s, err := e.Carried.Stored()
		if err != nil {
			return nil, err
		}
		h, err := ReadHeader(s.Entry)
		if err != nil {
			return nil, fmt.Errorf("entry #%d: %v", e.Index, err)
		}
		switch {
		case h.Kind != KindPasskeyRegistered && h.Kind != KindPasskeyRemoved:
			return nil, fmt.Errorf("entry #%d, among the receipt's passkeys, is a %s entry", e.Index, h.Kind)
		case taken[e.Index]:
			return nil, fmt.Errorf("entry #%d is in the receipt twice", e.Index)
		}
		taken[e.Index] = true
		if err := checkInclusion(cp, e.Carried, s.Entry, e.Proof); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
