//go:build tools

// Package tools pins dependencies that later issues use, so go.mod stays stable while packages land.
package tools

import (
	_ "github.com/coder/websocket"
	_ "github.com/creack/pty"
	_ "github.com/google/uuid"
	_ "go.uber.org/goleak"
	_ "go.uber.org/zap"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/term"
	_ "pgregory.net/rapid"
)
