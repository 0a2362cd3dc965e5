// Package docs holds toolgate's documentation; its test checks that every
// relative link of the docs and the README finds its file, and a link to a
// heading (#anchor), in a page or from one page to another, finds that
// heading as GitHub renders it.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// pages are the Markdown files whose links are checked, relative to this
// directory.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(docs, "../README.md", "../CHANGELOG.md")
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// A Markdown link's target: ](target) or ](target "title").
	link     = regexp.MustCompile(`\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	mdLink   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// slug is the anchor GitHub gives a heading's text: the rendered text in
// lower case, without punctuation other than - and _, spaces as hyphens.
func slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	text = strings.NewReplacer("`", "", "**", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// page is one Markdown file: its anchors, and its links with the line
// each is on.
type page struct {
	anchors map[string]bool
	links   []pageLink
}

type pageLink struct {
	line   int
	target string
}

func readPage(path string) (page, error) {
	f, err := os.Open(path)
	if err != nil {
		return page{}, err
	}
	defer f.Close()
	p := page{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			// GitHub numbers a repeated heading's anchor: x, x-1, x-2.
			if k := seen[s]; k > 0 {
				p.anchors[fmt.Sprintf("%s-%d", s, k)] = true
			} else {
				p.anchors[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if m[1] != "" && !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
				p.links = append(p.links, pageLink{n, m[1]})
			}
		}
	}
	return p, sc.Err()
}

func TestRelativeLinksFindTheirFileAndHeading(t *testing.T) {
	read := map[string]page{}
	load := func(path string) (page, error) {
		path = filepath.Clean(path)
		if p, ok := read[path]; ok {
			return p, nil
		}
		p, err := readPage(path)
		if err == nil {
			read[path] = p
		}
		return p, err
	}
	for _, path := range pages(t) {
		p, err := load(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.links {
			file, anchor, hasAnchor := strings.Cut(l.target, "#")
			target := p
			if file != "" {
				file = filepath.Join(filepath.Dir(path), file)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: the link %s finds no file", path, l.line, l.target)
					continue
				}
				if !hasAnchor || !strings.HasSuffix(file, ".md") {
					continue
				}
				if target, err = load(file); err != nil {
					t.Errorf("%s:%d: the link %s: %v", path, l.line, l.target, err)
					continue
				}
			}
			if !target.anchors[anchor] {
				t.Errorf("%s:%d: the link %s finds no heading #%s", path, l.line, l.target, anchor)
			}
		}
	}
}

func TestSlugIsGitHubs(t *testing.T) {
	for text, want := range map[string]string{
		"Exit statuses of `call` and `status`":       "exit-statuses-of-call-and-status",
		"Sign-in with your identity provider (OIDC)": "sign-in-with-your-identity-provider-oidc",
		"What `--by` records: who, not_a_secret":     "what---by-records-who-not_a_secret",
		"Okta, Entra ID & Keycloak":                  "okta-entra-id--keycloak",
		"[Links](x.md) count by their text":          "links-count-by-their-text",
	} {
		if got := slug(text); got != want {
			t.Errorf("slug(%q) = %q, want %q", text, got, want)
		}
	}
}
