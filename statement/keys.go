package statement

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// DoorKey is a door's public key, as workers and auditors trust it.
// Revoked: statements it signed are refused, old ones too; a door's key is
// revoked when the door (or its key file) may have been compromised.
type DoorKey struct {
	Door      string            `json:"door"`
	KeyID     string            `json:"key_id"`
	PublicKey ed25519.PublicKey `json:"public_key"`
	Revoked   bool              `json:"revoked,omitempty"`
}

// Doors are the door keys a worker or an auditor trusts.
type Doors struct {
	keys []DoorKey
}

// NewDoors trusts keys.
func NewDoors(keys ...DoorKey) *Doors {
	return &Doors{keys: keys}
}

// Keys lists the trusted keys, as given.
func (d *Doors) Keys() []DoorKey { return d.keys }

func (d *Doors) key(id string) (DoorKey, bool) {
	for _, k := range d.keys {
		if k.KeyID == id {
			return k, true
		}
	}
	return DoorKey{}, false
}

// doorsFile is the doors file: the public keys a worker trusts.
type doorsFile struct {
	Doors []DoorKey `json:"doors"`
}

// keyFile is a door's key file: its name and its private key's seed.
type keyFile struct {
	Door string `json:"door"`
	Seed []byte `json:"ed25519_seed"`
}

var doorName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckDoorName refuses a door name that is empty, long or not a plain
// word (letters, digits, '.', '_', '-').
func CheckDoorName(name string) error {
	if !doorName.MatchString(name) {
		return fmt.Errorf("door name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// LoadDoors reads a doors file. Every key must parse and be named by its
// own ID, so a typo cannot trust a key nobody holds.
func LoadDoors(path string) (*Doors, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the doors file: %w", pathless(err))
	}
	var f doorsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("the doors file is not valid JSON: %w", err)
	}
	if len(f.Doors) == 0 {
		return nil, errors.New("the doors file trusts no door: add one with 'toolgate doors new'")
	}
	for i, k := range f.Doors {
		if len(k.PublicKey) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("the doors file's key %d (%q) is not an Ed25519 public key", i+1, k.KeyID)
		}
		if KeyIDOf(k.PublicKey) != k.KeyID {
			return nil, fmt.Errorf("the doors file's key %d says ID %q, but its public key's ID is %q", i+1, k.KeyID, KeyIDOf(k.PublicKey))
		}
		if err := CheckDoorName(k.Door); err != nil {
			return nil, fmt.Errorf("the doors file's key %q: %w", k.KeyID, err)
		}
	}
	return NewDoors(f.Doors...), nil
}

// WriteDoors writes a doors file, 0600 as every file toolgate makes (it
// holds public keys only: copy it to workers and auditors freely).
func WriteDoors(path string, d *Doors) error {
	b, err := json.MarshalIndent(doorsFile{Doors: d.keys}, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'), 0o600)
}

// Trust returns the doors with k trusted too (k replaces a key of its ID).
func (d *Doors) Trust(k DoorKey) *Doors {
	keys := []DoorKey{k}
	for _, old := range d.keys {
		if old.KeyID != k.KeyID {
			keys = append(keys, old)
		}
	}
	return NewDoors(keys...)
}

// LoadSigner reads a door's key file.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the door key file: %w", pathless(err))
	}
	var f keyFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("the door key file is not valid JSON: %w", err)
	}
	if len(f.Seed) != ed25519.SeedSize {
		return nil, errors.New("the door key file holds no Ed25519 key")
	}
	if err := CheckDoorName(f.Door); err != nil {
		return nil, fmt.Errorf("the door key file: %w", err)
	}
	return NewSigner(f.Door, ed25519.NewKeyFromSeed(f.Seed)), nil
}

// NewKeyFile makes a door key for door in path (0600), refusing to
// overwrite one: a door's statements verify only with its key.
func NewKeyFile(path, door string) (*Signer, error) {
	if err := CheckDoorName(door); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err == nil {
		return nil, errors.New("a door key file already exists there; a new door needs a new file")
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("door key file: %w", pathless(err))
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(keyFile{Door: door, Seed: priv.Seed()}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(path, append(b, '\n'), 0o600); err != nil {
		return nil, err
	}
	return NewSigner(door, priv), nil
}

// LoadOrCreateSigner reads the door key file, making one for door first
// when there is none (toolgate dev's own).
func LoadOrCreateSigner(path, door string) (s *Signer, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		s, err := NewKeyFile(path, door)
		return s, err == nil, err
	}
	s, err = LoadSigner(path)
	return s, false, err
}

// writeAtomic writes a file whole or not at all.
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".door-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), pathless(err))
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// pathless is err without the file path it names: errors reach people who
// should not learn where a deployment keeps its keys.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
