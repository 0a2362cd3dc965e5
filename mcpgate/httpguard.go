package mcpgate

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// AgentAuth names the agent a bearer token belongs to, and the person
// running it (owner; empty when the token names none). known is false for
// a token toolgate does not know; agent is false for a known token whose
// role may not submit calls (an approver's).
type AgentAuth func(token string) (requester, owner string, known, agent bool)

// maxPeekBytes bounds how much of a POST body the guard reads to tell an
// initialize from other requests.
const maxPeekBytes = 4 << 20

// guard puts /mcp behind what the streamable HTTP transport asks of a
// server, before the SDK sees a request: an Origin that is not this host
// is refused (403, against DNS rebinding); a missing or unknown bearer
// token is 401 with WWW-Authenticate, a token of another role 403; a POST
// without Mcp-Session-Id that is not an initialize is 400. next (the
// SDK's bearer check, which binds each MCP session to its token) then
// sees only requests that pass.
func guard(authenticate AgentAuth, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			http.Error(w, "Forbidden: the Origin "+r.Header.Get("Origin")+" may not use this server", http.StatusForbidden)
			return
		}
		fields := strings.Fields(r.Header.Get("Authorization"))
		if len(fields) != 2 || !strings.EqualFold(fields[0], "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			http.Error(w, "Unauthorized: send Authorization: Bearer <agent token>", http.StatusUnauthorized)
			return
		}
		_, _, known, agent := authenticate(fields[1])
		switch {
		case !known:
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate", error="invalid_token"`)
			http.Error(w, "Unauthorized: toolgate knows no such token", http.StatusUnauthorized)
			return
		case !agent:
			http.Error(w, "Forbidden: the token's role may not submit calls: use an agent token", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			head, err := io.ReadAll(io.LimitReader(r.Body, maxPeekBytes))
			if err != nil {
				http.Error(w, "Bad Request: "+err.Error(), http.StatusBadRequest)
				return
			}
			if !isInitialize(head) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Bad Request: no Mcp-Session-Id header; start a session with initialize"}}`))
				return
			}
			// The SDK reads the whole body: what was peeked, then the rest.
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin accepts a request without Origin (not a browser), and one
// whose Origin is this server's host or a loopback address.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isInitialize reports whether a JSON-RPC body is an initialize request,
// alone or first in a batch (2025-03-26 allowed batches).
func isInitialize(body []byte) bool {
	type message struct {
		Method string `json:"method"`
	}
	var msg message
	if json.Unmarshal(body, &msg) == nil {
		return msg.Method == "initialize"
	}
	var batch []message
	return json.Unmarshal(body, &batch) == nil && len(batch) > 0 && batch[0].Method == "initialize"
}
