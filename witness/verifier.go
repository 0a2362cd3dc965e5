package witness

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Signature algorithms of c2sp.org/signed-note verifier keys.
const (
	algEd25519       = 1
	algCosignatureV1 = 4 // c2sp.org/tlog-cosignature
)

// NewVerifier reads a witness's verifier key (name+hash+base64 of the
// algorithm byte and the key): a cosignature/v1 key, which litewitness
// and most witnesses have, or a plain Ed25519 note key.
func NewVerifier(vkey string) (note.Verifier, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 || parts[0] == "" || len(parts[1]) != 8 {
		return nil, errors.New("witness key: want name+hash+key (a signed-note verifier key)")
	}
	name := parts[0]
	hash, err1 := strconv.ParseUint(parts[1], 16, 32)
	key, err2 := base64.StdEncoding.DecodeString(parts[2])
	if err1 != nil || err2 != nil || len(key) != 1+ed25519.PublicKeySize {
		return nil, fmt.Errorf("witness key %s: malformed", name)
	}
	switch key[0] {
	case algEd25519:
		return note.NewVerifier(vkey)
	case algCosignatureV1:
	default:
		return nil, fmt.Errorf("witness key %s: unknown algorithm %d", name, key[0])
	}
	if uint32(hash) != keyHash(name, key) {
		return nil, fmt.Errorf("witness key %s: its hash does not match its name and key", name)
	}
	return &cosignatureVerifier{name: name, hash: uint32(hash), key: ed25519.PublicKey(key[1:])}, nil
}

func keyHash(name string, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name + "\n"))
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// cosignatureVerifier checks a cosignature/v1: an Ed25519 signature, by
// the witness, of "cosignature/v1\ntime T\n" and the checkpoint, carried
// after the 8 bytes of T.
type cosignatureVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func (v *cosignatureVerifier) Name() string    { return v.name }
func (v *cosignatureVerifier) KeyHash() uint32 { return v.hash }

func (v *cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	signed := fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", t, msg)
	return ed25519.Verify(v.key, signed, sig[8:])
}

// Cosigned counts the witnesses among ws whose valid cosignature the
// signed note msg carries. A cosignature that names one of them and does
// not verify is an error, as is a note the log's verifier did not sign.
func Cosigned(msg []byte, log note.Verifier, ws []note.Verifier) (int, error) {
	n, err := note.Open(msg, note.VerifierList(append([]note.Verifier{log}, ws...)...))
	if err != nil {
		return 0, err
	}
	if !signedBy(n, log) {
		return 0, fmt.Errorf("the checkpoint is not signed by the log's key %s", log.Name())
	}
	count := 0
	for _, w := range ws {
		if signedBy(n, w) {
			count++
		}
	}
	return count, nil
}

func signedBy(n *note.Note, v note.Verifier) bool {
	for _, s := range n.Sigs {
		if s.Name == v.Name() && s.Hash == v.KeyHash() {
			return true
		}
	}
	return false
}
