package ledger

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// OriginPrefix starts every toolgate log's origin: toolgate/<deployment>.
const OriginPrefix = "toolgate/"

// Checkpoint is a signed statement of the log's size and root hash
// (c2sp.org/tlog-checkpoint): its note's text is the origin, the size and
// the base64 root hash, one per line.
type Checkpoint struct {
	Origin string
	Size   int64
	Hash   tlog.Hash
	// Note is the signed note, as published.
	Note []byte
}

// checkpointText is the body of a checkpoint's note.
func checkpointText(origin string, size int64, hash tlog.Hash) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(hash[:]))
}

// ParseCheckpoint verifies a checkpoint's note against the log's key and
// reads it. The key's name must be the checkpoint's origin.
func ParseCheckpoint(msg []byte, verifier note.Verifier) (Checkpoint, error) {
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		var unknown *note.UnverifiedNoteError
		if errors.As(err, &unknown) {
			return Checkpoint{}, fmt.Errorf("checkpoint: not signed by the log's key %s", verifier.Name())
		}
		return Checkpoint{}, fmt.Errorf("checkpoint: %w", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return Checkpoint{}, errors.New("checkpoint: want origin, size and root hash lines")
	}
	c := Checkpoint{Origin: lines[0], Note: msg}
	if c.Origin != verifier.Name() {
		return Checkpoint{}, fmt.Errorf("checkpoint: origin %q is not the key's name %q", c.Origin, verifier.Name())
	}
	if c.Size, err = strconv.ParseInt(lines[1], 10, 64); err != nil || c.Size < 0 || strconv.FormatInt(c.Size, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("checkpoint: size %q is not a tree size", lines[1])
	}
	h, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(h) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("checkpoint: root hash %q is not a base64 SHA-256", lines[2])
	}
	copy(c.Hash[:], h)
	return c, nil
}

// Keys sign the log's checkpoints. The signer key is a note private key
// (PRIVATE+KEY+<origin>+<hash>+<key>); its name is the log's origin.
type Keys struct {
	Signer   note.Signer
	Verifier note.Verifier
	// VerifierKey is the public key in note format, for `toolgate audit key`.
	VerifierKey string
}

// NewKey returns a fresh signer key for the log toolgate/<deployment>, and
// its verifier key.
func NewKey(deployment string) (skey, vkey string, err error) {
	if deployment == "" || strings.ContainsAny(deployment, "+ \n") {
		return "", "", fmt.Errorf("ledger key: deployment name %q must be non-empty, without spaces or '+'", deployment)
	}
	return note.GenerateKey(rand.Reader, OriginPrefix+deployment)
}

// ParseKeys reads a signer key.
func ParseKeys(skey string) (Keys, error) {
	skey = strings.TrimSpace(skey)
	signer, err := note.NewSigner(skey)
	if err != nil {
		return Keys{}, fmt.Errorf("ledger key: %w", err)
	}
	vkey, err := verifierKeyOf(skey)
	if err != nil {
		return Keys{}, err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return Keys{}, fmt.Errorf("ledger key: %w", err)
	}
	return Keys{Signer: signer, Verifier: verifier, VerifierKey: vkey}, nil
}

// algEd25519 is the note format's algorithm byte for Ed25519.
const algEd25519 = 1

// verifierKeyOf derives the verifier key from an Ed25519 signer key.
func verifierKeyOf(skey string) (string, error) {
	// PRIVATE+KEY+name+hash+base64(alg ‖ seed)
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 {
		return "", errors.New("ledger key: not a note signer key (PRIVATE+KEY+name+hash+key)")
	}
	key, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(key) != 1+ed25519.SeedSize || key[0] != algEd25519 {
		return "", errors.New("ledger key: not an Ed25519 note signer key")
	}
	pub := ed25519.NewKeyFromSeed(key[1:]).Public().(ed25519.PublicKey)
	v, err := note.NewEd25519VerifierKey(parts[2], pub)
	if err != nil {
		return "", fmt.Errorf("ledger key: %w", err)
	}
	return v, nil
}

// LoadOrCreateKey reads the signer key file at path, or makes one for
// deployment there (mode 0600) when there is none. A key file that others
// may read is refused.
func LoadOrCreateKey(path, deployment string) (Keys, bool, error) {
	k, err := LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	skey, _, err := NewKey(deployment)
	if err != nil {
		return Keys{}, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Keys{}, false, fmt.Errorf("ledger key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Keys{}, false, fmt.Errorf("ledger key: %w", err)
	}
	_, werr := f.WriteString(skey + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return Keys{}, false, fmt.Errorf("ledger key %s: %w", path, err)
	}
	k, err = ParseKeys(skey)
	return k, true, err
}

// LoadKey reads a signer key file, refusing one that group or others may
// read.
func LoadKey(path string) (Keys, error) {
	info, err := os.Stat(path)
	if err != nil {
		return Keys{}, fmt.Errorf("ledger key: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return Keys{}, fmt.Errorf("ledger key %s: mode %v lets others read the signing key; chmod 600 it", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Keys{}, fmt.Errorf("ledger key: %w", err)
	}
	k, err := ParseKeys(string(bytes.TrimSpace(b)))
	if err != nil {
		return Keys{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseVerifierKey reads a verifier key (name+hash+key), as `toolgate
// audit key` prints it.
func ParseVerifierKey(vkey string) (note.Verifier, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, fmt.Errorf("verifier key: %w", err)
	}
	if !strings.HasPrefix(v.Name(), OriginPrefix) {
		return nil, fmt.Errorf("verifier key: %q is not a toolgate log's key (its name starts with %s)", v.Name(), OriginPrefix)
	}
	return v, nil
}
