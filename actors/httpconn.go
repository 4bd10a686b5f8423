package actors

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/runtimed/runtimed/actors/httpreq"
	"github.com/runtimed/runtimed/wire"
)

// http/request on a connection (PROTOCOL.md section 7.4).
const (
	// connHTTPCap bounds the http requests in flight on one connection
	// (buffered or streaming, until the last body delta is queued). One
	// more is answered -32600 at once rather than stalling the reader: a
	// streamed body can last as long as the server keeps it open.
	connHTTPCap = 64
	// connHTTPQueueCap bounds requests waiting for the connection's http
	// manager; a full queue makes the reader wait (ctx-bounded).
	connHTTPQueueCap = 16
	// httpDeltaBytes is the most body bytes one bodyDelta carries.
	httpDeltaBytes = 64 << 10
)

// EventMessage is an Event that carries a message already encoded in Data
// (an http/request result or body delta). It goes through the connection's
// events queue so that it keeps its order with the request's other
// messages and is backpressured like process output.
const EventMessage EventKind = 100

// httpCall is one validated http/request for the manager.
type httpCall struct {
	id        wire.ID
	requestID string
	stream    bool
	prep      *httpreq.Prepared
	observe   func() // reports the request's latency (metrics), once answered
}

// httpManager is the connection's http manager goroutine. It owns n (the
// requests in flight), active (the requestIds of streams in flight) and the
// client (its connection pool, closed when the manager ends). The reader
// creates it on the first http/request and feeds it through in.
type httpManager struct {
	in chan httpCall
	// released carries a stream's requestId just before its last delta is
	// queued, so that a client reusing the id once it saw done finds it
	// free; done says a request goroutine ended (capacity connHTTPCap: a
	// send never blocks).
	released chan string
	done     chan struct{}
	client   *httpreq.Client
	n        int
	active   map[string]bool
}

// httpRequest validates an http/request on the reader and hands it to the
// connection's http manager, which runs it on its own goroutine.
func (c *conn) httpRequest(msg wire.Message) {
	if !c.sup.cfg.HTTP.Enabled {
		c.reply(msg.ID, nil, wire.ErrHTTPDisabled())
		return
	}
	var p wire.HTTPRequestParams
	if !c.params(msg, &p) {
		return
	}
	if c.httpm == nil {
		c.outbound()
		c.httpm = &httpManager{
			in:       make(chan httpCall, connHTTPQueueCap),
			released: make(chan string, connHTTPCap),
			done:     make(chan struct{}, connHTTPCap),
			client:   httpreq.NewClient(httpreq.Options{MaxBodyBytes: c.sup.cfg.HTTP.MaxBodyBytes}),
			active:   make(map[string]bool),
		}
		c.wg.Go(c.httpManage)
	}
	stop, werr := p.StopRedirects()
	if werr != nil {
		c.reply(msg.ID, nil, werr)
		return
	}
	c.auditHTTP(p.Method, p.URL)
	req := httpreq.Request{Method: p.Method, URL: p.URL, Body: p.BodyBase64, StopRedirects: stop}
	for _, h := range p.Headers {
		req.Headers = append(req.Headers, httpreq.Header{Name: h.Name, Value: h.Value, ValueEnvVar: h.ValueEnvVar})
	}
	if p.TimeoutMs != nil {
		d := time.Duration(min(*p.TimeoutMs, 24*3600*1000)) * time.Millisecond
		req.Timeout = &d
	}
	prep, err := c.httpm.client.Prepare(req)
	if err != nil {
		c.reply(msg.ID, nil, httpError(err, 0))
		return
	}
	select {
	case c.httpm.in <- httpCall{id: msg.ID, requestID: p.RequestID, stream: p.StreamResponse, prep: prep, observe: c.deferObservation()}:
	case <-c.ctx.Done():
	}
}

// httpManage is the http manager goroutine: it admits calls in arrival
// order (the in-flight bound, one stream per requestId), starts one
// goroutine per call and, when the connection ends, waits for them and
// closes the pool.
func (c *conn) httpManage() {
	m := c.httpm
	defer m.client.Close()
	for {
		select {
		case call := <-m.in:
			m.drainReleased()
			switch {
			case m.n >= connHTTPCap:
				c.reply(call.id, nil, wire.ErrHTTPBusy(connHTTPCap))
				call.observe()
			case call.stream && m.active[call.requestID]:
				c.reply(call.id, nil, wire.ErrHTTPStreamActive(call.requestID))
				call.observe()
			default:
				m.n++
				release := func() {}
				if call.stream {
					m.active[call.requestID] = true
					release = sync.OnceFunc(func() {
						select {
						case m.released <- call.requestID:
						case <-c.ctx.Done():
						}
					})
				}
				c.wg.Go(func() {
					defer func() { m.done <- struct{}{} }()
					defer release()
					c.runHTTP(call, m.client.MaxBodyBytes(), release)
				})
			}
		case id := <-m.released:
			delete(m.active, id)
		case <-m.done:
			m.n--
		case <-c.ctx.Done():
			for ; m.n > 0; m.n-- {
				<-m.done // each request ends promptly: its ctx is the connection's
			}
			return
		}
	}
}

func (m *httpManager) drainReleased() {
	for {
		select {
		case id := <-m.released:
			delete(m.active, id)
		default:
			return
		}
	}
}

// runHTTP makes one request and answers it: buffered, or the result then
// the body as deltas, all through the events queue (a full queue stops the
// body reads: backpressure reaches the remote server through TCP). release
// frees a stream's requestId; it is called before the last delta is queued.
func (c *conn) runHTTP(call httpCall, maxBody int64, release func()) {
	resp, err := call.prep.Send(c.ctx)
	call.observe() // the latency of http/request is the time to the response headers
	if err != nil {
		if c.ctx.Err() == nil {
			c.reply(call.id, nil, httpError(err, maxBody))
		}
		return
	}
	headers := make([]wire.HTTPHeader, len(resp.Headers))
	for i, h := range resp.Headers {
		headers[i] = wire.HTTPHeader{Name: h.Name, Value: h.Value}
	}
	if !call.stream {
		body, err := resp.ReadAll()
		switch {
		case err == nil:
			c.reply(call.id, wire.HTTPResponse{Status: resp.Status, Headers: headers, BodyBase64: body}, nil)
		case errors.Is(err, httpreq.ErrBodyTooLarge):
			c.reply(call.id, nil, wire.ErrHTTPBodyTooLarge(maxBody))
		case c.ctx.Err() == nil:
			c.reply(call.id, nil, wire.ErrHTTPBody(err.Error()))
		}
		return
	}
	defer resp.Close()
	result, err := wire.AppendResult(nil, call.id, wire.HTTPResponse{Status: resp.Status, Headers: headers, BodyBase64: wire.Base64{}})
	if err != nil || !c.queueMessage(result) {
		return
	}
	buf := make([]byte, httpDeltaBytes)
	seq := uint64(1)
	for {
		n, err := resp.Read(buf)
		if n > 0 {
			if !c.queueMessage(wire.AppendHTTPBodyDelta(nil, call.requestID, seq, buf[:n], false, "")) {
				return
			}
			seq++
		}
		if err == nil {
			continue
		}
		errText := ""
		if err != io.EOF {
			if c.ctx.Err() != nil {
				return
			}
			errText = err.Error()
		}
		release()
		c.queueMessage(wire.AppendHTTPBodyDelta(nil, call.requestID, seq, nil, true, errText))
		return
	}
}

// queueMessage puts an encoded message on the events queue, waiting while
// it is full; false when the connection ended.
func (c *conn) queueMessage(b []byte) bool {
	select {
	case c.events <- Event{Kind: EventMessage, Data: b}:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// httpError maps an httpreq error to the reference exec-server's errors.
func httpError(err error, maxBody int64) *wire.Error {
	var inv *httpreq.InvalidError
	if errors.As(err, &inv) {
		switch inv.Kind {
		case httpreq.InvalidMethod:
			return wire.ErrHTTPMethod()
		case httpreq.InvalidURL:
			return wire.ErrHTTPURL(inv.Detail)
		case httpreq.UnsupportedScheme:
			return wire.ErrHTTPScheme(inv.Detail)
		case httpreq.InvalidHeaderName:
			return wire.ErrHTTPHeaderName()
		case httpreq.HeaderEnvProtected:
			return wire.ErrHTTPHeaderEnv("protected", inv.Detail, inv.Var)
		case httpreq.HeaderEnvUnset:
			return wire.ErrHTTPHeaderEnv("unset", inv.Detail, inv.Var)
		case httpreq.HeaderEnvEmpty:
			return wire.ErrHTTPHeaderEnv("empty", inv.Detail, inv.Var)
		default:
			return wire.ErrHTTPHeaderValue(inv.Detail)
		}
	}
	if errors.Is(err, httpreq.ErrBodyTooLarge) {
		return wire.ErrHTTPBodyTooLarge(maxBody)
	}
	return wire.ErrHTTPFailed(err.Error())
}
