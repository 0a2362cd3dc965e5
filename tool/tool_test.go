package tool

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func noop(context.Context, Input) (json.RawMessage, error) { return nil, nil }

func TestValidate(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(
		Tool{Name: "send_money", Run: noop, Schema: json.RawMessage(`{"type":"object","required":["amount","to"],
			"additionalProperties":false,"properties":{"amount":{"type":"number","maximum":1000},"to":{"type":"string"}}}`)},
		Tool{Name: "free", Run: noop},
	)
	tests := []struct {
		tool, args, wantErr string
	}{
		{"send_money", `{"amount":10,"to":"bob"}`, ""},
		{"send_money", `{"amount":5000,"to":"bob"}`, "at /amount"},
		{"send_money", `{"to":"bob"}`, "amount"},
		{"send_money", `{"amount":1,"to":"bob","memo":"x"}`, "memo"},
		{"send_money", `{"amount":"ten","to":"bob"}`, "/amount"},
		{"send_money", `{"amount":`, "not valid JSON"},
		{"free", ``, ""},
		{"nope", `{}`, `unknown tool "nope" (known tools: free, send_money)`},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			err := r.Validate(tt.tool, json.RawMessage(tt.args))
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
	assert.ErrorIs(t, r.Validate("nope", nil), ErrUnknownTool)
	var argErr *ArgumentError
	assert.True(t, errors.As(r.Validate("send_money", json.RawMessage(`{}`)), &argErr))
}

func TestRegister(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.Register(Tool{Name: "a", Run: noop}))
	assert.ErrorContains(t, r.Register(Tool{Name: "a", Run: noop}), "already registered")
	assert.ErrorContains(t, r.Register(Tool{Name: "b", Run: noop, Schema: json.RawMessage(`{"type":"nonsense"}`)}), "does not compile")
	assert.ErrorContains(t, r.Register(Tool{Name: "c"}), "required")

	got, ok := r.Lookup("a")
	require.True(t, ok)
	assert.Equal(t, time.Minute, got.Options.Timeout, "defaults are applied")
	assert.Equal(t, int32(1), got.Options.Retry.MaxAttempts, "a tool that does not say it is idempotent runs once")
	assert.Equal(t, []string{"a"}, r.Names())
}

func TestOnlyIdempotentToolsAreRetried(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, r.Register(Tool{Name: "get", Run: noop, Options: Options{Idempotent: true}}))
	got, _ := r.Lookup("get")
	assert.Equal(t, int32(3), got.Options.Retry.MaxAttempts, "idempotent tools are retried by default")
	err := r.Register(Tool{Name: "pay", Run: noop, Options: Options{Retry: RetryPolicy{MaxAttempts: 3}}})
	assert.ErrorContains(t, err, `register tool "pay": 3 attempts need Options.Idempotent`)
}

func TestAHeldToolIsNeitherListedNorRunUntilReleased(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(Tool{Name: "docs__search", Description: "Search.", Run: noop}, Tool{Name: "echo", Run: noop})
	r.Hold("docs__search", "its definition changed; an approver must accept it (call dc-1)")

	assert.Equal(t, []string{"echo"}, r.Names())
	require.Len(t, r.Describe(), 1)
	_, ok := r.Lookup("docs__search")
	assert.False(t, ok)
	_, err := r.Get("docs__search")
	assert.ErrorIs(t, err, ErrHeldTool)
	assert.EqualError(t, err, `tool "docs__search" is held: its definition changed; an approver must accept it (call dc-1)`)
	err = r.Validate("docs__search", json.RawMessage(`{}`))
	assert.ErrorIs(t, err, ErrHeldTool, "a held tool's calls are refused with why")

	// The approved definition replaces the old one, still held until released.
	require.NoError(t, r.Replace(Tool{Name: "docs__search", Description: "Search, in more languages.", Run: noop,
		Schema: json.RawMessage(`{"type":"object","required":["q"]}`)}))
	assert.ErrorIs(t, r.Validate("docs__search", json.RawMessage(`{}`)), ErrHeldTool)
	r.Release("docs__search")
	got, err := r.Get("docs__search")
	require.NoError(t, err)
	assert.Equal(t, "Search, in more languages.", got.Description)
	var argErr *ArgumentError
	assert.ErrorAs(t, r.Validate("docs__search", json.RawMessage(`{}`)), &argErr, "the new schema holds")
	assert.Error(t, r.Replace(Tool{Name: "bad", Run: noop, Schema: json.RawMessage(`{"type":7}`)}), "a schema that does not compile replaces nothing")
	_, err = r.Get("unknown")
	assert.ErrorIs(t, err, ErrUnknownTool)
}
