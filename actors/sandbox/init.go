package sandbox

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"golang.org/x/sys/unix"
)

// runInit is the helper as the pid namespace's init: it starts the command
// from a throwaway thread confined like a spawning thread of the daemon
// (capabilities dropped, Landlock, seccomp, a uid of its own: see
// confineAndStart), reports the start, and then forwards signals, reaps
// and exits with the command's status. It returns only if the command
// could not be started.
func runInit(p *wirePlan, l layers, ps *pins, sigs chan os.Signal) helperStatus {
	var (
		proc  *os.Process
		stage string
		err   error
	)
	onThrowawayThread(func() {
		if p.NS.NetNSFD > 0 {
			if err = enterNetNS(p.NS.NetNSFD); err != nil {
				stage = "network"
				return
			}
		}
		// unshare(CLONE_NEWCGROUP) in nsMain moved only the thread that
		// made it; the command is forked from this one.
		if err = unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			stage, err = "namespaces", fmt.Errorf("unshare(CLONE_NEWCGROUP): %w", err)
			return
		}
		if err = dropCapabilities(); err != nil {
			stage = "capabilities"
			return
		}
		if stage, err = restrictNS(p.Policy, l, ps); err != nil {
			return
		}
		cred, cerr := becomeSpawner()
		if cerr != nil {
			stage, err = "credentials", cerr
			return
		}
		sys := &syscall.SysProcAttr{Setsid: true, Setctty: p.NS.Ctty, Ctty: 0, Credential: cred}
		proc, err = os.StartProcess(p.Path, p.Argv, &os.ProcAttr{Env: p.Env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: sys})
		if err != nil {
			stage = "exec"
		}
	})
	if err != nil {
		signal.Reset()
		st := stageError(stage, err)
		return helperStatus{Stage: st.Stage, Errno: int(st.Errno), Msg: st.Msg}
	}
	ps.close()
	cmd := proc.Pid
	if p.Prepare {
		// A prepared sandbox says so: its daemon cannot tell EOF from a
		// helper that died before the start.
		_, _ = unix.Write(statusFD, []byte(preparedStarted))
	}
	_ = unix.Close(statusFD) // EOF: the daemon's Start returns
	// The command's stdio stays the command's: the init holds none of it,
	// so the daemon sees EOF when the tree closes its outputs.
	if null, oerr := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0); oerr == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup3(null, fd, 0)
		}
		unix.Close(null)
	}
	// The init is never the OOM killer's pick in the tree's cgroup (set
	// after the fork: the command inherits nothing of it).
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	debug.SetGCPercent(100) // the helper ran with GOGC=off; the init may live long
	os.Exit(initLoop(cmd, sigs))
	return helperStatus{}
}

// forwarded are the signals the init passes on to the command's process
// group (and SIGCHLD, on which it reaps). Every signal a client can send
// with process/signal that a process can catch; SIGSTOP and SIGKILL
// cannot be caught (SIGKILL from the daemon ends the init, and with it
// the namespace; SIGSTOP stops the init only).
var forwarded = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGCONT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGWINCH, unix.SIGABRT,
	unix.SIGPWR, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGIO, unix.SIGSYS, unix.SIGTRAP, unix.SIGCHLD}

// initLoop forwards signals to the command's process group and reaps
// every child until the command has exited; it returns the command's
// status as the daemon reports it (128+N for a death by signal N).
func initLoop(cmd int, sigs <-chan os.Signal) int {
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if pid <= 0 {
				break
			}
			if pid == cmd {
				if ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ws.ExitStatus()
			}
		}
		s, ok := (<-sigs).(syscall.Signal)
		if !ok {
			continue
		}
		switch s {
		case unix.SIGCHLD, unix.SIGURG, unix.SIGPIPE:
			continue
		}
		if err := unix.Kill(-cmd, s); err == unix.ESRCH {
			_ = unix.Kill(cmd, s)
		}
	}
}
