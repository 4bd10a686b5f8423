package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/runtimed/runtimed/wire"
)

// services is a server's supervised services (Config.Services): an
// embedded runtime of their own and a Supervisor over it. Set once by
// newServices; its methods are safe to call from any goroutine.
type services struct {
	local *Local
	sup   *Supervisor
}

func newServices(cfg Config) (*services, error) {
	if len(cfg.Services) == 0 {
		return nil, nil
	}
	lcfg := cfg
	lcfg.Services = nil
	lcfg.Logger = cfg.Logger.Named("services")
	l := NewLocal(lcfg)
	sup := NewSupervisor(l, &SupervisorOptions{Logger: lcfg.Logger})
	for _, svc := range cfg.Services {
		if err := sup.Add(svc); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	return &services{local: l, sup: sup}, nil
}

// list is process/list's view of the services' processes.
func (s *services) list(ctx context.Context) []wire.ProcessInfo {
	if s == nil {
		return nil
	}
	infos, err := s.local.List(ctx)
	if err != nil {
		return nil
	}
	out := make([]wire.ProcessInfo, 0, len(infos))
	for _, i := range infos {
		out = append(out, wire.ProcessInfo{ProcessID: i.ID, PID: i.Pid, Argv: i.Argv, TTY: i.TTY, State: i.State, ExitCode: i.ExitCode, NextSeq: i.NextSeq})
	}
	return out
}

// StartServices starts the configured services (Config.Services) in
// order; they run until Shutdown or Close, which stop them first, in
// reverse order. Without services it does nothing.
func (s *Server) StartServices(ctx context.Context) error {
	if s.svcs == nil {
		return nil
	}
	return s.svcs.sup.Start(ctx)
}

// ServiceStatus reports the configured services' health.
func (s *Server) ServiceStatus(ctx context.Context) ([]ServiceStatus, error) {
	if s.svcs == nil {
		return nil, errors.New("runtime: no services configured")
	}
	return s.svcs.sup.Status(ctx)
}

// stopServices stops the services (bounded by ctx) and their runtime.
func (s *services) stop(ctx context.Context) {
	if s == nil {
		return
	}
	_ = s.sup.Stop(ctx)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if s.local.Shutdown(sctx) != nil {
		_ = s.local.Close()
	}
}

// kill ends the services at once (Server.Close): their processes first,
// then the supervisor, whose restarts now fail at once.
func (s *services) kill() {
	if s == nil {
		return
	}
	_ = s.local.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.sup.Stop(ctx)
}
