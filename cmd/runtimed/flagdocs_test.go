package main_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// serveFlagDefaults runs `runtimed serve -h` and returns each flag's
// default as the flag package prints it ("" for a zero value), unquoted.
func serveFlagDefaults(t *testing.T) map[string]string {
	t.Helper()
	out, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	flags := map[string]string{}
	var name string
	defRE := regexp.MustCompile(`\(default (.*)\)$`)
	for _, l := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(l, "  -"):
			name = "--" + strings.Fields(l)[0][1:]
			flags[name] = ""
		case strings.HasPrefix(l, "    \t") && name != "":
			if m := defRE.FindStringSubmatch(l); m != nil {
				flags[name] = strings.Trim(m[1], `"`)
			}
		}
	}
	if len(flags) < 20 {
		t.Fatalf("runtimed serve -h listed %d flags:\n%s", len(flags), out)
	}
	return flags
}

// The flag tables of README.md and docs/operations.md state the defaults
// the binary has: a backquoted value is the flag's default, "derived",
// "none" and "off" a zero one (resolved at start-up, absent, false), "on"
// true. Every flag they name exists, and README lists every flag.
func TestFlagTablesMatchTheBinary(t *testing.T) {
	t.Parallel()
	flags := serveFlagDefaults(t)
	for _, doc := range []struct{ path, sep string }{{"../../README.md", " / "}, {"../../docs/operations.md", ", "}} {
		b, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			cells := strings.Split(l, "|")
			if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
				continue
			}
			names := strings.Split(strings.TrimSpace(cells[1]), doc.sep)
			defs := strings.Split(strings.TrimSpace(cells[2]), doc.sep)
			for i, n := range names {
				n = strings.Trim(n, "`")
				listed[n] = true
				code, ok := flags[n]
				if !ok {
					t.Errorf("%s: %s is not a flag of runtimed serve", doc.path, n)
					continue
				}
				d := defs[min(i, len(defs)-1)]
				if msg := checkDefault(d, code); msg != "" {
					t.Errorf("%s: %s: the table says %q, the binary's default is %q: %s", doc.path, n, d, code, msg)
				}
			}
		}
		if doc.path == "../../README.md" {
			for n := range flags {
				if !listed[n] {
					t.Errorf("README's flag table does not list %s", n)
				}
			}
		}
	}
}

func checkDefault(doc, code string) string {
	switch {
	case strings.HasPrefix(doc, "`"):
		if v := strings.Trim(doc, "`"); v != code {
			return "not the same value"
		}
	case strings.HasPrefix(doc, "derived"), strings.HasPrefix(doc, "none"), doc == "off":
		if code != "" {
			return "the table says it has no fixed default"
		}
	case doc == "on":
		if code != "true" {
			return "the table says on"
		}
	default:
		return "a default cell must be a backquoted value, derived, none, off or on"
	}
	return ""
}
