// Package passkeytest is a software authenticator for tests: it makes a
// passkey's credential and assertions as a browser's authenticator would
// (ES256, the flags and counter chosen), so every refusal of
// passkey.Verify can be produced on purpose.
package passkeytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"

	"github.com/toolgate/toolgate/passkey"
)

// Authenticator holds one passkey. Count is its sign counter (moved
// forward by each assertion unless NoCounter); NoUV makes it answer
// without user verification.
type Authenticator struct {
	ID        []byte
	Count     uint32
	NoCounter bool
	NoUV      bool
	key       *ecdsa.PrivateKey
}

// New makes an authenticator with a fresh key.
func New() *Authenticator {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &Authenticator{ID: id, key: key}
}

// PublicKey is the credential's public key as COSE (ES256).
func (a *Authenticator) PublicKey() []byte {
	x, y := make([]byte, 32), make([]byte, 32)
	a.key.PublicKey.X.FillBytes(x)
	a.key.PublicKey.Y.FillBytes(y)
	b, err := webauthncbor.Marshal(webauthncose.EC2PublicKeyData{
		PublicKeyData: webauthncose.PublicKeyData{KeyType: int64(webauthncose.EllipticKey), Algorithm: int64(webauthncose.AlgES256)},
		Curve:         int64(webauthncose.P256), XCoord: x, YCoord: y,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// Credential is the passkey as its registration records it.
func (a *Authenticator) Credential(person, rpID string) passkey.Credential {
	return passkey.Credential{ID: a.ID, PublicKey: a.PublicKey(), Person: person, RPID: rpID}
}

// Assert signs d's challenge as a get ceremony at origin for rpID.
func (a *Authenticator) Assert(d passkey.Decision, rpID, origin string) *passkey.Assertion {
	return a.AssertChallenge(passkey.Challenge(d), d.Expires, rpID, origin)
}

// AssertChallenge signs any challenge (a test's wrong one, say).
func (a *Authenticator) AssertChallenge(challenge []byte, expires time.Time, rpID, origin string) *passkey.Assertion {
	if !a.NoCounter {
		a.Count++
	}
	client, _ := json.Marshal(map[string]any{
		"type": "webauthn.get", "challenge": base64.RawURLEncoding.EncodeToString(challenge),
		"origin": origin, "crossOrigin": false,
	})
	rpHash := sha256.Sum256([]byte(rpID))
	flags := byte(0x01) // user present
	if !a.NoUV {
		flags |= 0x04
	}
	data := append(append(rpHash[:], flags), binary.BigEndian.AppendUint32(nil, a.Count)...)
	clientHash := sha256.Sum256(client)
	digest := sha256.Sum256(append(append([]byte(nil), data...), clientHash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, a.key, digest[:])
	if err != nil {
		panic(err)
	}
	return &passkey.Assertion{CredentialID: a.ID, AuthenticatorData: data, ClientDataJSON: client, Signature: sig, Expires: expires}
}

// BrowserJSON writes an assertion as a browser's
// PublicKeyCredential.toJSON() does.
func BrowserJSON(a *passkey.Assertion) []byte {
	b64 := base64.RawURLEncoding.EncodeToString
	out, _ := json.Marshal(map[string]any{
		"id": b64(a.CredentialID), "rawId": b64(a.CredentialID), "type": "public-key",
		"response": map[string]any{"authenticatorData": b64(a.AuthenticatorData), "clientDataJSON": b64(a.ClientDataJSON),
			"signature": b64(a.Signature)},
	})
	return out
}

// FromPKCS8 is the authenticator of an existing passkey: its credential
// ID, its private key (PKCS #8, P-256, as Chrome's virtual authenticator
// exports it) and its sign counter so far.
func FromPKCS8(id, pkcs8 []byte, count uint32) (*Authenticator, error) {
	k, err := x509.ParsePKCS8PrivateKey(pkcs8)
	if err != nil {
		return nil, err
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("passkeytest: a %T key, not ES256's", k)
	}
	return &Authenticator{ID: id, Count: count, key: key}, nil
}
