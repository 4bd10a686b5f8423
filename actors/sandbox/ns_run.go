package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Running the namespaces level's helper (ns.go plans and mounts): the
// helper's main path (nsMain) and the pieces a prepared sandbox shares
// with it (buildNS before its start is known, runNS once it is).

// loopbackUp brings lo up in the new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// nsMain runs in the helper, cloned into the new namespaces, after the
// cgroups and rlimits; it returns only on failure.
func nsMain(p *wirePlan) helperStatus {
	np := p.NS
	sigs, notified := initSignals(np.PidNS)
	if np.NetNSFD > 0 && !np.PidNS {
		// setns is per thread: this one execs (the init's spawning thread
		// enters it itself, see runInit).
		if err := enterNetNS(np.NetNSFD); err != nil {
			return failStatus("network", err)
		}
	}
	if err := cgroupNS(); err != nil {
		return failStatus("namespaces", err)
	}
	var ps pins // closed at exec, or once the command runs
	defer ps.close()
	if stage, err := buildNS(np, p.Scratch, &ps); err != nil {
		return failStatus(stage, err)
	}
	return runNS(p, &ps, sigs, notified)
}

// initSignals starts catching, as the init, the signals it forwards (the
// first Notify costs about a millisecond: it overlaps the mounts, and the
// init waits for notified before it forks). Without a pid namespace
// there is no init: nil channels.
func initSignals(pidNS bool) (chan os.Signal, chan struct{}) {
	if !pidNS {
		return nil, nil
	}
	sigs := make(chan os.Signal, 128)
	notified := make(chan struct{})
	go func() { signal.Notify(sigs, forwarded...); close(notified) }()
	return sigs, notified
}

func failStatus(stage string, err error) helperStatus {
	var errno syscall.Errno
	errors.As(err, &errno)
	return helperStatus{Stage: stage, Errno: int(errno), Msg: err.Error()}
}

// cgroupNS gives the calling thread a cgroup namespace of its own, rooted
// at the tree's cgroup it is in: what the command sees of cgroups starts
// there.
func cgroupNS() error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWCGROUP): %w", err)
	}
	return nil
}

// buildNS makes what every start of a namespace plan shares: the mounts,
// loopback up, the keyring. A prepared sandbox (prepared.go) does it
// before its start is known.
func buildNS(np *nsPlan, scratch string, ps *pins) (string, error) {
	if err := setupMounts(np, scratch, ps); err != nil {
		return "mounts", err
	}
	if np.NetNS {
		if err := loopbackUp(); err != nil {
			return "network", fmt.Errorf("loopback up: %w", err)
		}
	}
	if err := joinOwnKeyring(); err != nil {
		return "keyring", err
	}
	return "", nil
}

// joinOwnKeyring gives the calling thread an anonymous session keyring of
// its own (NULL name), which the commands it starts inherit.
func joinOwnKeyring() error {
	if _, _, errno := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); errno != 0 && errno != unix.ENOSYS {
		return fmt.Errorf("keyctl(JOIN_SESSION_KEYRING): %w", errno)
	}
	return nil
}

// runNS is the start itself in the built namespaces: the working
// directory, the grants of the namespace's own /dev and /proc, then the
// command exec'd in place or, with a pid namespace, started by the init.
func runNS(p *wirePlan, ps *pins, sigs chan os.Signal, notified chan struct{}) helperStatus {
	np := p.NS
	if err := unix.Chdir(np.Dir); err != nil {
		return failStatus("cwd", err)
	}
	extra, err := nsExtraGrants(p.Policy)
	if err != nil {
		return failStatus("mounts", err)
	}
	l := layers{Grants: append(nsGrants(p.Layers), extra...)}
	if !np.PidNS {
		// No init: confine this thread and exec in place.
		if err := dropCapabilities(); err != nil {
			return failStatus("capabilities", err)
		}
		if stage, err := restrictNS(p.Policy, l, ps); err != nil {
			return failStatus(stage, err)
		}
		err := unix.Exec(p.Path, p.Argv, p.Env)
		return failStatus("exec", err)
	}
	<-notified
	return runInit(p, l, ps, sigs)
}

// enterNetNS moves the calling thread into the caller's network namespace.
func enterNetNS(fd int) error {
	err := unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("setns(the caller's network namespace): %w", err)
	}
	return nil
}

// nsFilter is the namespaces level's seccomp filter for p.
func nsFilter(p *Policy) filterSpec {
	return filterSpec{network: p.Network, keyrings: true, setns: true}
}

// restrictNS applies Landlock and the namespaces level's seccomp filter.
func restrictNS(p *Policy, l layers, ps *pins) (string, error) {
	if err := applyLandlock(p, l, ps); err != nil {
		return "landlock", err
	}
	if err := installFilter(nsFilter(p)); err != nil {
		return "seccomp", err
	}
	return checkCwd(".")
}
