package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/runtimed/runtimed/actors/audit"
	"github.com/runtimed/runtimed/actors/tokens"
	"github.com/runtimed/runtimed/runtime"
)

// identity is serve's named tokens (--auth-token-file) and audit log
// (--audit-log), both reloaded on SIGHUP.
type identity struct {
	store *tokens.Store // nil without --auth-token-file
	audit *audit.Log    // nil without --audit-log
}

func openIdentity(tokenFile, auditPath, listen string, log *zap.Logger, stderr io.Writer) (*identity, int) {
	idn := &identity{}
	if tokenFile != "" {
		st, err := tokens.Load(tokenFile)
		if err != nil {
			fmt.Fprintf(stderr, "runtimed serve: --auth-token-file: %v\n", err)
			return nil, 2
		}
		idn.store = st
	}
	if auditPath != "" {
		if auditPath == "-" && (listen == "stdio" || listen == "stdio://") {
			fmt.Fprintln(stderr, "runtimed serve: --audit-log -: stdout carries the protocol on stdio://; give a file")
			return nil, 2
		}
		l, err := audit.Open(auditPath, audit.Options{Logger: log.Named("audit")})
		if err != nil {
			fmt.Fprintf(stderr, "runtimed serve: --audit-log: %v\n", err)
			return nil, 2
		}
		idn.audit = l
	}
	return idn, 0
}

func (i *identity) tokenSource() runtime.TokenSource {
	if i.store == nil {
		return nil // not a typed nil in the interface
	}
	return i.store
}

func (i *identity) auditor() runtime.Auditor {
	if i.audit == nil {
		return nil
	}
	return i.audit
}

func (i *identity) close() {
	if i.audit != nil {
		_ = i.audit.Close()
	}
}

// reloadOnHUP reloads the tokens and reopens the audit log on each SIGHUP
// until ctx ends or the returned stop is called.
func (i *identity) reloadOnHUP(ctx context.Context, log *zap.Logger) (stop func()) {
	if i.store == nil && i.audit == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-hup:
				if i.store != nil {
					if err := i.store.Reload(); err != nil {
						log.Warn("SIGHUP: --auth-token-file not reloaded; the previous tokens stay", zap.Error(err))
					} else {
						log.Info("SIGHUP: tokens reloaded", zap.String("names", strings.Join(i.store.Table().Names(), ",")))
					}
				}
				if i.audit != nil {
					i.audit.Reopen()
				}
			case <-ctx.Done():
				return
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(hup); close(done); <-finished }
}
