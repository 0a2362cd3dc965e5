package main

import (
	"os"
	"path/filepath"
	"strings"
)

// ownFiles are toolgate's own files and directories as this process
// knows them: keys, tokens, policy, databases, state. No sandbox grant (a
// rule's, an MCP server's roots) may reach one (sandbox.Policy.Overlap).
// In dev, everything in the data dir but the workspace is toolgate's, so
// a grant of the data dir itself, or of a directory that holds it, is
// refused, while the workspace inside it stays the tools'.
func (a *app) ownFiles(p processes) []string {
	own := []string{a.conn.keys.file, a.conn.tlsKey, a.conn.door.file, p.hookStateDir}
	own = append(own, p.own...)
	if f := p.worker; f != nil {
		own = append(own, f.policyFile, f.mcpFile, f.doors.file)
	}
	if l := p.ledger; l != nil {
		own = append(own, localFile(l.dsn), l.keyFile, l.checkpoints)
	}
	if s := p.sessions; s != nil {
		own = append(own, localFile(s.dsn))
	}
	if p.dataDir != "" {
		workspace := ""
		if p.worker != nil {
			workspace, _ = filepath.Abs(p.worker.workspace)
		}
		// What dev keeps there, made now or later, and whatever else is there.
		for _, name := range []string{"temporal.db", "ledger.db", "ledger.key", devKeysFile, devDoorKeyFile, devDoorsFile, "tokens.json", "http-hooks"} {
			own = append(own, filepath.Join(p.dataDir, name))
		}
		entries, _ := os.ReadDir(p.dataDir)
		for _, e := range entries {
			path, _ := filepath.Abs(filepath.Join(p.dataDir, e.Name()))
			if path != workspace {
				own = append(own, path)
			}
		}
	}
	out := own[:0]
	for _, f := range own {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// localFile is a database setting's file, or "" for a URL or "off".
func localFile(dsn string) string {
	if dsn == "" || dsn == ledgerOff || strings.Contains(dsn, "://") || dsn == sessionsMemory {
		return ""
	}
	return strings.TrimPrefix(dsn, "file:")
}
