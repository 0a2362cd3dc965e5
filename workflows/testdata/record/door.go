package main

import (
	"crypto/ed25519"
	"crypto/sha256"

	"github.com/toolgate/toolgate/statement"
)

// recordDoor signs what the recorder's clients send; the recorder's
// workers trust it. Its key is fixed, so the histories it records verify
// in the replay tests' ledger checks alike.
var recordDoor, recordDoors = func() (*statement.Signer, *statement.Doors) {
	sum := sha256.Sum256([]byte("toolgate recorder door"))
	s := statement.NewSigner("record", ed25519.NewKeyFromSeed(sum[:]))
	return s, statement.NewDoors(s.Public())
}()
