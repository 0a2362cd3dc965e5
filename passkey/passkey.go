// Package passkey is how a person's own device signs a decision: a
// WebAuthn assertion by a passkey they registered, over a challenge that
// is the decision itself (Challenge), checked against the credential's
// public key as its registration recorded it (Verify).
//
// A door's statement says which front door vouched for a person; a
// passkey assertion says their authenticator, with user verification,
// approved these arguments of this call. A compromised toolgate server
// holds door keys but no authenticator, so it cannot make one.
//
// The checks are WebAuthn Level 3's (go-webauthn's protocol package):
// client data of a get ceremony from an allowed origin, the relying
// party's ID hash, user presence and verification, the signature; then
// the sign counter, which must move forward (a clone's goes back).
package passkey

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"

	"github.com/toolgate/toolgate/canonjson"
)

// Decision is what a passkey approves: the call and its run, the tool,
// the digest of the arguments that will run (the edited ones for an
// edit; statement.Digest), the decision's kind, the person deciding, and
// until when the assertion holds.
type Decision struct {
	Call    string    `json:"call"`
	Run     string    `json:"run"`
	Tool    string    `json:"tool"`
	Args    string    `json:"args"`
	Kind    string    `json:"decision"`
	By      string    `json:"by"`
	Expires time.Time `json:"expires"`
}

// purpose separates toolgate's decision challenges from any other use of
// the same bytes.
const purpose = "toolgate.decision.v1"

// Challenge is the WebAuthn challenge of d: the SHA-256 of its canonical
// JSON. An assertion over it approves exactly d and nothing else.
func Challenge(d Decision) []byte {
	raw, _ := json.Marshal(struct {
		Purpose string `json:"purpose"`
		Decision
	}{purpose, Decision{Call: d.Call, Run: d.Run, Tool: d.Tool, Args: d.Args, Kind: d.Kind, By: d.By, Expires: d.Expires.UTC()}})
	canon, err := canonjson.Canonical(raw)
	if err != nil {
		canon = raw // cannot happen: raw is json.Marshal's
	}
	sum := sha256.Sum256(canon)
	return sum[:]
}

// Lifetime is how long a decision's challenge holds: a person's ceremony
// and the decision's trip to its call, no more.
const Lifetime = 5 * time.Minute

// Assertion is a WebAuthn assertion as the browser returned it, with the
// expiry its challenge covers (the challenge is recomputed from the
// decision and this expiry, never taken from the message).
type Assertion struct {
	CredentialID      []byte    `json:"credential_id"`
	AuthenticatorData []byte    `json:"authenticator_data"`
	ClientDataJSON    []byte    `json:"client_data_json"`
	Signature         []byte    `json:"signature"`
	UserHandle        []byte    `json:"user_handle,omitempty"`
	Expires           time.Time `json:"expires"`
}

// Digest names an assertion by the SHA-256 of its canonical JSON; a
// door's statement of a decision carries it.
func (a Assertion) Digest() string {
	a.Expires = a.Expires.UTC()
	raw, _ := json.Marshal(a)
	canon, err := canonjson.Canonical(raw)
	if err != nil {
		canon = raw
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Credential is a registered passkey: its ID and COSE public key, whose
// it is, and the relying party it was made for.
type Credential struct {
	ID        []byte `json:"id"`
	PublicKey []byte `json:"public_key"`
	Person    string `json:"person"`
	RPID      string `json:"rp_id"`
}

// IDString is a credential ID as WebAuthn's JSON writes it (base64url).
func IDString(id []byte) string { return base64.RawURLEncoding.EncodeToString(id) }

// RelyingParty is who the assertions are for: the relying party ID (the
// public URL's host) and the origins a ceremony may run at.
type RelyingParty struct {
	ID      string
	Origins []string
}

// Refusals of Verify, each naming what is wrong (errors.Is).
var (
	ErrNoAssertion     = errors.New("no passkey assertion: this rule needs the deciding person's passkey")
	ErrOtherCredential = errors.New("the assertion is by another credential than the one named")
	ErrNotTheirs       = errors.New("the passkey is not registered to the person deciding")
	ErrExpired         = errors.New("the passkey assertion has expired")
	ErrChallenge       = errors.New("the passkey assertion is over another decision (call, run, tool, arguments, decision or person differ)")
	ErrNotVerified     = errors.New("the authenticator did not verify the user (user verification is required)")
	ErrInvalid         = errors.New("the passkey assertion does not verify")
	ErrClone           = errors.New("the passkey's sign counter went back: the authenticator may have been cloned")
)

// Verify checks that a is cred's assertion, with user verification, over
// d's challenge, at now, for rp; lastCount is the sign counter the last
// assertion of cred had. It returns a's sign counter.
func Verify(cred Credential, a *Assertion, d Decision, rp RelyingParty, lastCount uint32, now time.Time) (uint32, error) {
	switch {
	case a == nil:
		return 0, ErrNoAssertion
	case !bytes.Equal(a.CredentialID, cred.ID):
		return 0, ErrOtherCredential
	case cred.Person != d.By:
		return 0, fmt.Errorf("%w (%s's passkey, decided as %s)", ErrNotTheirs, cred.Person, d.By)
	case !a.Expires.Equal(d.Expires):
		return 0, ErrChallenge
	case !now.Before(a.Expires):
		return 0, fmt.Errorf("%w (at %s)", ErrExpired, a.Expires.UTC().Format(time.RFC3339))
	case a.Expires.After(now.Add(Lifetime + time.Minute)):
		return 0, fmt.Errorf("%w: it claims to hold until %s, longer than a ceremony", ErrInvalid, a.Expires.UTC().Format(time.RFC3339))
	}
	parsed, err := parse(a)
	if err != nil {
		return 0, fmt.Errorf("%w: %s", ErrInvalid, detail(err))
	}
	challenge := base64.RawURLEncoding.EncodeToString(Challenge(d))
	switch {
	case parsed.Response.CollectedClientData.Type != protocol.AssertCeremony:
		return 0, fmt.Errorf("%w: its client data is of a %q ceremony", ErrInvalid, parsed.Response.CollectedClientData.Type)
	case parsed.Response.CollectedClientData.Challenge != challenge:
		return 0, ErrChallenge
	case !parsed.Response.AuthenticatorData.Flags.UserVerified():
		return 0, ErrNotVerified
	}
	err = parsed.Verify(challenge, rp.ID, "", rp.Origins, nil, nil, protocol.TopOriginImplicitVerificationMode,
		false, true, true, cred.PublicKey, protocol.SignaturePolicy{})
	if err != nil {
		return 0, fmt.Errorf("%w: %s", ErrInvalid, detail(err))
	}
	count := parsed.Response.AuthenticatorData.Counter
	// Authenticators that keep no counter (synced passkeys) say 0 every
	// time; one that keeps it must move it forward.
	if (count != 0 || lastCount != 0) && count <= lastCount {
		return count, fmt.Errorf("%w (%d after %d)", ErrClone, count, lastCount)
	}
	return count, nil
}

// parse reads a as the browser's response, in go-webauthn's terms.
func parse(a *Assertion) (*protocol.ParsedCredentialAssertionData, error) {
	id := IDString(a.CredentialID)
	car := protocol.CredentialAssertionResponse{
		PublicKeyCredential: protocol.PublicKeyCredential{
			Credential: protocol.Credential{ID: id, Type: string(protocol.PublicKeyCredentialType)},
			RawID:      a.CredentialID,
		},
		AssertionResponse: protocol.AuthenticatorAssertionResponse{
			AuthenticatorResponse: protocol.AuthenticatorResponse{ClientDataJSON: a.ClientDataJSON},
			AuthenticatorData:     a.AuthenticatorData,
			Signature:             a.Signature,
			UserHandle:            a.UserHandle,
		},
	}
	return car.Parse()
}

// detail is go-webauthn's reason for an error, without its wrapping.
func detail(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		// go-webauthn writes a nil cause as ": <nil>".
		details := strings.TrimSuffix(pe.Details, ": <nil>")
		if pe.DevInfo != "" {
			return details + ": " + pe.DevInfo
		}
		return details
	}
	return err.Error()
}

// FromBrowser reads an assertion as a browser's
// PublicKeyCredential.toJSON() of navigator.credentials.get writes it
// (base64url fields), with the expiry of the challenge it was asked over.
func FromBrowser(credential []byte, expires time.Time) (*Assertion, error) {
	parsed, err := protocol.ParseCredentialRequestResponseBytes(credential)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, detail(err))
	}
	r := parsed.Raw.AssertionResponse
	return &Assertion{CredentialID: parsed.RawID, AuthenticatorData: r.AuthenticatorData, ClientDataJSON: r.ClientDataJSON,
		Signature: r.Signature, UserHandle: r.UserHandle, Expires: expires.UTC()}, nil
}
