package notify

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Email links. A link is a capability: whoever holds it may take the one
// decision it names, on the one call it names, as the approver whose
// address it was sent to, until it expires. It is signed with HMAC-SHA256
// under the link secret, so it cannot be forged or changed; the HTTP
// listener records the IDs of links used (see server/email.go), and a
// decision on a call that is already decided is refused by the call's
// workflow whatever the link, so a link can never decide twice.

// LinkDecisions are the decisions an email link can carry, as the API
// names them.
var LinkDecisions = []string{"approve", "approve_for_session", "deny", "deny_always"}

// DefaultLinkTTL is how long a link lives when the call's deadline is not
// known.
const DefaultLinkTTL = 24 * time.Hour

// MinLinkSecretBytes is the shortest link secret accepted.
const MinLinkSecretBytes = 16

// linkContext separates link MACs from any other use of the secret.
const linkContext = "toolgate-email-link-v1\x00"

// LinkClaims is what a verified link says.
type LinkClaims struct {
	// ID identifies the link, so it can be used once.
	ID string `json:"id"`
	// CallID is the call the link decides.
	CallID string `json:"call"`
	// Recipient is the address the link was sent to; the decision is taken
	// as the approver with that address.
	Recipient string `json:"to"`
	// Decision is one of LinkDecisions.
	Decision string `json:"d"`
	// Expires is when the link stops working (Unix seconds on the wire).
	Expires time.Time `json:"-"`
}

// linkPayload is the signed part of a token.
type linkPayload struct {
	LinkClaims
	Exp int64 `json:"exp"`
}

// LinkProblem is why a link was refused.
type LinkProblem int

// Why a link is refused.
const (
	// LinkMalformed: not a toolgate link at all (cut short, mangled).
	LinkMalformed LinkProblem = iota + 1
	// LinkTampered: the signature does not match: changed, or signed with
	// another secret.
	LinkTampered
	// LinkExpired: genuine, but past its expiry.
	LinkExpired
)

func (p LinkProblem) String() string {
	switch p {
	case LinkMalformed:
		return "malformed"
	case LinkTampered:
		return "tampered"
	case LinkExpired:
		return "expired"
	}
	return fmt.Sprintf("LinkProblem(%d)", int(p))
}

// LinkError refuses a link; Problem says why.
type LinkError struct {
	Problem LinkProblem
	// Expired is when an expired link stopped working.
	Expired time.Time
}

func (e *LinkError) Error() string {
	switch e.Problem {
	case LinkExpired:
		return "the link expired at " + e.Expired.UTC().Format(time.RFC3339)
	case LinkTampered:
		return "the link's signature does not match: it was changed or not issued by this toolgate"
	}
	return "the link is malformed (cut short or mangled by the mail program?)"
}

// strictB64 refuses non-canonical encodings, so one link has exactly one
// spelling.
var strictB64 = base64.RawURLEncoding.Strict()

// LinkSigner signs and verifies email links with HMAC-SHA256.
type LinkSigner struct {
	key []byte
}

// NewLinkSigner returns a signer with key, at least MinLinkSecretBytes
// long. Every process that sends or accepts links needs the same key.
func NewLinkSigner(key []byte) (*LinkSigner, error) {
	if len(key) < MinLinkSecretBytes {
		return nil, fmt.Errorf("the link secret must be at least %d bytes", MinLinkSecretBytes)
	}
	return &LinkSigner{key: slices.Clone(key)}, nil
}

// Sign returns a URL-safe token for one decision on one call by the
// approver at recipient, valid until expiry.
func (s *LinkSigner) Sign(callID, recipient, decision string, expiry time.Time) (string, error) {
	if callID == "" || recipient == "" {
		return "", errors.New("sign link: call ID and recipient are required")
	}
	if !slices.Contains(LinkDecisions, decision) {
		return "", fmt.Errorf("sign link: decision %q is not one of %s", decision, strings.Join(LinkDecisions, ", "))
	}
	var id [12]byte
	_, _ = rand.Read(id[:])
	p := linkPayload{
		LinkClaims: LinkClaims{ID: base64.RawURLEncoding.EncodeToString(id[:]), CallID: callID, Recipient: strings.ToLower(recipient), Decision: decision},
		Exp:        expiry.Unix(),
	}
	body, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("sign link: %w", err)
	}
	enc := base64.RawURLEncoding.EncodeToString(body)
	return enc + "." + base64.RawURLEncoding.EncodeToString(s.mac(enc)), nil
}

// Verify checks a token's signature and expiry at now and returns its
// claims, or a *LinkError.
func (s *LinkSigner) Verify(token string, now time.Time) (LinkClaims, error) {
	enc, sig, ok := strings.Cut(strings.TrimSpace(token), ".")
	if !ok || enc == "" || sig == "" {
		return LinkClaims{}, &LinkError{Problem: LinkMalformed}
	}
	got, err := strictB64.DecodeString(sig)
	if err != nil {
		return LinkClaims{}, &LinkError{Problem: LinkMalformed}
	}
	if !hmac.Equal(got, s.mac(enc)) {
		return LinkClaims{}, &LinkError{Problem: LinkTampered}
	}
	body, err := strictB64.DecodeString(enc)
	if err != nil {
		return LinkClaims{}, &LinkError{Problem: LinkMalformed}
	}
	var p linkPayload
	if err := json.Unmarshal(body, &p); err != nil || p.ID == "" || p.CallID == "" || p.Recipient == "" || !slices.Contains(LinkDecisions, p.Decision) {
		return LinkClaims{}, &LinkError{Problem: LinkMalformed}
	}
	c := p.LinkClaims
	c.Expires = time.Unix(p.Exp, 0)
	if !now.Before(c.Expires) {
		return LinkClaims{}, &LinkError{Problem: LinkExpired, Expired: c.Expires}
	}
	return c, nil
}

func (s *LinkSigner) mac(enc string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(linkContext))
	m.Write([]byte(enc))
	return m.Sum(nil)
}

// LinkSecretFile is where LoadOrCreateLinkSecret keeps a generated secret,
// under the data directory.
const LinkSecretFile = "link-secret"

// LoadOrCreateLinkSecret returns the link secret kept in
// dataDir/link-secret, creating it (32 random bytes, hex, mode 0600) when
// absent, so links survive a restart. For one-process set-ups (toolgate
// dev); processes that share links need TOOLGATE_LINK_SECRET.
func LoadOrCreateLinkSecret(dataDir string) ([]byte, error) {
	path := filepath.Join(dataDir, LinkSecretFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		secret := []byte(strings.TrimSpace(string(data)))
		if len(secret) < MinLinkSecretBytes {
			return nil, fmt.Errorf("%s: the link secret must be at least %d bytes; delete the file to generate a new one", path, MinLinkSecretBytes)
		}
		return secret, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("read link secret: %w", err)
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	secret := []byte(hex.EncodeToString(b[:]))
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	// O_EXCL: two processes starting at once must not each write a secret.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadOrCreateLinkSecret(dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("write link secret: %w", err)
	}
	if _, err := f.Write(append(secret, '\n')); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write link secret: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write link secret: %w", err)
	}
	return secret, nil
}
