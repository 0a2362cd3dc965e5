package bench

import (
	"crypto/ed25519"
	"crypto/rand"

	"github.com/toolgate/toolgate/statement"
)

// benchDoor signs what the bench's clients send, as serve's door does;
// the bench's workers trust it alone.
var benchDoor, benchDoors = func() (*statement.Signer, *statement.Doors) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	s := statement.NewSigner("bench", key)
	return s, statement.NewDoors(s.Public())
}()
