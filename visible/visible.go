// Package visible renders text for a person so that what they see is what
// it holds: control characters, format characters (bidi overrides and
// isolates, zero-width characters, the byte-order mark, tag characters)
// and line or paragraph separators, which a terminal or a browser would
// obey or hide, are shown as escapes instead; and a cut says how much it
// left out. It is for display only: what runs is never escaped.
//
// The escapes are Go's and JSON's: \r, \b, \f, \t and \n (in a single line);
// \x1b for the other C0 controls, DEL and bytes that are not UTF-8;
// \u202e for a rune of the BMP (C1 controls, format characters, U+2028,
// U+2029, invisible fillers) and \U000e0041 above it. Letters, accents,
// CJK, emoji (their zero-width joiners included) are left as they are.
package visible

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text is s for display across lines: newlines and tabs kept, everything
// else a screen would obey or hide escaped.
func Text(s string) string { return render(s, true) }

// Line is s for display on one line: Text with newlines and tabs escaped
// too.
func Line(s string) string { return render(s, false) }

// JSON is JSON text for display: as Text, except that a rune is escaped
// the way JSON escapes it (\u202e, a surrogate pair above the BMP) and a
// tab or carriage return between tokens becomes a space, so that valid
// JSON stays valid JSON of the same value; other text is rendered as
// Text.
func JSON(s string) string {
	var b strings.Builder
	Each(s, true, func(part string, _ bool) { b.WriteString(part) })
	return b.String()
}

// Hidden counts the characters of s that Text escapes.
func Hidden(s string) int {
	n := 0
	Each(s, false, func(_ string, escaped bool) {
		if escaped {
			n++
		}
	})
	return n
}

// Note says, in parentheses, how many characters of s are shown escaped;
// "" when none are.
func Note(s string) string {
	switch n := Hidden(s); n {
	case 0:
		return ""
	case 1:
		return "(it holds 1 control or invisible character, shown escaped)"
	default:
		return fmt.Sprintf("(it holds %d control or invisible characters, shown escaped)", n)
	}
}

// Each calls f with s in order, as Text (or JSON, when asJSON) renders
// it: a run of plain text (escaped false), or one escape (escaped true).
// A page uses it to mark the escapes apart from text that merely looks
// like one.
func Each(s string, asJSON bool, f func(part string, escaped bool)) {
	each(s, true, asJSON && json.Valid([]byte(s)), f)
}

func render(s string, multiline bool) string {
	var b strings.Builder
	each(s, multiline, false, func(part string, _ bool) { b.WriteString(part) })
	return b.String()
}

func each(s string, multiline, jsonEsc bool, f func(string, bool)) {
	plain := 0 // start of the current run of plain text
	var prev rune
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		esc := ""
		switch {
		case r == utf8.RuneError && size == 1:
			esc = fmt.Sprintf(`\x%02x`, s[i])
		case r == '\n' && multiline:
		case jsonEsc && (r == '\t' || r == '\r'): // only between tokens in valid JSON
			esc = " "
		case r == '\t' && multiline:
			// Kept across lines: a tab only moves on, it hides nothing, and
			// escaping the indentation of every diff would teach approvers
			// to overlook the count of what is escaped.
		case hides(r) && !(r == zwj && joinsEmoji(prev, s[i+size:])):
			esc = escape(r, jsonEsc)
		}
		if esc != "" {
			if plain < i {
				f(s[plain:i], false)
			}
			f(esc, true)
			plain = i + size
		}
		prev = r
		i += size
	}
	if plain < len(s) {
		f(s[plain:], false)
	}
}

// zwj is the zero-width joiner, which also builds emoji such as 👩‍💻.
const zwj = '\u200d'

// hides reports whether a screen would obey r or not show it.
func hides(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0: // C0, DEL, C1
		return true
	case unicode.Is(unicode.Cf, r), r == '\u2028', r == '\u2029':
		return true
	}
	switch r { // blank letters: Hangul fillers, the combining grapheme joiner
	case '\u115f', '\u1160', '\u3164', '\uffa0', '\u034f':
		return true
	}
	return false
}

// joinsEmoji reports whether a zero-width joiner after prev and before
// rest sits inside an emoji sequence: a pictograph (or its variation
// selector or skin tone) on either side.
func joinsEmoji(prev rune, rest string) bool {
	next, _ := utf8.DecodeRuneInString(rest)
	return emojiPart(prev) && unicode.Is(unicode.So, next)
}

func emojiPart(r rune) bool {
	return unicode.Is(unicode.So, r) || r == '\ufe0f' || (r >= 0x1f3fb && r <= 0x1f3ff)
}

func escape(r rune, jsonEsc bool) string {
	switch r {
	case '\t':
		return `\t`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	}
	switch {
	case r < 0x80 && !jsonEsc:
		return fmt.Sprintf(`\x%02x`, r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	case jsonEsc:
		r1, r2 := surrogates(r)
		return fmt.Sprintf(`\u%04x\u%04x`, r1, r2)
	}
	return fmt.Sprintf(`\U%08x`, r)
}

func surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + (r>>10)&0x3ff, 0xdc00 + r&0x3ff
}

// Cut shortens s to at most n runes, ending in a mark that says how many
// it left out: "… [1234 more characters]". s is returned whole when it
// fits.
func Cut(s string, n int) string {
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s
	}
	i, kept := 0, 0
	for kept < n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		kept++
	}
	return s[:i] + CutMark(total-kept)
}

// CutMark is the mark that ends a text cut short by n characters.
func CutMark(n int) string {
	if n == 1 {
		return "… [1 more character]"
	}
	return fmt.Sprintf("… [%d more characters]", n)
}
