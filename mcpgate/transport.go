package mcpgate

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

// How toolgate reaches a server: a process of its own (stdio), or HTTP.

// inheritedEnv are the variables a stdio server gets from the worker's
// environment, as MCP's reference clients pass them; the rest (Temporal
// keys, tokens, SMTP passwords) stays in the worker. "env" adds more.
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}

// transport makes a fresh transport for one connection.
func (u *upstream) transport() (mcp.Transport, error) {
	switch u.srv.Type {
	case TypeHTTP:
		// The standalone stream carries notifications/tools/list_changed;
		// the SDK goes on without it for a server that offers none.
		return &mcp.StreamableClientTransport{Endpoint: u.srv.URL, HTTPClient: u.httpClient()}, nil
	case TypeSSE:
		return &mcp.SSEClientTransport{Endpoint: u.srv.URL, HTTPClient: u.httpClient()}, nil
	}
	cmd, err := u.command()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lineLogger{logger: u.logger}
	return &mcp.CommandTransport{Command: cmd}, nil
}

func stdioEnv(extra map[string]string) []string {
	var env []string
	for _, k := range inheritedEnv {
		if v, ok := os.LookupEnv(k); ok {
			if _, overridden := extra[k]; !overridden {
				env = append(env, k+"="+v)
			}
		}
	}
	for _, k := range sortedKeys(extra) {
		env = append(env, k+"="+extra[k])
	}
	return env
}

func (u *upstream) httpClient() *http.Client {
	if len(u.srv.Headers) == 0 {
		return http.DefaultClient
	}
	return &http.Client{Transport: &headerTransport{headers: u.srv.Headers, base: http.DefaultTransport}}
}

// headerTransport adds the server's configured headers to every request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}

// lineLogger logs a stdio server's stderr, a line at a time.
type lineLogger struct {
	logger *zap.Logger
	mu     sync.Mutex
	buf    []byte
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimRight(string(l.buf[:i]), "\r"); line != "" {
			l.logger.Info("MCP server stderr", zap.String("line", line))
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a runaway line: log what there is
		l.logger.Info("MCP server stderr", zap.String("line", string(l.buf)))
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

var (
	_ io.Writer         = (*lineLogger)(nil)
	_ http.RoundTripper = (*headerTransport)(nil)
)
