package wiretest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// CheckDocExamples checks the examples of a protocol document (markdown)
// against the server of cfg and the transcripts in transcriptsDir:
//
//   - An exchange, a fenced block of "→ frame" and "← frame" lines, is
//     run: the → frames are sent, in order, on one connection (the blocks
//     of the document follow each other on it: the first is the
//     handshake), and every ← frame must match a distinct frame the server
//     sends, within cfg.Timeout (in any order: answers and notifications
//     interleave as they may).
//   - A JSON example (a ```json block: a result, params, an object of the
//     protocol) must have the shape of an object some transcript sends or
//     receives, at any depth: the same keys, recursively (values are not
//     compared). The transcripts' outputs are what the server answers, so
//     a field renamed, added or removed on either side fails here.
//
// In both, "…" is the document's ellipsis: "{…}" or a string "…" stands for
// any value, a trailing ", …" in an object for more keys, in an array for
// more elements; a UUID matches any UUID; a string ending in "…" matches
// any string.
func CheckDocExamples(t *testing.T, mdPath, transcriptsDir string, cfg TranscriptConfig) {
	t.Helper()
	doc, err := os.ReadFile(mdPath)
	if err != nil {
		t.Fatal(err)
	}
	exchanges, shapes := docBlocks(string(doc))
	if len(exchanges) == 0 || len(shapes) == 0 {
		t.Fatalf("%s: %d exchanges and %d JSON examples found; the block syntax changed?", mdPath, len(exchanges), len(shapes))
	}
	t.Run("exchanges", func(t *testing.T) {
		s := newTranscript(t, cfg)
		c := s.connByName("c")
		for _, ex := range exchanges {
			runExchange(t, c, ex, s.cfg)
		}
	})
	t.Run("shapes", func(t *testing.T) {
		corpus := transcriptObjects(t, transcriptsDir)
		for _, sh := range shapes {
			p, err := parsePattern(sh.text)
			if err != nil {
				t.Errorf("%s:%d: the JSON example does not parse: %v", mdPath, sh.line, err)
				continue
			}
			found := false
			for _, o := range corpus {
				if shapeMatch(p, o) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s:%d: no frame of the transcripts in %s has the shape of this example (add a transcript that sends or receives it, or fix the example):\n%s", mdPath, sh.line, transcriptsDir, sh.text)
			}
		}
	})
}

type docBlock struct {
	line int
	text string
}

// docBlocks returns the document's exchanges (their lines) and JSON
// examples.
func docBlocks(doc string) (exchanges [][]docBlock, shapes []docBlock) {
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		start := i + 1
		j := start
		for j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```") {
			j++
		}
		body := lines[start:j]
		i = j
		if fence == "```json" {
			shapes = append(shapes, docBlock{line: start + 1, text: strings.Join(body, "\n")})
			continue
		}
		var ex []docBlock
		for k, l := range body {
			if strings.HasPrefix(l, "→ ") || strings.HasPrefix(l, "← ") {
				ex = append(ex, docBlock{line: start + k + 1, text: l})
			}
		}
		if len(ex) > 0 {
			exchanges = append(exchanges, ex)
		}
	}
	return exchanges, shapes
}

func runExchange(t *testing.T, c *tconn, ex []docBlock, cfg TranscriptConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	type want struct {
		docBlock
		p any
	}
	var wants []want
	for _, l := range ex {
		frame := strings.TrimSpace(l.text[len("→ "):])
		if strings.HasPrefix(l.text, "→ ") {
			if err := c.core.WriteRaw(ctx, []byte(frame)); err != nil {
				t.Fatalf("line %d: send: %v", l.line, err)
			}
			continue
		}
		p, err := parsePattern(frame)
		if err != nil {
			t.Fatalf("line %d: %v", l.line, err)
		}
		wants = append(wants, want{l, p})
	}
	var unmatched []want
	err := c.waitPile(ctx, func(fs []frame) bool {
		used := make([]bool, len(fs))
		unmatched = unmatched[:0]
		for _, w := range wants {
			ok := false
			for i, f := range fs {
				var v any
				if !used[i] && json.Unmarshal(f.raw, &v) == nil && valueMatch(w.p, v) {
					used[i], ok = true, true
					break
				}
			}
			if !ok {
				unmatched = append(unmatched, w)
			}
		}
		return len(unmatched) == 0
	})
	got := c.takePile()
	if err != nil {
		var b strings.Builder
		for _, w := range unmatched {
			fmt.Fprintf(&b, "  line %d: %s\n", w.line, w.text)
		}
		b.WriteString("received:\n")
		for _, f := range got {
			fmt.Fprintf(&b, "  %s\n", f.raw)
		}
		t.Fatalf("the server's frames do not match the document's (%v); unmatched:\n%s", err, b.String())
	}
}

var (
	objEllipsis     = regexp.MustCompile(`,\s*…\s*}`)
	arrEllipsis     = regexp.MustCompile(`,\s*…\s*]`)
	valueEllipsis   = regexp.MustCompile(`\{…\}`)
	barePlaceholder = regexp.MustCompile(`:(<[a-z]+>)([,}\]])`)
	uuidOnly        = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// parsePattern reads a document example: JSON with the ellipses above.
func parsePattern(s string) (any, error) {
	s = valueEllipsis.ReplaceAllString(s, `"…"`)
	s = objEllipsis.ReplaceAllString(s, `, "…": "…"}`)
	s = arrEllipsis.ReplaceAllString(s, `, "…"]`)
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, err
	}
	return v, nil
}

// valueMatch: v matches the pattern p (values compared).
func valueMatch(p, v any) bool { return match(p, v, true) }

// shapeMatch: o has the keys of the pattern p, recursively (values not
// compared; nested objects and arrays compared where both sides have one).
func shapeMatch(p, o any) bool { return match(p, o, false) }

// match is valueMatch (values) or shapeMatch (!values). Objects: the same
// keys (more allowed after a trailing "…"), each member matching. Arrays:
// element by element (values), or each pattern object matching some element
// (shapes). Scalars: equal, with the ellipses and UUIDs above (values), or
// anything (shapes).
func match(p, v any, values bool) bool {
	switch p := p.(type) {
	case map[string]any:
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		_, more := p["…"]
		for k, pv := range p {
			if k == "…" {
				continue
			}
			mv, ok := m[k]
			if !ok {
				return false
			}
			if !values && mv == nil {
				continue // a null where the example shows an object or array
			}
			if !match(pv, mv, values) {
				return false
			}
		}
		return more || len(m) == len(p)
	case []any:
		a, ok := v.([]any)
		if !ok {
			return false
		}
		if !values {
			for _, pe := range p {
				if _, isObj := pe.(map[string]any); !isObj {
					continue
				}
				found := len(a) == 0
				for _, e := range a {
					found = found || match(pe, e, false)
				}
				if !found {
					return false
				}
			}
			return true
		}
		n := len(p)
		more := n > 0 && p[n-1] == "…"
		if more {
			n--
		}
		if len(a) < n || (!more && len(a) != n) {
			return false
		}
		for i := 0; i < n; i++ {
			if !match(p[i], a[i], true) {
				return false
			}
		}
		return true
	case string:
		if !values || p == "…" {
			return true
		}
		s, ok := v.(string)
		switch {
		case !ok:
			return false
		case strings.HasSuffix(p, "…"):
			return true
		case uuidOnly.MatchString(p):
			return uuidOnly.MatchString(s)
		}
		return s == p
	}
	return !values || fmt.Sprint(p) == fmt.Sprint(v)
}

// transcriptObjects returns every JSON object of the transcripts' frames
// (inputs and expected outputs), at any depth.
func transcriptObjects(t *testing.T, dir string) []any {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in %s (%v)", dir, err)
	}
	var out []any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			out = append(out, v)
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "{") {
				continue
			}
			// Normalised values (<pid>, <bool>) are not JSON: quoted here.
			line = barePlaceholder.ReplaceAllString(line, `:"$1"$2`)
			v, err := parsePattern(line)
			if err != nil {
				t.Errorf("%s: a frame that is not JSON: %v\n%s", f, err, line)
				continue
			}
			walk(v)
		}
	}
	return out
}
