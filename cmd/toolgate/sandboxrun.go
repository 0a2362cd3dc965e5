package main

import (
	"fmt"

	"github.com/toolgate/toolgate/sandbox"
)

// toolsConfinement says in words how the processes toolgate starts for
// tools (the shell's commands, MCP stdio servers) run, for the log, dev's
// banner and /readyz; confined is false when they run unconfined or not
// at all.
func toolsConfinement(unsandboxed bool) (words string, confined bool) {
	abi := sandbox.ABI()
	switch {
	case unsandboxed:
		return "Tools run UNSANDBOXED (--unsandboxed-tools): a shell command or MCP server reaches everything this process's user reaches, toolgate's keys included", false
	case abi == 0:
		return "This kernel offers no Landlock: the shell tool and MCP stdio servers refuse to run (--unsandboxed-tools runs them unconfined)", false
	}
	words = fmt.Sprintf("Tools run sandboxed (Landlock ABI %d): a shell command reads and writes its workspace only, an MCP stdio server its roots", abi)
	if _, small, err := sandbox.Launcher(); err == nil && !small {
		words += "; the sandbox's helper is toolgate's own binary (slow to start, 160 MB each): put " + sandbox.LauncherName + " beside toolgate (go install ./cmd/" + sandbox.LauncherName + ")"
	}
	return words, true
}

// logSandbox says how the tools' processes run: confined, with which
// Landlock ABI, or not, and why.
func (a *app) logSandbox(unsandboxed bool) {
	words, confined := toolsConfinement(unsandboxed)
	if !confined {
		a.logger.Warn(words)
		return
	}
	a.logger.Info(words)
}

// toolsWords is toolsConfinement's words alone.
func toolsWords(unsandboxed bool) string {
	words, _ := toolsConfinement(unsandboxed)
	return words
}
