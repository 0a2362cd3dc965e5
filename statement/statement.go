// Package statement is where a message to toolgate's workflows gets its
// authority: a statement, signed by the toolgate front door ("door") that
// authenticated its author, of exactly what the message does (its kind,
// the call and run, the session, a digest of the arguments it decides on),
// who made it (name, the groups they act for, their identity from a
// verified token), through which channel, when, and until when it holds.
//
// Doors (serve and dev's HTTP API, inbox, Slack, email, hooks; the CLI and
// MCP gateway when they dial Temporal themselves) hold a door key and
// sign; workers hold only the doors' public keys and verify, inside the
// workflow. A field of a message counts only when its statement says the
// same. Ed25519, keys with IDs, so a verifier needs nothing secret.
//
// Encryption hides payloads; it authenticates nothing. This is what does.
package statement

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/canonjson"
)

// Kind is what a statement lets its message do.
type Kind string

const (
	// Submit starts a call, as its requester.
	Submit Kind = "submit"
	// Decide decides a waiting call (an edit names the edited arguments).
	Decide Kind = "decide"
	// Cancel cancels a waiting call.
	Cancel Kind = "cancel"
	// Claim takes an agent-executed call's approval for one run.
	Claim Kind = "claim"
	// Revoke removes a session's sticky decision.
	Revoke Kind = "revoke"
	// End ends a session.
	End Kind = "end"
	// Report says how the agent's own run of an approved call went.
	Report Kind = "report"
	// RegisterPasskey: a person registers a passkey; RemovePasskey: they
	// remove one (Key: its credential ID, base64url). The ledger keeps it
	// with the registration, so an assertion is checked against a key the
	// door that authenticated the person vouched for.
	RegisterPasskey Kind = "register_passkey"
	RemovePasskey   Kind = "remove_passkey"
)

// Lifetime is how long a statement holds after it is made: long enough
// for the message to reach its workflow, short enough that a copy is of
// little use. Sticky decisions and a session's end are handed on by the
// workflows with their statements after it; they check who and where, not
// when.
const Lifetime = 10 * time.Minute

// Skew is how far ahead of a workflow's clock a door's may run.
const Skew = time.Minute

// Identity is the person as their identity provider names them, in a
// verified token: issuer and subject.
type Identity struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
}

// Statement is what a door says a message does, and who asked for it.
// Empty fields are absent from its bytes.
type Statement struct {
	Kind Kind `json:"kind"`
	// Door names the door that made it; the signer sets it.
	Door string `json:"door"`
	// Call is the call's ID; Run its workflow run, when the door knew it.
	Call string `json:"call,omitempty"`
	Run  string `json:"run,omitempty"`
	// Session is the call's session, or the session a revoke or end
	// changes.
	Session string `json:"session,omitempty"`
	// Tool is the call's tool.
	Tool string `json:"tool,omitempty"`
	// Args is the Digest of the call's arguments; Edited of the edited
	// arguments an edit runs instead.
	Args   string `json:"args,omitempty"`
	Edited string `json:"edited,omitempty"`
	// Outcome is the Digest of what a report says came of the run.
	Outcome string `json:"outcome,omitempty"`
	// Decision is a decide statement's decision kind (approved, ...).
	Decision string `json:"decision,omitempty"`
	// Passkey is the Digest of the passkey assertion (package passkey) a
	// decision carries: the device's signature the door passes on.
	Passkey string `json:"passkey,omitempty"`
	// Key is a sticky decision's key (decide, revoke), or the run a claim
	// takes the approval for.
	Key string `json:"key,omitempty"`
	// By, Groups, Identity: who, the approver groups they act for, and
	// their identity from a verified token.
	By       string    `json:"by"`
	Groups   []string  `json:"groups,omitempty"`
	Identity *Identity `json:"identity,omitempty"`
	// ActingUser is a submitted call's acting user (the person running the
	// agent), whom its rule may let decide.
	ActingUser string `json:"acting_user,omitempty"`
	// Channel is where it came from (api, inbox, slack, cli, ...).
	Channel string `json:"channel,omitempty"`
	// User: the call's acting user decided in the agent's own client.
	// AsRequester: the call's requester withdraws its own call.
	User        bool `json:"user,omitempty"`
	AsRequester bool `json:"as_requester,omitempty"`
	// Issued and Expires bound when it holds.
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
}

// Signed is a statement as a door signed it: its bytes, the signing key's
// ID, and the Ed25519 signature over the bytes.
type Signed struct {
	Statement json.RawMessage `json:"statement"`
	KeyID     string          `json:"key_id"`
	Signature []byte          `json:"sig"`
}

// Digest names JSON arguments by the SHA-256 of their canonical encoding,
// so two encodings of the same arguments have one digest.
func Digest(args json.RawMessage) string {
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	canon, err := canonjson.Canonical(args)
	if err != nil {
		canon = args // not JSON: its bytes, which match only themselves
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyIDOf is a public key's ID: the first 16 hex digits of its SHA-256.
func KeyIDOf(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Signer is a door's private key.
type Signer struct {
	door string
	id   string
	key  ed25519.PrivateKey
	now  func() time.Time
}

// NewSigner signs as door with key.
func NewSigner(door string, key ed25519.PrivateKey) *Signer {
	return &Signer{door: door, id: KeyIDOf(key.Public().(ed25519.PublicKey)), key: key, now: time.Now}
}

// WithClock returns the signer, reading the time from now (tests, and a
// door whose clock is not the machine's).
func (s *Signer) WithClock(now func() time.Time) *Signer {
	n := *s
	n.now = now
	return &n
}

// Door is the door's name.
func (s *Signer) Door() string { return s.door }

// KeyID is the signing key's ID.
func (s *Signer) KeyID() string { return s.id }

// Public is the door's public key, as a verifier trusts it.
func (s *Signer) Public() DoorKey {
	return DoorKey{Door: s.door, KeyID: s.id, PublicKey: s.key.Public().(ed25519.PublicKey)}
}

// Sign signs st as the door, now, for Lifetime.
func (s *Signer) Sign(st Statement) (*Signed, error) {
	now := s.now().UTC()
	st.Door, st.Issued, st.Expires = s.door, now, now.Add(Lifetime)
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	return &Signed{Statement: b, KeyID: s.id, Signature: ed25519.Sign(s.key, b)}, nil
}

// Errors of Verify. A refusal names the key ID, never a key.
var (
	ErrMissing      = errors.New("no statement: only a toolgate door (its API, inbox, Slack, email, hooks, or a CLI holding a door key) can send this")
	ErrUnknownKey   = errors.New("signed by a door key this worker does not trust")
	ErrRevokedKey   = errors.New("signed by a revoked door key")
	ErrBadSignature = errors.New("its signature does not verify")
)

// Verify checks a signed statement against the doors and returns what it
// says. It checks the signature only; Check holds it to a message.
func (d *Doors) Verify(sd *Signed) (Statement, error) {
	if sd == nil {
		return Statement{}, ErrMissing
	}
	k, ok := d.key(sd.KeyID)
	switch {
	case !ok:
		return Statement{}, fmt.Errorf("statement key %q: %w", sd.KeyID, ErrUnknownKey)
	case k.Revoked:
		return Statement{}, fmt.Errorf("statement key %q of door %s: %w", sd.KeyID, k.Door, ErrRevokedKey)
	case !ed25519.Verify(k.PublicKey, sd.Statement, sd.Signature):
		return Statement{}, fmt.Errorf("statement key %q of door %s: %w", sd.KeyID, k.Door, ErrBadSignature)
	}
	var st Statement
	dec := json.NewDecoder(bytes.NewReader(sd.Statement))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return Statement{}, fmt.Errorf("statement of door %s does not parse: %w", k.Door, err)
	}
	if st.Door != k.Door {
		return Statement{}, fmt.Errorf("statement says door %q but key %q is door %s's", st.Door, sd.KeyID, k.Door)
	}
	return st, nil
}

// Check verifies sd and holds it to want, the statement the message it
// came with implies: every field alike (Door, Issued, Expires aside; Run
// only when want names one), and now within its lifetime unless now is
// zero (a decision handed on by the workflows). It returns the verified
// statement.
func (d *Doors) Check(sd *Signed, want Statement, now time.Time) (Statement, error) {
	st, err := d.Verify(sd)
	if err != nil {
		return st, err
	}
	if !now.IsZero() {
		if now.After(st.Expires) {
			return st, fmt.Errorf("statement of door %s expired at %s", st.Door, st.Expires.UTC().Format(time.RFC3339))
		}
		if st.Issued.After(now.Add(Skew)) {
			return st, fmt.Errorf("statement of door %s is issued in the future (%s)", st.Door, st.Issued.UTC().Format(time.RFC3339))
		}
	}
	if field := mismatch(st, want); field != "" {
		return st, fmt.Errorf("statement of door %s does not match the message: %s differs", st.Door, field)
	}
	return st, nil
}

// mismatch names the first field in which got is not want.
func mismatch(got, want Statement) string {
	switch {
	case got.Kind != want.Kind:
		return "kind"
	case got.Call != want.Call:
		return "call"
	case want.Run != "" && got.Run != want.Run:
		return "run"
	case got.Session != want.Session:
		return "session"
	case got.Tool != want.Tool:
		return "tool"
	case got.Args != want.Args:
		return "arguments"
	case got.Edited != want.Edited:
		return "edited arguments"
	case got.Outcome != want.Outcome:
		return "outcome"
	case got.Decision != want.Decision:
		return "decision"
	case got.Passkey != want.Passkey:
		return "passkey assertion"
	case got.Key != want.Key:
		return "key"
	case got.By != want.By:
		return "by"
	case !slices.Equal(got.Groups, want.Groups):
		return "groups"
	case !sameIdentity(got.Identity, want.Identity):
		return "identity"
	case got.ActingUser != want.ActingUser:
		return "acting user"
	case got.Channel != want.Channel:
		return "channel"
	case got.User != want.User:
		return "user"
	case got.AsRequester != want.AsRequester:
		return "as_requester"
	}
	return ""
}

func sameIdentity(a, b *Identity) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// Parse reads a signed statement's bytes without verifying them, for
// showing; Verify says whether to believe them.
func Parse(sd *Signed) (Statement, error) {
	var st Statement
	if sd == nil {
		return st, ErrMissing
	}
	err := json.Unmarshal(sd.Statement, &st)
	return st, err
}
