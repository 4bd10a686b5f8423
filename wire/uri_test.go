package wire

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// The spelling of Rust's url crate (Url::from_file_path, 2.x), which the
// Codex client uses for its own URIs: "[" "]" "|" "^" stay, "%" and the
// WHATWG path-segment set are escaped, components are normalised.
func TestFileURI(t *testing.T) {
	cases := []struct{ in, want, back string }{
		{"/", "file:///", "/"},
		{"/a/b.txt", "file:///a/b.txt", ""},
		{"/a b/c#d?e%f", "file:///a%20b/c%23d%3Fe%25f", ""},
		{"/home/a[1]", "file:///home/a[1]", ""},
		{"/x/é", "file:///x/%C3%A9", ""},
		{"/x/日本", "file:///x/%E6%97%A5%E6%9C%AC", ""},
		{"/q\"<>`{}\\|^", "file:///q%22%3C%3E%60%7B%7D%5C|^", ""},
		{"/keep/!$&'()*+,;=:@~_-[]", "file:///keep/!$&'()*+,;=:@~_-[]", ""},
		{"/ctl/\x01\x7f\n", "file:///ctl/%01%7F%0A", ""},
		{"/a//b/./c/", "file:///a/b/c", "/a/b/c"},
		{"/a/../b", "file:///a/../b", ""},
		{"//", "file:///", "/"},
	}
	for _, c := range cases {
		if got := FileURI(c.in); got != c.want {
			t.Errorf("FileURI(%q) = %q, want %q", c.in, got, c.want)
		}
		back := c.back
		if back == "" {
			back = c.in
		}
		if got, err := ParseFileURI(c.want); err != nil || got != back {
			t.Errorf("ParseFileURI(%q) = %q, %v; want %q", c.want, got, err, back)
		}
	}
}

func TestParseFileURI(t *testing.T) {
	for in, want := range map[string]string{
		"file:///a%5B1%5D":           "/a[1]", // what the Go encoder used to send for environment/info
		"file://localhost/x":         "/x",
		"file:/x%20y":                "/x y",
		"file:///x?q=1":              "/x",
		"file:///x%23y#frag":         "/x#y",
		"file:relative":              "relative",
		"file:///%E6%97%A5%E6%9C%AC": "/日本",
	} {
		if got, err := ParseFileURI(in); err != nil || got != want {
			t.Errorf("ParseFileURI(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	var ue *FileURIError
	if _, err := ParseFileURI("file://example.com/x"); !errors.Is(err, ErrFileURIRemote) || !errors.As(err, &ue) || ue.Host != "example.com" {
		t.Errorf("remote host: %v", err)
	}
	for _, bad := range []string{"file:///a%zz", "file://[::1/x", "http:///x"} {
		if _, err := ParseFileURI(bad); !errors.Is(err, ErrFileURIInvalid) {
			t.Errorf("ParseFileURI(%q): %v, want ErrFileURIInvalid", bad, err)
		}
	}
	if p, err := NativePath("/not/a/uri%20"); err != nil || p != "/not/a/uri%20" {
		t.Errorf("NativePath of a native path: %q %v", p, err)
	}
}

// Any absolute path in canonical form (no empty or "." component) survives
// FileURI then ParseFileURI, and the URI has no byte the encode set names.
func TestFileURIRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		comps := rapid.SliceOfN(rapid.StringMatching(`[^/\x00]{1,8}`), 0, 5).Draw(t, "components")
		var p string
		for _, c := range comps {
			if c == "." {
				c = ".x"
			}
			p += "/" + c
		}
		if p == "" {
			p = "/"
		}
		u := FileURI(p)
		got, err := ParseFileURI(u)
		if err != nil || got != p {
			t.Fatalf("ParseFileURI(FileURI(%q)) = %q, %v (uri %q)", p, got, err, u)
		}
		rest := strings.TrimPrefix(u, "file://")
		for i := 0; i < len(rest); i++ {
			if c := rest[i]; c != '/' && c != '%' && uriEscape(c) {
				t.Fatalf("FileURI(%q) = %q keeps byte %q", p, u, c)
			}
		}
		if !utf8.ValidString(u) {
			t.Fatalf("FileURI(%q) is not ASCII: %q", p, u)
		}
	})
}
