package server

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestTheSignInHintNamesEveryRoleThatMaySignIn: approvers, admins and
// auditors may sign in to the inbox with a token; the form says so.
func TestTheSignInHintNamesEveryRoleThatMaySignIn(t *testing.T) {
	rec := serve(New(Config{Tokens: mustTokens(t)}), httptest.NewRequest("GET", "/login", nil))
	assert.Equal(t, http.StatusOK, rec.Code)
	for _, role := range []string{"an approver", "an admin", "an auditor", "(read only)", "Agents cannot sign in"} {
		assert.Contains(t, rec.Body.String(), role)
	}
}
