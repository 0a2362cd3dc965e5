package ledger

import (
	"github.com/toolgate/toolgate/passkey"
	"github.com/toolgate/toolgate/statement"

	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/canonjson"
)

// Kinds of entries.
const (
	KindCallSubmitted  = "call.submitted"
	KindCallDecided    = "call.decided"
	KindCallFinished   = "call.finished"
	KindSessionSticky  = "session.sticky"
	KindSessionRevoked = "session.revoked"
	KindSessionEnded   = "session.ended"
	KindPinsApproved   = "pins.approved"
	KindPinsDenied     = "pins.denied"
	KindPolicyLoaded   = "policy.loaded"
	KindTokenCreated   = "token.created"
	// KindCodecDecoded: someone read payloads through the codec endpoint
	// (who, how many; never what).
	KindCodecDecoded = "codec.decoded"
	// KindCodecEncoded: an admin had payloads encrypted through the codec
	// endpoint (who, how many; never what): ciphertext the workers would
	// accept, made outside toolgate's own clients.
	KindCodecEncoded = "codec.encoded"
	// KindPasskeyRegistered: a person registered a passkey (Details
	// "passkey": its credential ID, COSE public key and label), vouched
	// for by the door's Statement; KindPasskeyRemoved: it was removed.
	// An assertion in a call.decided entry is checked against them.
	KindPasskeyRegistered = "passkey.registered"
	KindPasskeyRemoved    = "passkey.removed"
)

// Entry is one event in the log. Its bytes in the log are its canonical
// JSON (Canonical): what the leaf hash covers. Fields that do not apply
// are left out; Event is the event's ID, unique in the log, that makes an
// append idempotent.
type Entry struct {
	Kind  string    `json:"kind"`
	Event string    `json:"event"`
	At    time.Time `json:"at"`

	CallID  string `json:"call_id,omitempty"`
	Session string `json:"session,omitempty"`

	// call.submitted
	Requester     string          `json:"requester,omitempty"`
	ActingUser    string          `json:"acting_user,omitempty"`
	Tool          string          `json:"tool,omitempty"`
	Execution     string          `json:"execution,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	Rule          string          `json:"rule,omitempty"`
	PolicyVersion string          `json:"policy_version,omitempty"`
	// Preview is what the call would change, as shown (with computed_by).
	Preview any `json:"preview,omitempty"`
	// PasskeyRule: the call's rule needs the approver's passkey for every
	// approval, so its call.decided approval must carry an assertion.
	PasskeyRule bool `json:"passkey_rule,omitempty"`
	// Verdict is what the policy said: allow, ask or deny ("" when it
	// never judged the call: a refused submission, an unknown tool).
	// Entries written before it was recorded lack it (package callrecord infers it).
	Verdict string `json:"verdict,omitempty"`
	// Shadow is what a `mode: shadow` rule would have decided, recorded
	// and not enforced.
	Shadow *Shadow `json:"shadow,omitempty"`

	// call.decided, session.sticky, session.revoked, pins.*
	Decision *Decision `json:"decision,omitempty"`
	// Statement is the door's signed statement of the message this entry
	// records (a submission, a revoke, a session's end): who asked, as
	// the door that authenticated them says (package statement). A
	// decision's is in Decision.
	Statement *statement.Signed `json:"statement,omitempty"`

	// call.finished
	Status string          `json:"status,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Reason string          `json:"reason,omitempty"`
	// Claim and Report, for a call the agent ran: which run took the
	// approval, and whether it reported.
	Claim  any `json:"claim,omitempty"`
	Report any `json:"report,omitempty"`

	// session.ended: who ended it and what it held; session.revoked: who.
	By     string         `json:"by,omitempty"`
	Counts map[string]int `json:"counts,omitempty"`

	// policy.loaded: the loaded file(s); token.created: the token's name
	// and role (never the token).
	File string `json:"file,omitempty"`
	Name string `json:"name,omitempty"`
	Role string `json:"role,omitempty"`

	// Details holds what a kind carries beyond these fields.
	Details map[string]any `json:"details,omitempty"`
	// Sealed holds, encrypted, what may carry secrets (arguments, preview,
	// output, reason, report, edited arguments) when the ledger has a
	// Sealer: the leaf hash covers the ciphertext, so the log verifies
	// without the keys and reads with them.
	Sealed *Sealed `json:"sealed,omitempty"`
	// Backfilled: written by `toolgate audit backfill` from a call's
	// Temporal history, after the fact.
	Backfilled bool `json:"backfilled,omitempty"`
}

// Sealed is the encrypted part of an entry: the key's ID and the sealed
// JSON of its secrets.
type Sealed struct {
	Key  string `json:"key"`
	Data []byte `json:"data"`
}

// Sealer encrypts and decrypts the sealed part of entries (a
// keyring.Keyring).
type Sealer interface {
	Seal(purpose string, plaintext []byte) (keyID string, sealed []byte, err error)
	Open(purpose, keyID string, sealed []byte) ([]byte, error)
}

// sealPurpose binds a sealed part to the ledger: it cannot be passed off
// as a Temporal payload, nor one as it.
const sealPurpose = "ledger"

// secrets are the fields Seal encrypts: everything that may quote an
// argument or an output, or a person's words about them.
type secrets struct {
	Args       json.RawMessage `json:"args,omitempty"`
	Preview    any             `json:"preview,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Report     any             `json:"report,omitempty"`
	Note       any             `json:"note,omitempty"`
	EditedArgs json.RawMessage `json:"edited_args,omitempty"`
	// The decision's reason and comment.
	DecisionReason string `json:"decision_reason,omitempty"`
	Comment        string `json:"comment,omitempty"`
}

func (sec secrets) empty() bool {
	return len(sec.Args) == 0 && sec.Preview == nil && len(sec.Output) == 0 && sec.Reason == "" && sec.Report == nil &&
		sec.Note == nil && len(sec.EditedArgs) == 0 && sec.DecisionReason == "" && sec.Comment == ""
}

// Seal returns e with its secrets moved into Sealed, encrypted; an entry
// without any is returned as it is.
func (e Entry) Seal(s Sealer) (Entry, error) {
	sec := secrets{Args: e.Args, Preview: e.Preview, Output: e.Output, Reason: e.Reason, Report: e.Report, Note: e.Details["note"]}
	if d := e.Decision; d != nil {
		sec.EditedArgs, sec.DecisionReason, sec.Comment = d.EditedArgs, d.Reason, d.Comment
	}
	if sec.empty() {
		return e, nil
	}
	plain, err := json.Marshal(sec)
	if err != nil {
		return e, fmt.Errorf("ledger entry %s: seal: %w", e.Event, err)
	}
	key, data, err := s.Seal(sealPurpose, plain)
	if err != nil {
		return e, fmt.Errorf("ledger entry %s: seal: %w", e.Event, err)
	}
	e.Args, e.Preview, e.Output, e.Reason, e.Report = nil, nil, nil, "", nil
	if sec.Note != nil {
		e.Details = without(e.Details, "note")
	}
	if e.Decision != nil {
		d := *e.Decision
		d.EditedArgs, d.Reason, d.Comment = nil, "", ""
		e.Decision = &d
	}
	e.Sealed = &Sealed{Key: key, Data: data}
	return e, nil
}

// Open returns e with its sealed secrets decrypted back into their
// fields; an entry with nothing sealed is returned as it is.
func (e Entry) Open(s Sealer) (Entry, error) {
	if e.Sealed == nil {
		return e, nil
	}
	plain, err := s.Open(sealPurpose, e.Sealed.Key, e.Sealed.Data)
	if err != nil {
		return e, fmt.Errorf("ledger entry %s: %w", e.Event, err)
	}
	var sec secrets
	if err := json.Unmarshal(plain, &sec); err != nil {
		return e, fmt.Errorf("ledger entry %s: sealed part: %w", e.Event, err)
	}
	e.Args, e.Preview, e.Output, e.Reason, e.Report = sec.Args, sec.Preview, sec.Output, sec.Reason, sec.Report
	if sec.Note != nil {
		e.Details = with(e.Details, "note", sec.Note)
	}
	if e.Decision != nil {
		d := *e.Decision
		d.EditedArgs, d.Reason, d.Comment = sec.EditedArgs, sec.DecisionReason, sec.Comment
		e.Decision = &d
	}
	e.Sealed = nil
	return e, nil
}

// without returns a copy of m without key; nil when nothing is left.
func without(m map[string]any, key string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// with returns a copy of m with key set to v.
func with(m map[string]any, key string, v any) map[string]any {
	out := map[string]any{key: v}
	for k, x := range m {
		if k != key {
			out[k] = x
		}
	}
	return out
}

// Decode reads a stored entry, opening its sealed part with s when s is
// not nil (without s, or a key s lacks, Sealed stays set: the rest reads).
func Decode(raw []byte, s Sealer) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return e, fmt.Errorf("not a ledger entry: %w", err)
	}
	if s == nil {
		return e, nil
	}
	return e.Open(s)
}

// Decision is a decision as the log records it.
type Decision struct {
	Kind      string   `json:"kind"`
	DecidedBy string   `json:"decided_by"`
	Groups    []string `json:"groups,omitempty"`
	Channel   string   `json:"channel,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Comment   string   `json:"comment,omitempty"`
	// User: the acting user decided in the agent's own client.
	User       bool            `json:"user,omitempty"`
	EditedArgs json.RawMessage `json:"edited_args,omitempty"`
	At         time.Time       `json:"at,omitzero"`
	// Approvals are the approvals counted under four eyes, in order.
	Approvals []Approval `json:"approvals,omitempty"`
	// Sticky names the session.sticky entry (its event ID) of the sticky
	// decision that covered the call.
	Sticky string `json:"sticky,omitempty"`
	// Identity is who the person's identity provider says decided, for a
	// person signed in through OpenID Connect.
	Identity *Identity `json:"identity,omitempty"`
	// Statement is the signed statement of the door that authenticated
	// the person: what makes the decision theirs. A policy's, a timeout's
	// or a handler's decision has none.
	Statement *statement.Signed `json:"statement,omitempty"`
	// Passkey is the WebAuthn assertion of the person's own passkey over
	// the decision, for a rule that needs one (package passkey).
	Passkey *passkey.Assertion `json:"passkey,omitempty"`
	// Run is the call's workflow run, which a passkey's challenge names:
	// set when the decision or an approval carries a passkey assertion.
	Run string `json:"run,omitempty"`
}

// Shadow is a shadow rule's verdict on a call: what it would have done.
type Shadow struct {
	Rule   string `json:"rule"`
	Action string `json:"action"`
}

// Identity is a person as their OpenID provider names them.
type Identity struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
}

// Approval is one approval counted under four eyes.
type Approval struct {
	By       string    `json:"by"`
	Groups   []string  `json:"groups,omitempty"`
	Channel  string    `json:"channel,omitempty"`
	At       time.Time `json:"at,omitzero"`
	Identity *Identity `json:"identity,omitempty"`
	// Passkey is the approver's passkey assertion, for a rule that needs one.
	Passkey *passkey.Assertion `json:"passkey,omitempty"`
}

// Canonical returns e as canonical JSON: keys sorted, no insignificant
// space, times in UTC, HTML characters unescaped. Raw JSON fields (the
// arguments, the output) are made canonical too.
func (e Entry) Canonical() ([]byte, error) {
	if e.Kind == "" || e.Event == "" {
		return nil, fmt.Errorf("ledger entry: kind and event are required")
	}
	e.At = e.At.UTC()
	if e.Decision != nil {
		d := *e.Decision
		d.At = d.At.UTC()
		for i := range d.Approvals {
			d.Approvals[i].At = d.Approvals[i].At.UTC()
		}
		e.Decision = &d
	}
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("ledger entry %s: %w", e.Event, err)
	}
	canon, err := CanonicalJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("ledger entry %s: canonical JSON: %w", e.Event, err)
	}
	return canon, nil
}

// CanonicalJSON is canonjson.Canonical, the project's one canonical JSON,
// which entries are stored in (Canonical).
func CanonicalJSON(raw []byte) ([]byte, error) { return canonjson.Canonical(raw) }

// Stored is an entry as the log holds it: its index and its bytes. In
// JSON it is carried as receipts and exports carry entries (Carried).
type Stored struct {
	Index int64
	Entry json.RawMessage
}

// Header is what every entry carries, read from its bytes.
type Header struct {
	Kind    string    `json:"kind"`
	Event   string    `json:"event"`
	At      time.Time `json:"at"`
	CallID  string    `json:"call_id,omitempty"`
	Session string    `json:"session,omitempty"`
}

// ReadHeader reads the fields every entry carries.
func ReadHeader(entry []byte) (Header, error) {
	var h Header
	if err := json.Unmarshal(entry, &h); err != nil {
		return Header{}, fmt.Errorf("ledger entry: %w", err)
	}
	if h.Kind == "" || h.Event == "" {
		return Header{}, fmt.Errorf("ledger entry: no kind or event")
	}
	return h, nil
}
