// Package witness asks independent witnesses to cosign the ledger's
// checkpoints (c2sp.org/tlog-witness) and checks their cosignatures
// (c2sp.org/tlog-cosignature). A witness cosigns a checkpoint only with a
// consistency proof from the last tree it cosigned for the log, so a log
// that was rolled back or forked after a witness saw it never gets that
// witness's cosignature again: a verifier that requires cosignatures
// cannot be shown a split view unless the witnesses collude.
package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Witness is one witness: where it listens and the key it cosigns with.
type Witness struct {
	// URL is the witness's base URL; add-checkpoint is under it.
	URL *url.URL
	// Verifier checks its cosignatures.
	Verifier note.Verifier
	hc       *http.Client
}

// requestTimeout bounds one add-checkpoint request: a witness answers at
// once or is treated as down until the next try.
const requestTimeout = 10 * time.Second

// Parse reads a witness given as VKEY@URL: its verifier key
// (c2sp.org/signed-note, a cosignature/v1 or Ed25519 key) and the base URL
// it listens at, e.g. witness.example/w1+5c8fa0d2+BG...@https://w1.example/.
func Parse(spec string) (*Witness, error) {
	vkey, rawURL, ok := strings.Cut(spec, "@")
	if !ok || vkey == "" || rawURL == "" {
		return nil, errors.New("witness: want VKEY@URL (its verifier key, then its base URL)")
	}
	v, err := NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("witness %s: %q is not an http(s) URL", v.Name(), rawURL)
	}
	return &Witness{URL: u, Verifier: v, hc: &http.Client{Timeout: requestTimeout}}, nil
}

// Name is the witness's name, as its cosignatures carry it.
func (w *Witness) Name() string { return w.Verifier.Name() }

// ConflictError is a witness's 409: it knows the log at Size, not at the
// old size it was sent a proof from.
type ConflictError struct{ Size int64 }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("the witness knows the log at size %d", e.Size)
}

// RefusedError is a witness's refusal of the checkpoint itself: 403 (it
// does not know the log or its key), 422 (the consistency proof does not
// prove the new tree extends the one it knows) or 400.
type RefusedError struct {
	Status  int
	Message string
}

func (e *RefusedError) Error() string {
	switch e.Status {
	case http.StatusUnprocessableEntity:
		return "the witness refused the consistency proof: the tree does not extend the one it cosigned (" + e.Message + ")"
	case http.StatusForbidden:
		return "the witness does not know this log or its key; add it (witnessctl add-log and add-key) (" + e.Message + ")"
	}
	return fmt.Sprintf("the witness refused the request (HTTP %d: %s)", e.Status, e.Message)
}

// Add sends checkpoint (the log's signed note) with a consistency proof
// from the tree of oldSize the witness last cosigned, and returns its
// cosignature as note signature lines, checked against its key.
func (w *Witness) Add(ctx context.Context, oldSize int64, proof tlog.TreeProof, checkpoint []byte) ([]byte, error) {
	var body bytes.Buffer
	fmt.Fprintf(&body, "old %d\n", oldSize)
	for _, h := range proof {
		fmt.Fprintf(&body, "%s\n", h)
	}
	body.WriteString("\n")
	body.Write(checkpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL.JoinPath("add-checkpoint").String(), &body)
	if err != nil {
		return nil, err
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", w.Name(), err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("witness %s: read its answer: %w", w.Name(), err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		size, err := strconv.ParseInt(strings.TrimSpace(string(answer)), 10, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("witness %s: a conflict without a tree size", w.Name())
		}
		return nil, &ConflictError{Size: size}
	case http.StatusForbidden, http.StatusUnprocessableEntity, http.StatusBadRequest:
		return nil, &RefusedError{Status: resp.StatusCode, Message: strings.TrimSpace(string(answer))}
	default:
		return nil, fmt.Errorf("witness %s: HTTP %d", w.Name(), resp.StatusCode)
	}
	lines, err := w.cosignature(checkpoint, answer)
	if err != nil {
		return nil, fmt.Errorf("witness %s: %w", w.Name(), err)
	}
	return lines, nil
}

// cosignature keeps the lines of answer that are this witness's valid
// signature of checkpoint's text.
func (w *Witness) cosignature(checkpoint, answer []byte) ([]byte, error) {
	text, _, ok := bytes.Cut(checkpoint, []byte("\n\n"))
	if !ok {
		return nil, errors.New("the checkpoint sent is not a signed note")
	}
	var out []byte
	for _, line := range strings.SplitAfter(string(answer), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") {
			line += "\n"
		}
		msg := append(append(append([]byte(nil), text...), "\n\n"...), line...)
		if _, err := note.Open(msg, note.VerifierList(w.Verifier)); err == nil {
			out = append(out, line...)
		}
	}
	if out == nil {
		return nil, errors.New("its answer holds no valid cosignature of the checkpoint")
	}
	return out, nil
}
