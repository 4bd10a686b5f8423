module github.com/runtimed/runtimed

go 1.26.0

require (
	github.com/coder/websocket v1.8.15
	github.com/creack/pty v1.1.24
	github.com/fsnotify/fsnotify v1.10.1
	github.com/google/uuid v1.6.0
	github.com/landlock-lsm/go-landlock v0.11.0
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.49.0
	golang.org/x/term v0.47.0
	pgregory.net/rapid v1.3.0
)

require (
	go.uber.org/multierr v1.10.0 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.77 // indirect
)
