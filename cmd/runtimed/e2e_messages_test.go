package main_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/runtimed/runtimed/wire/wiretest"
)

// PROTOCOL.md §3: the handshake gate, and §2: unknown methods are checked before it.
func TestHandshakeGating(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := tr.connect(t)
		ctx := tctx(t, wait)
		const notInit = "client must call initialize before using exec methods"
		const notInitialized = "client must send initialized before using exec methods"
		const unknown = "exec-server stub does not implement `nope/nothing` yet"

		_, err := call(ctx, c, "environment/status", nil)
		wantRPCError(t, "environment/status before initialize", err, -32600, notInit)
		_, err = call(ctx, c, "process/start", shProc("p", "/", "exit 0"))
		wantRPCError(t, "process/start before initialize", err, -32600, notInit)
		_, err = call(ctx, c, "process/read", map[string]any{"processId": "p"})
		wantRPCError(t, "process/read before initialize", err, -32600, notInit)
		_, err = call(ctx, c, "nope/nothing", map[string]any{})
		wantRPCError(t, "unknown method before initialize", err, -32601, unknown)

		res, err := call(ctx, c, "initialize", map[string]any{"clientName": "e2e", "resumeSessionId": nil})
		if err != nil {
			t.Fatalf("initialize: %v", err)
		}
		var init struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(res, &init); err != nil || !uuidV4.MatchString(init.SessionID) {
			t.Errorf("initialize result %s: want a uuid v4 sessionId", res)
		}

		_, err = call(ctx, c, "environment/status", nil)
		wantRPCError(t, "environment/status between initialize and initialized", err, -32600, notInitialized)
		_, err = call(ctx, c, "process/terminate", map[string]any{"processId": "p"})
		wantRPCError(t, "process/terminate between initialize and initialized", err, -32600, notInitialized)

		if err := c.Notify(ctx, "initialized", map[string]any{"ignored": true}); err != nil {
			t.Fatal(err)
		}
		res, err = call(ctx, c, "environment/status", nil)
		wantStatusReady(t, "environment/status without params", res, err)
		res, err = call(ctx, c, "environment/status", map[string]any{})
		wantStatusReady(t, "environment/status with {}", res, err)
		res, err = call(ctx, c, "environment/status", json.RawMessage("null"))
		wantStatusReady(t, "environment/status with null", res, err)

		_, err = call(ctx, c, "initialize", map[string]any{"clientName": "e2e"})
		wantRPCError(t, "second initialize", err, -32600, "initialize may only be sent once per connection")
		_, err = call(ctx, c, "nope/nothing", nil)
		wantRPCError(t, "unknown method after handshake", err, -32601, unknown)

		// The connection is still usable after all these errors.
		res, err = call(ctx, c, "environment/status", nil)
		wantStatusReady(t, "environment/status at the end", res, err)
	})
}

// PROTOCOL.md §2-3: messages that close the connection.
func TestConnectionClosingMessages(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		cases := []struct {
			name      string
			handshake bool
			send      func(t *testing.T, c *wiretest.Client)
		}{
			{"initialized before initialize", false, func(t *testing.T, c *wiretest.Client) {
				if err := c.Notify(tctx(t, wait), "initialized", map[string]any{}); err != nil {
					t.Fatal(err)
				}
			}},
			{"unknown notification", true, func(t *testing.T, c *wiretest.Client) {
				if err := c.Notify(tctx(t, wait), "nope/notification", map[string]any{}); err != nil {
					t.Fatal(err)
				}
			}},
			{"response from the client", true, func(t *testing.T, c *wiretest.Client) {
				if err := c.SendRaw(tctx(t, wait), []byte(`{"id":77,"result":{}}`)); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				c := tr.connect(t)
				if tc.handshake {
					if _, err := c.Initialize(tctx(t, wait)); err != nil {
						t.Fatal(err)
					}
				}
				tc.send(t, c)
				select {
				case <-c.Done():
				case <-time.After(10 * time.Second):
					t.Fatalf("connection still open 10s after %s", tc.name)
				}
			})
		}
	})
}

// Request ids echoed byte for byte, the "jsonrpc" member and unknown
// fields: runtime/testdata/transcripts/ids.txt. Here, what needs the real
// websocket: a request in a binary frame is accepted.
func TestBinaryFrameRequest(t *testing.T) {
	t.Parallel()
	c := session(t, transports[0]) // websocket
	ctx := tctx(t, wait)
	if err := c.SendBinary(ctx, []byte(`{"id":"bin-1","method":"environment/status"}`)); err != nil {
		t.Fatal(err)
	}
	m, err := c.WaitResponse(ctx, json.RawMessage(`"bin-1"`))
	if err != nil {
		t.Fatal(err)
	}
	wantStatusReady(t, "request in a binary frame", m.Result, errOf(m))
}

func errOf(m *wiretest.Message) error {
	if m.Error != nil {
		return m.Error
	}
	return nil
}

// PROTOCOL.md §2: a message that is not valid JSON or not a valid envelope gets an id -1 error and the
// connection stays open.
func TestMalformedMessages(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr transport) {
		c := session(t, tr)
		ctx := tctx(t, wait)
		for _, bad := range []string{`{not json`, `42`, `[1,2,3]`, `"just a string"`, `{"id":1,"method":`} {
			if err := c.SendRaw(ctx, []byte(bad)); err != nil {
				t.Fatal(err)
			}
			m, err := c.WaitResponse(ctx, json.RawMessage(`-1`))
			if err != nil {
				t.Fatalf("after %q: %v", bad, err)
			}
			if m.Error == nil || m.Error.Code != -32600 || m.Error.Message == "" {
				t.Errorf("after %q: want {\"id\":-1,\"error\":{\"code\":-32600,...}}, got %s", bad, m.Raw)
			}
			res, err := call(ctx, c, "environment/status", nil)
			wantStatusReady(t, "environment/status after "+bad, res, err)
		}

		// Before the handshake too, and the handshake still works afterwards.
		c2 := tr.connect(t)
		if err := c2.SendRaw(ctx, []byte(`{not json`)); err != nil {
			t.Fatal(err)
		}
		if m, err := c2.WaitResponse(ctx, json.RawMessage(`-1`)); err != nil || m.Error == nil || m.Error.Code != -32600 {
			t.Errorf("malformed message before initialize: %v %v", m, err)
		}
		if _, err := c2.Initialize(ctx); err != nil {
			t.Errorf("initialize after a malformed message: %v", err)
		}
	})
}
