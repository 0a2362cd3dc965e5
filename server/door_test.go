package server

import (
	"crypto/ed25519"
	"crypto/sha256"

	"github.com/toolgate/toolgate/statement"
)

// testDoor is the door key the tests' servers sign with.
var testDoor = func() *statement.Signer {
	sum := sha256.Sum256([]byte("server test door"))
	return statement.NewSigner("test", ed25519.NewKeyFromSeed(sum[:]))
}()
