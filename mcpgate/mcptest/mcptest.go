// Package mcptest is a small MCP server for tests of toolgate's MCP
// upstreams: a read-only tool that answers, one that reports an error, a
// destructive one, and one that kills its own process mid-call. A test
// binary serves it over stdio when re-run with EnvStdio set
// (ServeStdioIfAsked), or over HTTP with mcp.NewStreamableHTTPHandler.
// NewReader is another server, whose tool reads any file it is asked
// for: what a sandbox must hold.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// EnvStdio, set to any value, makes ServeStdioIfAsked serve over stdio:
// NewReader when the value is StdioReader, NewServer otherwise.
const EnvStdio = "TOOLGATE_MCPTEST_STDIO"

// StdioReader, as EnvStdio's value, serves NewReader.
const StdioReader = "reader"

// Tool names of the server.
const (
	// Lookup (read-only, idempotent) answers {"key"} with the key, a value
	// and the server's process ID as structuredContent.
	Lookup = "lookup"
	// Fail (read-only) answers with isError and the text "no such key: <key>".
	Fail = "fail"
	// Erase (destructive) answers "erased".
	Erase = "erase"
	// Crash (read-only, not idempotent) exits the process mid-call.
	Crash = "crash"
	// ReadFile (read-only; NewReader's) answers {"path"} with the file's
	// contents, or isError with the reason it could not read it.
	ReadFile = "read_file"
)

// LookupSchema is the input schema of Lookup (and Fail).
const LookupSchema = `{"type":"object","properties":{"key":{"type":"string","description":"what to look up"}},"required":["key"],"additionalProperties":false}`

// LookupResult is Lookup's structuredContent.
type LookupResult struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	PID   int    `json:"pid"`
}

// NewServer returns the test server.
func NewServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "toolgate-mcptest", Version: "1"}, nil)
	no := false
	yes := true
	s.AddTool(&mcp.Tool{
		Name:        Lookup,
		Description: "Look a key up.\nAnswers with its value.",
		InputSchema: json.RawMessage(LookupSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no, Title: "Look up"},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		key := keyOf(req)
		res := LookupResult{Key: key, Value: "value of " + key, PID: os.Getpid()}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Value}}, StructuredContent: res}, nil
	})
	s.AddTool(&mcp.Tool{
		Name:        Fail,
		Description: "Look a key up that is never there.",
		InputSchema: json.RawMessage(LookupSchema),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no such key: " + keyOf(req)}}}, nil
	})
	s.AddTool(&mcp.Tool{
		Name:        Erase,
		Description: "Erase everything.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "erased"}}}, nil
	})
	addCrash(s)
	return s
}

func addCrash(s *mcp.Server) {
	s.AddTool(&mcp.Tool{
		Name:        Crash,
		Description: "Exit the server's process in the middle of the call.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		fmt.Fprintln(os.Stderr, "mcptest: crashing on purpose")
		os.Exit(3)
		return nil, nil
	})
}

// NewReader returns a server whose tool ReadFile reads whatever path it
// is given, with no checks of its own, beside Crash.
func NewReader() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "toolgate-mcptest-reader", Version: "1"}, nil)
	no := false
	s.AddTool(&mcp.Tool{
		Name:        ReadFile,
		Description: "Read a file.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			Path string `json:"path"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		b, err := os.ReadFile(args.Path)
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
	})
	addCrash(s)
	return s
}

func keyOf(req *mcp.CallToolRequest) string {
	var args struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal(req.Params.Arguments, &args)
	return args.Key
}

// ServeStdioIfAsked serves NewServer (or NewReader) over stdin and
// stdout, then exits, when EnvStdio is set; otherwise it returns at once.
// Call it early in a test binary so that it doubles as a stdio upstream:
// from init, or, where the test binary also plays toolgate's sandbox
// role, from TestMain right after sandbox.Enter (an init would serve
// before the sandbox confines it).
func ServeStdioIfAsked() {
	v := os.Getenv(EnvStdio)
	if v == "" {
		return
	}
	srv := NewServer()
	if v == StdioReader {
		srv = NewReader()
	}
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
