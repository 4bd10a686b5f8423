package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Access is what a Rule grants on a path and everything beneath it.
type Access int

const (
	// Read allows reading files, listing directories and executing.
	Read Access = iota + 1
	// Write allows everything Read does plus creating, writing, truncating,
	// renaming and removing.
	Write
	// Deny hides the path: it cannot be read, listed or written.
	Deny
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// Rule grants Access on Path (absolute, clean) and its descendants. A more
// specific rule wins over a broader one.
type Rule struct {
	Path   string
	Access Access
}

// Policy is a resolved sandbox: absolute paths only, every special kind
// already expanded by the caller.
type Policy struct {
	// RestrictFS confines the file system to Rules; false leaves it open.
	RestrictFS bool
	Rules      []Rule
	// Network allows sockets other than AF_UNIX. False cuts TCP and UDP to
	// every address, loopback included.
	Network bool

	// planned is the plan Host.Check made of this policy, which Start
	// then enforces instead of planning (stat-ing every rule) again; nil
	// until checked. Its files' identities are checked again as the
	// grants are applied, so a path swapped meanwhile fails the start.
	// Written by Check only: a policy checked once and started many times
	// keeps the files it was checked against (runtimed checks each
	// start's policy, made afresh, right before it starts it).
	planned *layers
	// checkedBy is the host whose Check made planned: Start and NewLaunch
	// on that host enforce the plan without checking the policy again.
	checkedBy *Host
}

// ErrUnsupported is wrapped by errors for policies this package cannot
// express at all (not host limitations: those are *UnavailableError).
var ErrUnsupported = errors.New("sandbox: policy not supported")

// overlayKind is a mount-level change made in the child's private mount
// namespace, for what Landlock (an allow-list) cannot say on its own.
type overlayKind int

const (
	overlayReadOnly  overlayKind = iota + 1 // bind the path onto itself read-only
	overlayReadWrite                        // bind it again writable (write under a read-only overlay)
	overlayHide                             // cover it with an empty, unreadable file or directory
)

type overlay struct {
	Path string      `json:"path"`
	Kind overlayKind `json:"kind"`
	Dir  bool        `json:"dir"`
	ID   fileID      `json:"id"`
}

// grant is one Landlock rule.
type grant struct {
	Path  string `json:"path"`
	Write bool   `json:"write"`
	Dir   bool   `json:"dir"`
	ID    fileID `json:"id"`
	// Extra are Landlock rights granted beyond Write's (the namespace's
	// /dev and /proc, see nsExtraGrants).
	Extra uint64 `json:"extra,omitempty"`
}

// fileID is what the daemon resolved a path to. The helper opens each
// path again without following symlinks and refuses to go on if it is not
// the same file: a path swapped for a symlink or another directory between
// the check and the enforcement is caught, not followed.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// layers is how a Policy is enforced: Landlock grants (the allow-list) and
// the mount overlays that make narrower rules under broader ones hold.
type layers struct {
	Grants   []grant   `json:"grants"`
	Overlays []overlay `json:"overlays"`
}

// DevPaths are always granted read and write (with device ioctls) in a
// file-system-restricted sandbox: shells redirect to /dev/null, and
// terminal programs open /dev/tty. They hold no user data.
var DevPaths = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/random", "/dev/urandom"}

// plan turns the policy into layers, with the host's DevPaths granted.
func (p *Policy) plan() (layers, error) { return p.planDevices(true) }

// planDevices is plan; without devices, the host's DevPaths are left out
// (at the namespaces level the sandbox has a /dev of its own, and nsGrants
// drops them anyway: they are not stat'ed for nothing). Paths must exist
// (the caller drops or refuses missing ones); stat tells files from
// directories.
func (p *Policy) planDevices(devices bool) (layers, error) {
	var l layers
	if !p.RestrictFS {
		return l, nil
	}
	rules := append([]Rule(nil), p.Rules...)
	for _, r := range rules {
		if !filepath.IsAbs(r.Path) || filepath.Clean(r.Path) != r.Path {
			return l, fmt.Errorf("%w: path %q is not absolute and clean", ErrUnsupported, r.Path)
		}
	}
	// Shallow first, so every rule sees the effect of its ancestors; later
	// duplicates of a path replace earlier ones (the most specific entry
	// wins; among equals, the last).
	rules = sortedRules(rules)
	var res Resolver // the rules' shared ancestors looked at once
	for i, r := range rules {
		st, free, _ := res.freeOf(r.Path)
		if !free {
			var err error
			if st, err = os.Stat(r.Path); err != nil {
				return l, fmt.Errorf("sandbox path %s: %w", r.Path, err)
			}
			if real, err := filepath.EvalSymlinks(r.Path); err == nil && real != r.Path {
				return l, fmt.Errorf("%w: rule path %s goes through a symbolic link (it is %s): give the resolved path", ErrUnsupported, r.Path, real)
			}
		}
		dir, id := st.IsDir(), idOf(st)
		// What Landlock grants here through ancestors, and the mount state
		// that ancestors' overlays left.
		llWrite, llAny, roMount := false, false, false
		for j := 0; j < i; j++ {
			a := rules[j]
			if !within(r.Path, a.Path) {
				continue
			}
			switch a.Access {
			case Write:
				llWrite, llAny = true, true
			case Read:
				llAny = true
			case Deny:
				return l, fmt.Errorf("%w: %s entry %s lies under deny entry %s", ErrUnsupported, r.Access, r.Path, a.Path)
			}
		}
		// The nearest ancestor's mount state decides roMount.
		for _, o := range l.Overlays {
			if within(r.Path, o.Path) {
				roMount = o.Kind == overlayReadOnly
			}
		}
		switch r.Access {
		case Read:
			l.Grants = append(l.Grants, grant{Path: r.Path, Dir: dir, ID: id})
			if llWrite && !roMount {
				l.Overlays = append(l.Overlays, overlay{Path: r.Path, Kind: overlayReadOnly, Dir: dir, ID: id})
			}
		case Write:
			l.Grants = append(l.Grants, grant{Path: r.Path, Write: true, Dir: dir, ID: id})
			if roMount {
				l.Overlays = append(l.Overlays, overlay{Path: r.Path, Kind: overlayReadWrite, Dir: dir, ID: id})
			}
		case Deny:
			if llAny {
				l.Overlays = append(l.Overlays, overlay{Path: r.Path, Kind: overlayHide, Dir: dir, ID: id})
			}
		default:
			return l, fmt.Errorf("%w: unknown access %d", ErrUnsupported, r.Access)
		}
	}
	for _, d := range DevPaths {
		if !devices {
			break
		}
		if st, err := os.Stat(d); err == nil {
			l.Grants = append(l.Grants, grant{Path: d, Write: true, Dir: st.IsDir(), ID: idOf(st)})
		}
	}
	return l, nil
}

// NeedsMounts reports whether enforcing p takes a private mount namespace.
func (p *Policy) NeedsMounts() (bool, error) {
	l, err := p.plan()
	return len(l.Overlays) > 0, err
}

func idOf(st os.FileInfo) fileID {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return fileID{Dev: uint64(sys.Dev), Ino: sys.Ino}
	}
	return fileID{}
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// within reports whether p is base or lies beneath it.
func within(p, base string) bool {
	if base == "/" {
		return true
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// Allows reports whether the policy lets a process read (or, with write,
// write) path, an absolute symlink-free path: the most specific rule that
// contains it decides (for one path, the last); no rule means no access.
// It is the logical check for requests served by the daemon itself (fs/*
// with a sandbox), where no kernel enforcement applies.
func (p *Policy) Allows(path string, write bool) bool {
	if p == nil || !p.RestrictFS {
		return true
	}
	for _, d := range DevPaths {
		if path == d || within(path, "/dev/pts") && d == "/dev/pts" {
			return true
		}
	}
	best, found := Rule{}, false
	for _, r := range p.Rules {
		if within(path, r.Path) && (!found || depth(r.Path) >= depth(best.Path)) {
			best, found = r, true
		}
	}
	switch {
	case !found:
		return false
	case best.Access == Write:
		return true
	case best.Access == Read:
		return !write
	}
	return false
}
