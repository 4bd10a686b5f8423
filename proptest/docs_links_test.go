package proptest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocLinks: every relative link in the repository's Markdown files
// (README, ARCHITECTURE, BENCHMARKS, docs/) names a file or directory of
// the repository, and every #anchor into a Markdown file names one of its
// headings. A newcomer follows only these documents.
func TestDocLinks(t *testing.T) {
	files := []string{"../README.md", "../ARCHITECTURE.md", "../BENCHMARKS.md"}
	more, _ := filepath.Glob("../docs/*.md")
	files = append(files, more...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) && !strings.Contains(f, "README") {
				continue
			}
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			full := f
			if path != "" {
				full = filepath.Join(filepath.Dir(f), path)
				rel, _ := filepath.Rel("..", full)
				if strings.HasPrefix(rel, "..") {
					t.Errorf("%s: link %q leaves the repository", f, target)
					continue
				}
				if _, err := os.Stat(full); err != nil {
					t.Errorf("%s: link %q: %v", f, target, err)
					continue
				}
			}
			checked++
			if anchor != "" && strings.HasSuffix(full, ".md") {
				if !hasAnchor(t, full, anchor) {
					t.Errorf("%s: link %q: no heading with anchor #%s in %s", f, target, anchor, full)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("only %d links checked: the scan is broken", checked)
	}
}

// hasAnchor reports whether a heading of the Markdown file has the
// GitHub-style anchor: lower case, punctuation but '-' and '_' dropped,
// spaces to '-'.
func hasAnchor(t *testing.T, file, anchor string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var sb strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				sb.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				sb.WriteRune(r)
			}
		}
		if sb.String() == anchor {
			return true
		}
	}
	return false
}
