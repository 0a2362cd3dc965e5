// Command toolgate-sandbox is the small program toolgate starts to run a
// tool's process (a shell command, an MCP stdio server) in its Landlock
// sandbox: it confines itself as toolgate says, then becomes the tool's
// program. Install it beside toolgate (go install does); without it
// toolgate starts its own, much larger, binary in this role.
package main

import (
	"fmt"
	"os"

	"github.com/toolgate/toolgate/sandbox"
)

func main() {
	sandbox.Enter() // never returns when toolgate started it
	fmt.Fprintln(os.Stderr, "toolgate-sandbox: toolgate starts this program to run a tool in its sandbox; it takes no commands of its own")
	os.Exit(2)
}
