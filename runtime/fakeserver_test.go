package runtime

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire"
	"github.com/runtimed/runtimed/wire/wiretest"
)

// memEnd is one end of the project's in-memory pipe.
type memEnd = wiretest.MemTransport

func memPair() (client, server *memEnd) { return wiretest.MemPipe(256) }

// fakeServer is a scripted server: the test reads what the client sends
// and answers whatever the case needs (evicted output, a lost exit, a
// failure), which a real server would produce only by chance.
type fakeServer struct {
	t  *testing.T
	tr *memEnd
}

type fakeMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// recv returns the next message from the client (bounded).
func (s *fakeServer) recv() fakeMsg {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s.tr.ReadMessage(ctx)
	if err != nil {
		s.t.Errorf("fake server: read: %v", err)
		return fakeMsg{}
	}
	var m fakeMsg
	if err := json.Unmarshal(b, &m); err != nil {
		s.t.Errorf("fake server: bad message %q", b)
	}
	return m
}

// request returns the next request, which must be method.
func (s *fakeServer) request(method string) fakeMsg {
	s.t.Helper()
	m := s.recv()
	if m.Method != method || m.ID == nil {
		s.t.Errorf("fake server: got %q (id %s), want a %s request", m.Method, m.ID, method)
	}
	return m
}

func (s *fakeServer) send(v any) {
	s.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.tr.WriteMessage(context.Background(), b); err != nil {
		s.t.Errorf("fake server: write: %v", err)
	}
}

func (s *fakeServer) reply(id json.RawMessage, result any) {
	s.send(map[string]any{"id": id, "result": result})
}

func (s *fakeServer) notify(method string, params map[string]any) {
	s.send(map[string]any{"method": method, "params": params})
}

func (s *fakeServer) output(id string, seq uint64, data string) {
	s.notify(wire.NotifyProcessOutput, map[string]any{"processId": id, "seq": seq, "stream": "stdout", "chunk": []byte(data)})
}

func (s *fakeServer) exited(id string, seq uint64, code int) {
	s.notify(wire.NotifyProcessExited, map[string]any{"processId": id, "seq": seq, "exitCode": code})
}

func (s *fakeServer) closed(id string, seq uint64) {
	s.notify(wire.NotifyProcessClosed, map[string]any{"processId": id, "seq": seq})
}

// handshake answers initialize (checking the resumed session, if any)
// and takes the initialized notification.
func (s *fakeServer) handshake(sid, wantResume string) {
	s.t.Helper()
	m := s.request(wire.MethodInitialize)
	var p struct {
		ResumeSessionID *string `json:"resumeSessionId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	got := ""
	if p.ResumeSessionID != nil {
		got = *p.ResumeSessionID
	}
	if got != wantResume {
		s.t.Errorf("fake server: initialize resumes %q, want %q", got, wantResume)
	}
	s.reply(m.ID, map[string]any{"sessionId": sid})
	if n := s.recv(); n.Method != wire.MethodInitialized {
		s.t.Errorf("fake server: got %q, want initialized", n.Method)
	}
}

// start answers the process/start of id, sending notes (written before
// the answer, as a server may) first.
func (s *fakeServer) start(id string, notes func()) {
	s.t.Helper()
	m := s.request(wire.MethodProcessStart)
	var p struct {
		ProcessID string `json:"processId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	if p.ProcessID != id {
		s.t.Errorf("fake server: start of %q, want %q", p.ProcessID, id)
	}
	if notes != nil {
		notes()
	}
	s.reply(m.ID, map[string]any{"processId": id})
}

// fakeClient dials a Client to a fake server and returns it; every later
// dial (a reconnect) hands the test a new server end on servers.
func fakeClient(t *testing.T, reconnect bool) (*Client, *fakeServer, <-chan *fakeServer) {
	t.Helper()
	servers := make(chan *fakeServer, 8)
	dial := func(ctx context.Context) (wire.Transport, error) {
		c, s := memPair()
		servers <- &fakeServer{t: t, tr: s}
		return c, nil
	}
	first := make(chan *fakeServer, 1)
	go func() {
		s := <-servers
		s.handshake("S1", "")
		first <- s
	}()
	c, err := Dial(context.Background(), "ws://fake.invalid", &ClientOptions{Reconnect: reconnect, DialTransport: dial, ReconnectWindow: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, <-first, servers
}

func nextServer(t *testing.T, servers <-chan *fakeServer) *fakeServer {
	t.Helper()
	select {
	case s := <-servers:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not dial")
		return nil
	}
}

// nextEvent returns the stream's next event, failing after 3 s (a stalled
// stream: an event it waits for will never come).
func nextEvent(t *testing.T, s *EventStream) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	return ev
}

func wantEvent(t *testing.T, s *EventStream, kind EventKind, seq uint64, data string) Event {
	t.Helper()
	ev := nextEvent(t, s)
	if ev.Kind != kind || ev.Seq != seq || string(ev.Data) != data {
		t.Fatalf("event %v seq %d %q (to %d); want %v seq %d %q", ev.Kind, ev.Seq, ev.Data, ev.To, kind, seq, data)
	}
	return ev
}
