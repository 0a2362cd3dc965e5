// Command mcp-reader is an MCP stdio server whose tool read_file reads
// whatever path it is given, with no checks of its own (mcptest.NewReader):
// the integration tests' proof that the sandbox, not the server, keeps
// toolgate's files out of an MCP server's reach.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/mcpgate/mcptest"
)

func main() {
	if err := mcptest.NewReader().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcp-reader:", err)
		os.Exit(1)
	}
}
