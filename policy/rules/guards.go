package rules

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/builtin"
)

// guards are the `guards:` section: checks on path arguments that run
// before any rule.
type guards struct {
	root      string   // absolute and clean; "" when no workspace is known
	pathArgs  []string // argument names holding paths
	protected []string // globs over workspace-relative slash paths
}

// check refuses a call whose path arguments escape the root or name a
// protected path. A call whose arguments cannot be decoded is refused too,
// since its paths cannot be checked.
func (g *guards) check(in *input) (Verdict, bool) {
	if g == nil {
		return Verdict{}, false
	}
	if in.argsErr != nil {
		return g.refuse(in.argsErr.Error() + "; the path guards cannot check them"), true
	}
	args := in.args.(map[string]any)
	for _, name := range g.pathArgs {
		for _, p := range pathValues(args[name]) {
			if reason := g.checkPath(name, p); reason != "" {
				return g.refuse(reason), true
			}
		}
	}
	return Verdict{}, false
}

func (g *guards) refuse(reason string) Verdict {
	return Verdict{Action: ActionDeny, Rule: RuleGuards, Reason: reason}
}

// pathValues returns the strings of a path argument: a string, or the
// strings of a list.
func pathValues(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// checkPath returns why p may not be used, or "". With a root, p is judged
// lexically and, when the root exists, once more after resolving symlinks
// (builtin.Workspace.Resolve), so a link cannot lead out of the workspace
// or into a protected path. Without a root, p (made relative by dropping a
// leading "/") is only matched against the protected globs.
func (g *guards) checkPath(arg, p string) string {
	if p == "" {
		return ""
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Sprintf("argument %s: path %q contains a NUL byte", arg, p)
	}
	if g.root == "" {
		rel := strings.TrimLeft(path.Clean(filepath.ToSlash(p)), "/")
		return g.checkProtected(arg, p, rel)
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(g.root, abs)
	}
	rel, inside := relativeTo(g.root, filepath.Clean(abs))
	if !inside {
		return fmt.Sprintf("argument %s: path %q is outside the workspace", arg, p)
	}
	if reason := g.checkProtected(arg, p, rel); reason != "" {
		return reason
	}
	resolved, err := builtin.Workspace{Root: g.root}.Resolve(p)
	if errors.Is(err, builtin.ErrOutsideWorkspace) {
		return fmt.Sprintf("argument %s: path %q leads outside the workspace through a symbolic link", arg, p)
	}
	if err != nil {
		return "" // e.g. the root does not exist: the lexical check stands
	}
	realRoot, err := filepath.EvalSymlinks(g.root)
	if err != nil {
		return ""
	}
	if rel, inside := relativeTo(realRoot, resolved); inside {
		return g.checkProtected(arg, p, rel)
	}
	return ""
}

func (g *guards) checkProtected(arg, p, rel string) string {
	for _, glob := range g.protected {
		if matchPathGlob(glob, rel) {
			return fmt.Sprintf("argument %s: path %q is protected (%s)", arg, p, glob)
		}
	}
	return ""
}

// relativeTo returns the clean absolute p relative to root with slashes,
// and whether p is root or below it.
func relativeTo(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// matchPathGlob matches a slash path against a glob anchored at the
// workspace root: "**" as a whole segment matches any number of segments
// (zero included, so ".git/**" matches ".git" itself); other segments use
// path.Match, where "*" does not cross "/".
func matchPathGlob(glob, name string) bool {
	return matchSegments(strings.Split(glob, "/"), strings.Split(name, "/"))
}

func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for len(pat) > 0 && pat[0] == "**" {
				pat = pat[1:]
			}
			if len(pat) == 0 {
				return true
			}
			for i := range len(name) + 1 {
				if matchSegments(pat, name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// validPathGlob reports whether every segment of glob is a valid pattern.
func validPathGlob(glob string) error {
	if glob == "" {
		return errors.New("empty glob")
	}
	for _, seg := range strings.Split(glob, "/") {
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("bad glob %q: %w", glob, err)
		}
	}
	return nil
}
