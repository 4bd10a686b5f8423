package tokens

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
)

// DefaultName names a file's single bare token (and Config.AuthToken).
const DefaultName = "default"

// MaxTokens bounds a table (and so the token-name label of the metrics).
const MaxTokens = 256

// ErrBadFile: the token file could not be parsed.
var ErrBadFile = errors.New("tokens: bad token file")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

type entry struct {
	name  string
	token []byte
}

// Table is an immutable set of named tokens.
type Table struct {
	entries []entry
}

// Single is a table of one token named DefaultName.
func Single(token string) *Table {
	return &Table{entries: []entry{{name: DefaultName, token: []byte(token)}}}
}

// Parse reads a token file's contents.
func Parse(data []byte) (*Table, error) {
	var lines [][]string
	var lineNos []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lines = append(lines, strings.Fields(line))
		lineNos = append(lineNos, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFile, err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("%w: no token in it", ErrBadFile)
	}
	if len(lines) == 1 && len(lines[0]) == 1 {
		if err := checkToken(lines[0][0]); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadFile, lineNos[0], err)
		}
		return Single(lines[0][0]), nil
	}
	if len(lines) > MaxTokens {
		return nil, fmt.Errorf("%w: %d tokens; at most %d", ErrBadFile, len(lines), MaxTokens)
	}
	t := &Table{}
	names := map[string]bool{}
	toks := map[string]bool{}
	for i, f := range lines {
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %d: expected NAME TOKEN (a single bare token only alone in the file)", ErrBadFile, lineNos[i])
		}
		name, tok := f[0], f[1]
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("%w: line %d: name %q: expected 1 to 64 of A-Z a-z 0-9 . _ -", ErrBadFile, lineNos[i], name)
		}
		if err := checkToken(tok); err != nil {
			return nil, fmt.Errorf("%w: line %d (%s): %v", ErrBadFile, lineNos[i], name, err)
		}
		if names[name] {
			return nil, fmt.Errorf("%w: line %d: name %q appears twice", ErrBadFile, lineNos[i], name)
		}
		if toks[tok] {
			return nil, fmt.Errorf("%w: line %d (%s): the same token as an earlier line", ErrBadFile, lineNos[i], name)
		}
		names[name], toks[tok] = true, true
		t.entries = append(t.entries, entry{name: name, token: []byte(tok)})
	}
	return t, nil
}

func checkToken(tok string) error {
	if len(tok) < 1 {
		return errors.New("empty token")
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] == 0x7f {
			return errors.New("token holds a control character")
		}
	}
	return nil
}

// Lookup returns the name of the presented token. Every token of the table
// is compared in constant time, so the answer's timing says nothing about
// which token came close.
func (t *Table) Lookup(presented string) (name string, ok bool) {
	if t == nil {
		return "", false
	}
	p := []byte(presented)
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(p, e.token) == 1 && !ok {
			name, ok = e.name, true
		}
	}
	return name, ok
}

// Names lists the table's names in file order.
func (t *Table) Names() []string {
	out := make([]string, len(t.entries))
	for i, e := range t.entries {
		out[i] = e.name
	}
	return out
}

// Store is the current table of a token file, reloadable.
type Store struct {
	path string
	cur  atomic.Pointer[Table]
}

// NewStore holds a fixed table (Reload is then a no-op).
func NewStore(t *Table) *Store {
	s := &Store{}
	s.cur.Store(t)
	return s
}

// Load reads path into a new Store.
func Load(path string) (*Store, error) {
	s := &Store{path: path}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the file again; on error the previous table stays.
func (s *Store) Reload() error {
	if s.path == "" {
		return nil
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return err
	}
	t, err := Parse(b)
	if err != nil {
		return err
	}
	s.cur.Store(t)
	return nil
}

// Table is the table in force.
func (s *Store) Table() *Table { return s.cur.Load() }

// Lookup looks presented up in the table in force.
func (s *Store) Lookup(presented string) (string, bool) { return s.Table().Lookup(presented) }
