package tokens

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseNamed(t *testing.T) {
	tab, err := Parse([]byte("# operators\nalice s3cret-a\n\n  bob   s3cret-b  \n"))
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]string{"s3cret-a": "alice", "s3cret-b": "bob"} {
		if name, ok := tab.Lookup(tok); !ok || name != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tok, name, ok, want)
		}
	}
	for _, bad := range []string{"", "s3cret", "alice", "s3cret-a ", "s3cret-b\n"} {
		if name, ok := tab.Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %q; want refused", bad, name)
		}
	}
	if got := strings.Join(tab.Names(), ","); got != "alice,bob" {
		t.Errorf("Names = %s", got)
	}
}

func TestParseBareTokenIsDefault(t *testing.T) {
	tab, err := Parse([]byte("  only-token\n"))
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := tab.Lookup("only-token"); !ok || name != DefaultName {
		t.Fatalf("Lookup = %q, %v", name, ok)
	}
}

func TestParseRefusals(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "no token"},
		{"# only a comment\n", "no token"},
		{"a t1\nb\n", "line 2: expected NAME TOKEN"},
		{"a t1\na t2\n", `name "a" appears twice`},
		{"a t1\nb t1\n", "the same token"},
		{"a/b t1\nc t2\n", `name "a/b"`},
		{"a t1 extra\n", "expected NAME TOKEN"},
		{"tok\x01en\n", "control character"},
	} {
		_, err := Parse([]byte(c.in))
		if !errors.Is(err, ErrBadFile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v; want %q", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "t1") {
			t.Errorf("Parse(%q): error quotes a token: %v", c.in, err)
		}
	}
}

func TestStoreReloadKeepsOldOnError(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("alice A\n")
	st, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	write("alice A2\nbob B\n")
	if err := st.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Lookup("A"); ok {
		t.Error("the rotated-out token still works")
	}
	if n, ok := st.Lookup("B"); !ok || n != "bob" {
		t.Errorf("bob after reload: %q %v", n, ok)
	}
	write("bad line here\n")
	if err := st.Reload(); err == nil {
		t.Fatal("a bad file reloaded")
	}
	if n, ok := st.Lookup("A2"); !ok || n != "alice" {
		t.Errorf("the previous table was not kept: %q %v", n, ok)
	}
}
