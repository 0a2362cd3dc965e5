// Package devserver embeds a Temporal server (frontend, history, matching
// and worker services in one process) backed by a SQLite file, the way the
// Temporal CLI's dev server does, for `toolgate dev` and for integration
// tests.
//
// Only the binary and tests that need a live server import this package:
// it links the whole server (~200 MB binary, ~10 s of linking per test
// binary), so programs that only use toolgate's client must not import it.
package devserver
