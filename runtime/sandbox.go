package runtime

import (
	"github.com/runtimed/runtimed/wire"
)

// Sandbox confines a process and all its descendants, enforced by the
// kernel on the machine that runs it (PROTOCOL.md section 7.3; docs/sandbox.md):
// Landlock for the file system, a seccomp filter for the network, no
// capabilities, no signals or ptrace outside the tree. A host that cannot
// enforce what is asked refuses the start (-32602); it never runs the
// process unconfined. The same value works on Local and Client.
type Sandbox struct {
	// FileSystem lists what the process may reach. A more specific rule
	// wins over a broader one. Rules without RestrictFS are an error.
	FileSystem []FSRule
	// RestrictFS must be true for FileSystem to apply (so that an empty
	// list can mean "nothing at all"); false leaves the file system
	// unrestricted.
	RestrictFS bool
	// Network allows TCP/UDP; false cuts every address, loopback included.
	Network bool
	// WorkspaceRoots are the project roots (FSProjectRoots): absolute
	// paths or file: URIs; empty means the process's Dir.
	WorkspaceRoots []string
}

// FSAccess is what an FSRule grants.
type FSAccess string

// The accesses an FSRule grants: read, write (read included) or none.
const (
	FSRead  FSAccess = "read"
	FSWrite FSAccess = "write"
	FSDeny  FSAccess = "deny"
)

// Special paths an FSRule may name instead of a path.
const (
	FSRoot         = "root"          // /
	FSProjectRoots = "project_roots" // every WorkspaceRoots entry
	FSSlashTmp     = "slash_tmp"     // /tmp
	FSTmpdir       = "tmpdir"        // the child's $TMPDIR
)

// FSRule is one file-system entry: exactly one of Special (with an
// optional relative Subpath), Path (absolute or file: URI) or Glob (deny
// only) is set, and Access is; anything else is an error at Start.
type FSRule struct {
	Special     string   // one of FSRoot, FSProjectRoots, FSSlashTmp, FSTmpdir
	Subpath     string   // with Special only: a relative path under it, without ".."; "" is the special path itself
	Path        string   // an absolute path or file: URI
	Glob        string   // a glob of paths to deny (path.Match syntax per segment, "**" any depth); relative: under each project root
	Access      FSAccess // what the rule grants: FSRead, FSWrite or FSDeny (required)
	SkipMissing bool     // a missing path is ignored; false refuses the start
}

// ReadOnlySandbox reads everything, writes nothing (but /dev/null and
// terminals), no network: Codex's read-only mode.
func ReadOnlySandbox() *Sandbox {
	return &Sandbox{RestrictFS: true, FileSystem: []FSRule{{Special: FSRoot, Access: FSRead}}}
}

// WorkspaceWriteSandbox is Codex's workspace-write mode: read everything,
// write the roots (Dir when none), /tmp and $TMPDIR, keep .git, .agents,
// .codex and .aws under each root read-only, no network.
func WorkspaceWriteSandbox(roots ...string) *Sandbox {
	s := ReadOnlySandbox()
	s.WorkspaceRoots = roots
	s.FileSystem = append(s.FileSystem,
		FSRule{Special: FSProjectRoots, Access: FSWrite}, FSRule{Special: FSSlashTmp, Access: FSWrite},
		FSRule{Special: FSTmpdir, Access: FSWrite})
	for _, sub := range []string{".git", ".agents", ".codex", ".aws"} {
		s.FileSystem = append(s.FileSystem, FSRule{Special: FSProjectRoots, Subpath: sub, Access: FSRead, SkipMissing: true})
	}
	return s
}

// MarshalJSON writes the protocol's process/start.sandbox object.
func (s *Sandbox) MarshalJSON() ([]byte, error) { return s.wire().MarshalJSON() }

func (s *Sandbox) wire() *wire.Sandbox {
	if s == nil {
		return nil
	}
	w := &wire.Sandbox{Managed: true, Network: s.Network, WorkspaceRoots: s.WorkspaceRoots}
	if !s.RestrictFS {
		return w
	}
	w.FS = &wire.SandboxFS{}
	for _, r := range s.FileSystem {
		e := wire.SandboxEntry{Access: string(r.Access), SkipMissing: r.SkipMissing}
		switch {
		case r.Special != "":
			e.Kind, e.Special, e.Subpath = "special", r.Special, r.Subpath
		case r.Glob != "":
			e.Kind, e.Pattern = "glob_pattern", r.Glob
		default:
			e.Kind, e.Path = "path", r.Path
		}
		w.FS.Entries = append(w.FS.Entries, e)
	}
	return w
}

// Limits bound a whole process tree (PROTOCOL.md section 7.3, runtimed
// extension). Zero fields set no limit. Memory and pids are enforced on
// the whole tree by a cgroup where the host has one (a pids limit is
// refused where none can be had); CPU seconds, open files and file size
// by rlimits of each process. A process ended by a limit reports it in
// ExitStatus.Limit. A field above math.MaxInt64 (what the kernel's
// interfaces take) is an error at Start.
type Limits struct {
	MemoryBytes   uint64 // memory of the whole tree (cgroup); 0: no limit
	Pids          uint64 // processes in the tree (cgroup); 0: no limit
	CPUSeconds    uint64 // CPU time of each process (RLIMIT_CPU); 0: no limit
	OpenFiles     uint64 // open files of each process (RLIMIT_NOFILE); 0: the server's own limit
	FileSizeBytes uint64 // largest file each process may write (RLIMIT_FSIZE); 0: no limit
}

// Limit names reported in ExitStatus.Limit.
const (
	LimitMemory   = "memory"    // Limits.MemoryBytes
	LimitPids     = "pids"      // Limits.Pids
	LimitCPU      = "cpu"       // Limits.CPUSeconds
	LimitOpenFile = "openFiles" // Limits.OpenFiles
	LimitFileSize = "fileSize"  // Limits.FileSizeBytes
)

func (l Limits) wire() *wire.StartLimits {
	if l == (Limits{}) {
		return nil
	}
	opt := func(v uint64) *uint64 {
		if v == 0 {
			return nil
		}
		return &v
	}
	return &wire.StartLimits{MemoryBytes: opt(l.MemoryBytes), Pids: opt(l.Pids), CPUSeconds: opt(l.CPUSeconds),
		OpenFiles: opt(l.OpenFiles), FileSizeBytes: opt(l.FileSizeBytes)}
}
