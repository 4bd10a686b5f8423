package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/runtimed/runtimed/runtime"
)

// A runtimed server and a client of it in one program: the client's
// processes run on the server. In production the server is `runtimed
// serve` and the URL the one it prints.
func Example_remote() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	srv := runtime.NewServer(runtime.Config{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()

	c, err := runtime.Dial(ctx, "ws://"+l.Addr().String(), nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	out, err := runtime.Command(c, "echo", "hello from the server").Output()
	fmt.Printf("%q %v\n", out, err)
	// Output:
	// "hello from the server\n" <nil>
}

// Cmd is the attach form, like os/exec's: readers and writers for stdin,
// stdout and stderr, on any backend.
func ExampleCommand() {
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	cmd := runtime.Command(b, "tr", "a-z", "A-Z")
	cmd.Stdin = strings.NewReader("shout\n")
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		panic(err)
	}
	fmt.Print(out.String())
	fmt.Println(cmd.ProcessState)
	// Output:
	// SHOUT
	// exit status 0
}

// A command that fails: Output returns its stdout and an *ExitError with
// the status and the start of its stderr.
func ExampleCmd_Output() {
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	out, err := runtime.Command(b, "sh", "-c", "echo partial; echo broken >&2; exit 4").Output()
	var ee *runtime.ExitError
	if errors.As(err, &ee) {
		fmt.Printf("stdout %q, %v, exit code %d, stderr %q\n", out, ee, ee.ExitCode(), ee.Stderr)
	}
	// Output:
	// stdout "partial\n", exit status 4, exit code 4, stderr "broken\n"
}

// CommandContext kills the command when its context ends; the status
// says it died of a signal.
func ExampleCommandContext() {
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := runtime.CommandContext(ctx, b, "sleep", "10").Run()
	var ee *runtime.ExitError
	if errors.As(err, &ee) {
		fmt.Println(ee, ee.Signaled(), ee.Signal())
	}
	// Output:
	// signal: killed true killed
}

// A sandbox confines the process tree and limits bound it: here the file
// system is read-only for the command, and a write past the file-size
// limit ends it, reported in ExitStatus.Limit.
func ExampleSandbox() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()
	dir, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(dir)

	cmd := runtime.Command(b, "sh", "-c", "echo x > "+filepath.Join(dir, "f")+" 2>/dev/null || echo refused")
	cmd.Sandbox = runtime.ReadOnlySandbox()
	out, err := cmd.Output()
	fmt.Printf("%q %v\n", out, err)

	p, err := b.Start(ctx, runtime.Spec{
		Argv:   []string{"sh", "-c", "exec head -c 100000 /dev/zero > " + filepath.Join(dir, "big")},
		Dir:    dir,
		Limits: runtime.Limits{FileSizeBytes: 4096},
	})
	if err != nil {
		panic(err)
	}
	st, _ := p.Wait(ctx)
	fmt.Println(st.Limit == runtime.LimitFileSize, st)
	// Output:
	// "refused\n" <nil>
	// true signal: file size limit exceeded (fileSize limit)
}

// Failures are told apart with errors.Is on the package's sentinels, the
// same on Local and on a Client.
func Example_failures() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	p, err := b.Start(ctx, runtime.Spec{ID: "job", Argv: []string{"sleep", "10"}, Dir: "/"})
	if err != nil {
		panic(err)
	}
	_, err = b.Start(ctx, runtime.Spec{ID: "job", Argv: []string{"true"}, Dir: "/"})
	fmt.Println("duplicate id:", errors.Is(err, runtime.ErrProcessExists))
	fmt.Println("write without PipeStdin:", errors.Is(p.Write(ctx, []byte("x")), runtime.ErrStdinClosed))
	fmt.Println("resize a pipe process:", errors.Is(p.Resize(ctx, 24, 80), runtime.ErrNotPTY))
	_, err = p.Read(ctx, runtime.ReadOptions{MaxBytes: -1})
	fmt.Println("bad option:", errors.Is(err, runtime.ErrInvalidOption), err)
	_, err = runtime.Dial(ctx, "127.0.0.1:4500", nil)
	fmt.Println("bad URL:", errors.Is(err, runtime.ErrBadURL))
	_, err = b.Start(ctx, runtime.Spec{Argv: []string{"true"}, Dir: "relative"})
	var oe *runtime.OptionError
	fmt.Println("bad spec:", errors.As(err, &oe), oe.Option)
	var re *runtime.RPCError
	err = p.Signal(ctx, "nope")
	fmt.Println("protocol error:", errors.As(err, &re), re.Code)
	_, _ = p.Terminate(ctx, 0)
	// Output:
	// duplicate id: true
	// write without PipeStdin: true
	// resize a pipe process: true
	// bad option: true runtime: invalid ReadOptions.MaxBytes: must not be negative (0 means no limit), got -1
	// bad URL: true
	// bad spec: true Spec.Dir
	// protocol error: true -32602
}

// A Supervisor restarts a crashing service with backoff until its restart
// intensity limit, then gives up and says so.
func ExampleSupervisor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	sup := runtime.NewSupervisor(b, nil)
	err := sup.Add(runtime.Service{
		Name:        "flaky",
		Spec:        runtime.Spec{Argv: []string{"sh", "-c", "exit 3"}, Dir: "/"},
		Restart:     runtime.RestartOnFailure,
		Backoff:     runtime.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
		MaxRestarts: 2,
		Window:      time.Minute,
	})
	if err != nil {
		panic(err)
	}
	events, _, _ := sup.Subscribe(ctx, 64)
	if err := sup.Start(ctx); err != nil {
		panic(err)
	}
	for ev := range events {
		if ev.State == runtime.ServiceFailed {
			fmt.Println(ev.Name, ev.State, "after", ev.Restarts, "restarts; last:", ev.LastExit)
			break
		}
	}
	_ = sup.Stop(ctx)
	// Output:
	// flaky failed after 2 restarts; last: exit status 3
}

// Pipe turns a process into an io.ReadWriteCloser: stdout to read, stdin
// to write (what an MCP stdio server needs).
func ExamplePipe() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	p, err := b.Start(ctx, runtime.Spec{Argv: []string{"cat"}, Dir: "/", PipeStdin: true})
	if err != nil {
		panic(err)
	}
	pipe, err := runtime.Pipe(ctx, p, runtime.PipeOptions{Stderr: os.Stderr})
	if err != nil {
		panic(err)
	}
	fmt.Fprintln(pipe, "ping")
	_ = pipe.Close() // closes stdin: cat ends
	out, _ := io.ReadAll(pipe)
	fmt.Printf("%q\n", out)
	// Output:
	// "ping\n"
}

// Read is the protocol's process/read: retained output by seq, with an
// optional long poll.
func ExampleProcess_Read() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := runtime.NewLocal(runtime.Config{})
	defer b.Close()

	p, err := b.Start(ctx, runtime.Spec{Argv: []string{"echo", "retained"}, Dir: "/"})
	if err != nil {
		panic(err)
	}
	st, _ := p.Wait(ctx)
	r, err := p.Read(ctx, runtime.ReadOptions{After: 0, Wait: time.Second})
	if err != nil {
		panic(err)
	}
	for _, c := range r.Chunks {
		fmt.Printf("seq %d %s %q\n", c.Seq, c.Stream, c.Data)
	}
	fmt.Println("exited", r.Exited, r.ExitCode, st, "next seq", r.NextSeq)
	// Output:
	// seq 1 stdout "retained\n"
	// exited true 0 exit status 0 next seq 4
}
