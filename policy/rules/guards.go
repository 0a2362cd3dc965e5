package rules

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/confine"
)

// builtinPathArgs are the path arguments of toolgate's built-in file tools
// (package builtin). They are always confined to the workspace, whatever
// the file says: a file without guards still cannot send read_file,
// list_dir or write_file outside it.
var builtinPathArgs = map[string]string{
	"read_file":  "path",
	"list_dir":   "path",
	"write_file": "path",
}

// guards check path arguments before any rule: those the `guards:`
// section names, and the built-in tools' (builtinPathArgs).
type guards struct {
	root      string   // absolute and clean; "" when no workspace is known
	pathArgs  []string // argument names holding paths; none without a guards section
	protected []string // globs over workspace-relative slash paths
}

// check refuses a call whose path arguments escape the root or name a
// protected path. A call with path arguments to check whose arguments
// cannot be decoded is refused too, since its paths cannot be checked.
func (g *guards) check(in *input) (Verdict, bool) {
	names := g.pathArgs
	builtinArg, isBuiltin := builtinPathArgs[in.call.Tool]
	if isBuiltin && !slices.Contains(names, builtinArg) {
		names = append(slices.Clip(names), builtinArg)
	}
	if len(names) == 0 {
		return Verdict{}, false
	}
	if in.argsErr != nil {
		return g.refuse(in.argsErr.Error() + "; the path guards cannot check them"), true
	}
	args := in.args.(map[string]any)
	for _, name := range names {
		for _, p := range pathValues(args[name]) {
			if reason := g.checkPath(name, p, isBuiltin && name == builtinArg); reason != "" {
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
// (confine.Resolve), so a link cannot lead out of the workspace or into a
// protected path. Without a root, p (made relative by dropping a leading
// "/") is only matched against the protected globs, except that a
// built-in tool's path climbing out with ".." is refused.
func (g *guards) checkPath(arg, p string, builtinTool bool) string {
	if p == "" {
		return ""
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Sprintf("argument %s: path %q contains a NUL byte", arg, p)
	}
	outside := fmt.Sprintf("argument %s: path %q is outside the workspace", arg, p)
	if g.root == "" {
		clean := path.Clean(filepath.ToSlash(p))
		if builtinTool && (clean == ".." || strings.HasPrefix(clean, "../")) {
			return outside
		}
		return g.checkProtected(arg, p, strings.TrimLeft(clean, "/"))
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(g.root, abs)
	}
	rel, inside := confine.Rel(g.root, filepath.Clean(abs))
	if !inside {
		return outside
	}
	if reason := g.checkProtected(arg, p, rel); reason != "" {
		return reason
	}
	realRoot, err := filepath.EvalSymlinks(g.root)
	if err != nil {
		return "" // e.g. the root does not exist: the lexical check stands
	}
	resolved, err := confine.Resolve(realRoot, p)
	if errors.Is(err, confine.ErrOutside) {
		return fmt.Sprintf("argument %s: path %q leads outside the workspace through a symbolic link", arg, p)
	}
	if err != nil {
		return "" // the tool reports what is wrong with the path
	}
	rel, _ = confine.Rel(realRoot, resolved)
	return g.checkProtected(arg, p, rel)
}

// checkFile refuses a file a tool is about to act on, by its real path
// (absolute, no symlinks): outside the root, or protected.
func (g *guards) checkFile(realPath string) error {
	if g.root == "" {
		return nil // no workspace known; the tool confines itself
	}
	realRoot, err := filepath.EvalSymlinks(g.root)
	if err != nil {
		return errors.New("the policy's workspace directory cannot be found")
	}
	rel, inside := confine.Rel(realRoot, realPath)
	if !inside {
		return errors.New("the file is outside the workspace")
	}
	for _, glob := range g.protected {
		if matchPathGlob(glob, rel) {
			return fmt.Errorf("path %q is protected (%s)", rel, glob)
		}
	}
	return nil
}

func (g *guards) checkProtected(arg, p, rel string) string {
	for _, glob := range g.protected {
		if matchPathGlob(glob, rel) {
			return fmt.Sprintf("argument %s: path %q is protected (%s)", arg, p, glob)
		}
	}
	return ""
}

// matchPathGlob matches a clean, workspace-relative slash path against a
// glob anchored at the workspace root, in doublestar's syntax
// (github.com/bmatcuk/doublestar/v4): "**" as a whole segment matches any
// number of segments, "*" and "?" do not cross "/", "[a-z]" and "[!x]"
// (or "[^x]") are classes, "{a,b}" are alternatives, and a backslash
// escapes.
//
// A glob ending in "/**" also matches the directory itself, zero segments
// below it (".git/**" protects ".git", so the directory cannot be renamed
// or removed). doublestar does so for a literal directory but not when
// the last segment before "/**" is a wildcard matching it ("secret*/**"
// against "secret"), so that case is matched once more without the
// trailing "/**" segments.
//
// One difference from a segment-by-segment match remains and is kept: in
// doublestar a negated class ("[!x]") can match a "/" ("a[!x]b" matches
// "a/b"). A protected path only ever refuses, so that can protect more,
// never less.
func matchPathGlob(glob, name string) bool {
	if doublestar.MatchUnvalidated(glob, name) {
		return true
	}
	dir := glob
	for strings.HasSuffix(dir, "/**") {
		dir = strings.TrimSuffix(dir, "/**")
	}
	return dir != glob && doublestar.MatchUnvalidated(dir, name)
}

// validPathGlob reports whether glob is a valid doublestar pattern.
func validPathGlob(glob string) error {
	if glob == "" {
		return errors.New("empty glob")
	}
	if !doublestar.ValidatePattern(glob) {
		return fmt.Errorf("bad glob %q: %w", glob, doublestar.ErrBadPattern)
	}
	return nil
}

// guards reads the `guards:` section; without one, only the built-in
// tools' paths are confined to the workspace.
func (l *loader) guards(n *yaml.Node, workspace string) *guards {
	if n == nil {
		// The built-in tools' paths are confined all the same.
		return &guards{root: workspace}
	}
	f := l.fields(n, "guards", "workspace_root", "path_args", "protected_paths")
	g := &guards{root: workspace, pathArgs: []string{"path"}}
	if rn := f["workspace_root"]; rn != nil {
		if root := l.absDir(rn, l.str(rn, "guards: workspace_root"), l.dir); root != "" {
			g.root = root
		}
	}
	if f["path_args"] != nil {
		g.pathArgs = l.strList(f["path_args"], "guards: path_args")
	}
	for _, glob := range l.strList(f["protected_paths"], "guards: protected_paths") {
		glob = strings.TrimPrefix(glob, "/") // globs are anchored at the root anyway
		if err := validPathGlob(glob); err != nil {
			l.errorf(f["protected_paths"], "guards: protected_paths: %v", err)
			continue
		}
		g.protected = append(g.protected, glob)
	}
	return g
}
