// Package keyring keeps the keys toolgate encrypts with: a file of
// AES-256 keys, each with an ID, one of them current. The current key
// encrypts; every key in the file decrypts, so a key retired by rotation
// keeps reading the histories written under it for as long as they live.
//
// The file is JSON, mode 0600:
//
//	{"current": "k20261203-3fa91c",
//	 "keys": [{"id": "k20261203-3fa91c", "created": "2026-12-03T10:00:00Z", "key": "<32 bytes, base64>"}]}
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ErrUnknownKey is returned when data was encrypted with a key the
// keyring does not hold.
var ErrUnknownKey = errors.New("unknown key")

// Key is one key of the ring, as List shows it (never its bytes).
type Key struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Current bool      `json:"current"`
}

// fileKey is a key as the file holds it.
type fileKey struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Key     []byte    `json:"key"` // base64 in JSON
}

type file struct {
	Current string    `json:"current"`
	Keys    []fileKey `json:"keys"`
}

// Keyring holds the keys of one file. It is safe for concurrent use.
type Keyring struct {
	path string

	mu       sync.RWMutex
	current  string
	keys     map[string]cipher.AEAD
	listed   []Key
	reloaded time.Time
}

// Load reads a keyring file, refusing one that group or others may read.
func Load(path string) (*Keyring, error) {
	f, err := readFile(path)
	if err != nil {
		return nil, err
	}
	k := &Keyring{path: path}
	if err := k.set(f); err != nil {
		return nil, fmt.Errorf("keyring %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreate reads the keyring file at path, or makes one with a single
// new key if there is none; created says it did.
func LoadOrCreate(path string) (k *Keyring, created bool, err error) {
	k, err = Load(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	if _, err := Rotate(path); err != nil {
		return nil, false, err
	}
	k, err = Load(path)
	return k, err == nil, err
}

// Rotate adds a new key to the keyring file at path (making the file if
// there is none) and makes it current. The keys before stay, to decrypt.
func Rotate(path string) (Key, error) {
	f, err := readFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Key{}, err
	}
	nk, err := newKey(time.Now().UTC())
	if err != nil {
		return Key{}, err
	}
	f.Keys = append(f.Keys, nk)
	f.Current = nk.ID
	if err := writeFile(path, f); err != nil {
		return Key{}, err
	}
	return Key{ID: nk.ID, Created: nk.Created, Current: true}, nil
}

// Path is the file the keyring was read from.
func (k *Keyring) Path() string { return k.path }

// Current is the ID of the key that encrypts.
func (k *Keyring) Current() string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.current
}

// List returns the keys, oldest first.
func (k *Keyring) List() []Key {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return append([]Key(nil), k.listed...)
}

// Seal encrypts plaintext with the current key, binding it to purpose (so
// a sealed value cannot be passed off as one of another kind). It returns
// the key's ID and nonce ‖ ciphertext.
func (k *Keyring) Seal(purpose string, plaintext []byte) (keyID string, sealed []byte, err error) {
	k.mu.RLock()
	id, aead := k.current, k.keys[k.current]
	k.mu.RUnlock()
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", nil, fmt.Errorf("keyring: nonce: %w", err)
	}
	return id, aead.Seal(nonce, nonce, plaintext, additional(purpose, id)), nil
}

// Open decrypts what Seal returned for the same purpose. A key the ring
// does not hold, a value cut short and one altered or sealed with another
// key are errors that say which.
func (k *Keyring) Open(purpose, keyID string, sealed []byte) ([]byte, error) {
	aead, err := k.aead(keyID)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("encrypted with key %s: truncated (%d bytes)", keyID, len(sealed))
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], additional(purpose, keyID))
	if err != nil {
		return nil, fmt.Errorf("encrypted with key %s: does not decrypt (altered, or not sealed by this key)", keyID)
	}
	return plain, nil
}

// aead returns the cipher of a key. A key it does not hold makes it read
// its file again (at most once a second): another process may have
// rotated, and this one should read what the new key wrote before it is
// restarted.
func (k *Keyring) aead(keyID string) (cipher.AEAD, error) {
	k.mu.RLock()
	aead, ok := k.keys[keyID]
	k.mu.RUnlock()
	if ok {
		return aead, nil
	}
	if k.reload() {
		k.mu.RLock()
		aead, ok = k.keys[keyID]
		k.mu.RUnlock()
		if ok {
			return aead, nil
		}
	}
	return nil, &unknownKeyError{id: keyID, path: k.path}
}

// unknownKeyError is ErrUnknownKey with the key's ID, and the keyring's
// path for the operator who holds the file.
type unknownKeyError struct{ id, path string }

func (e *unknownKeyError) Error() string {
	return fmt.Sprintf("encrypted with key %s, which keyring %s does not hold: %v", e.id, e.path, ErrUnknownKey)
}

func (e *unknownKeyError) Unwrap() error { return ErrUnknownKey }

// UnknownKeyID returns the ID of the key an ErrUnknownKey names, for a
// message to someone who must not learn where the keyring lives (its
// Error names the file). ok is false for any other error.
func UnknownKeyID(err error) (id string, ok bool) {
	var missing *unknownKeyError
	if !errors.As(err, &missing) {
		return "", false
	}
	return missing.id, true
}

func (k *Keyring) reload() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.path == "" || time.Since(k.reloaded) < time.Second {
		return false
	}
	k.reloaded = time.Now()
	f, err := readFile(k.path)
	if err != nil {
		return false
	}
	return k.setLocked(f) == nil
}

func (k *Keyring) set(f file) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.setLocked(f)
}

func (k *Keyring) setLocked(f file) error {
	if len(f.Keys) == 0 {
		return errors.New("no keys")
	}
	keys := make(map[string]cipher.AEAD, len(f.Keys))
	listed := make([]Key, 0, len(f.Keys))
	for _, fk := range f.Keys {
		if fk.ID == "" {
			return errors.New("a key without an id")
		}
		if _, dup := keys[fk.ID]; dup {
			return fmt.Errorf("key %s appears twice", fk.ID)
		}
		aead, err := newAEAD(fk.Key)
		if err != nil {
			return fmt.Errorf("key %s: %w", fk.ID, err)
		}
		keys[fk.ID] = aead
		listed = append(listed, Key{ID: fk.ID, Created: fk.Created, Current: fk.ID == f.Current})
	}
	if _, ok := keys[f.Current]; !ok {
		return fmt.Errorf("current key %q is not among the keys", f.Current)
	}
	k.current, k.keys, k.listed = f.Current, keys, listed
	return nil
}

// additional is the data each ciphertext is bound to besides its key.
func additional(purpose, keyID string) []byte {
	return []byte("toolgate/" + purpose + "/" + keyID)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("%d bytes, want 32 (AES-256)", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func newKey(now time.Time) (fileKey, error) {
	var key [32]byte
	var id [3]byte
	if _, err := rand.Read(key[:]); err != nil {
		return fileKey{}, fmt.Errorf("keyring: %w", err)
	}
	if _, err := rand.Read(id[:]); err != nil {
		return fileKey{}, fmt.Errorf("keyring: %w", err)
	}
	return fileKey{ID: "k" + now.Format("20060102") + "-" + hex.EncodeToString(id[:]), Created: now.Truncate(time.Second), Key: key[:]}, nil
}

func readFile(path string) (file, error) {
	info, err := os.Stat(path)
	if err != nil {
		return file{}, fmt.Errorf("keyring: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return file{}, fmt.Errorf("keyring %s: mode %v lets others read the keys; chmod 600 it", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return file{}, fmt.Errorf("keyring: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return file{}, fmt.Errorf("keyring %s: not a keyring file: %w", path, err)
	}
	return f, nil
}

// writeFile replaces the file at path whole (a temporary file renamed
// over it), so a crash leaves the old keyring or the new, never half.
func writeFile(path string, f file) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".keyring-*")
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("keyring: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("keyring %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	return nil
}
