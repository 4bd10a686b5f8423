// Package wiretest is a black-box test harness for the runtimed wire protocol (docs/PROTOCOL.md).
//
// It builds and runs the real runtimed binary and talks raw JSON to it over a websocket or over the
// stdio transport, or runs protocol transcripts over any transport. It imports only package wire (its client core, wire.Client, and MemPipe's
// wire.Transport), nothing of the server, so it checks the protocol as a client sees it; its own
// strict envelope check classifies every message before the core correlates answers.
//
//	bin, _ := wiretest.BuildBinary(dir)                 // once, in TestMain
//	srv := wiretest.StartWS(t, bin, "--detach-ttl", "1s") // or: c := wiretest.StartStdio(t, bin)
//	c, _ := wiretest.DialWS(ctx, srv.URL, nil)
//	defer c.Close()
//	sid, _ := c.Initialize(ctx)                          // initialize + initialized
//	_ = c.Start(ctx, wiretest.StartParams{ProcessID: "p", Argv: []string{"echo", "hi"}, Cwd: "/", Env: env})
//	log, _ := c.CollectProcess(ctx, "p")                 // output/exited/closed, sorted by seq
//	_ = log.CheckSequence()                              // 1..n, one exited, closed last
//
// Lower level: Call/CallID/CallAsync/Request send requests and match responses by id (strings by value,
// numbers by literal text); Notify and SendRaw send anything; WaitResponse, RecvRaw, Unclaimed and
// Garbage expose what no caller consumed; WaitNotification/TakeNotifications/Notifications query the
// notification buffer; Watch follows one process incrementally. Every wait is bounded by its context.
//
// Protocol transcripts (transcript.go): RunTranscripts runs testdata/*.txt
// files in the style of etcd raft's interaction tests, read by
// github.com/cockroachdb/datadriven: requests in, the frames the server
// answers out, normalised (UUIDs, pids, times, the caller's variables),
// regenerated with -rewrite. The runner knows no server: the caller's
// TranscriptConfig.Start starts one per file and hands out the client ends
// of its transports (runtime's TestTranscripts serves MemPipes with a real
// Server). CheckDocExamples checks a protocol document against the same
// server and transcripts: its "→"/"←" exchanges are run, and each JSON
// example must have the shape of a transcript frame (docs/PROTOCOL.md is
// kept in sync with the transcripts this way, not extracted into them).
//
// For disconnect tests: MemPipe (an in-memory transport pair with Cut) and OutputDropper (wraps any
// client transport and drops it abruptly mid-stream, after so many bytes of process/output, as a
// DropPlan says); SeqOutput is what `seq 1 n` writes, to compare a stream against.
//
// # Concurrency
//
// A Client runs on the client core (wire.Client, reader mode): its reader
// goroutine matches responses to callers by id and the Client's Peek
// handler buffers notifications; its methods may be called from any
// goroutine.
// A Server is a child process; its methods may be called concurrently.
//
// # Failure semantics
//
// Every wait is bounded by its context; a dropped connection ends pending
// calls with an error, and Done/Err report why. Servers are stopped (and
// their stderr logged on failure) in t.Cleanup.
//
// A transcript's connections run on client cores too: their reader
// goroutines append every inbound frame to the connection's pile (under
// its mutex), and the test's goroutine runs the directives and takes from
// it.
//
// # Backpressure
//
// The notification buffer keeps unread notifications for
// NotificationRetention and then drops them, so a test that ignores
// notifications cannot grow memory without bound; responses are never dropped.
// A transcript's pile is unbounded but lives one directive: each send,
// await or events empties what it printed.
package wiretest
