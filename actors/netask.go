package actors

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/runtimed/runtimed/actors/netproxy"
	"github.com/runtimed/runtimed/wire"
)

// The connection's side of a managed network: network/policyDecision
// notifications and network/policyRequest, a request from the server to
// the client. A process's proxy may outlive the connection that started
// it (a detached session): its notifications then go nowhere (they were
// counted and logged) and its asks are denied (not_allowed) at once.

// askerMaxPending bounds a connection's unanswered network/policyRequest
// (beyond it an ask is denied at once).
const askerMaxPending = 1024

// maxPolicyReason bounds a client's reason (the reference's limit).
const maxPolicyReason = 1024

// askerMailbox is the asker's mailbox capacity.
const askerMailbox = 64

// asker owns a connection's pending server requests. Its goroutine is
// the only owner of pending; the reader hands it answers, askers register
// and withdraw through mbox (bounded; every send selects on the
// connection's end).
type asker struct {
	mbox    chan askMsg
	done    <-chan struct{}
	nextID  atomic.Uint64
	pending map[string]chan<- askAnswer // owned by run
}

type askKind int

const (
	askRegister askKind = iota
	askAnswerMsg
	askWithdraw
)

type askMsg struct {
	kind   askKind
	id     string
	reply  chan<- askAnswer // register: capacity 1
	answer askAnswer
}

type askAnswer struct {
	result json.RawMessage
	err    json.RawMessage
}

var errAskRefused = errors.New("actors: too many pending policy requests")

func (a *asker) run() {
	for {
		select {
		case m := <-a.mbox:
			switch m.kind {
			case askRegister:
				if len(a.pending) >= askerMaxPending {
					close(m.reply) // refused
					continue
				}
				a.pending[m.id] = m.reply
			case askWithdraw:
				delete(a.pending, m.id)
			case askAnswerMsg:
				if r, ok := a.pending[m.id]; ok {
					delete(a.pending, m.id)
					r <- m.answer // capacity 1, never blocks
				}
			}
		case <-a.done:
			return
		}
	}
}

func (a *asker) send(ctx context.Context, m askMsg) bool {
	select {
	case a.mbox <- m:
		return true
	case <-ctx.Done():
	case <-a.done:
	}
	return false
}

// startAsker starts the connection's asker once (reader goroutine only).
func (c *conn) startAsker() *asker {
	if c.ask == nil {
		c.ask = &asker{mbox: make(chan askMsg, askerMailbox), done: c.ctx.Done(), pending: map[string]chan<- askAnswer{}}
		c.wg.Go(c.ask.run)
	}
	return c.ask
}

// answer routes a client's response (reader goroutine); false when no
// request of ours is pending (the client may not send responses then).
func (c *conn) answer(msg wire.Message) bool {
	if c.ask == nil {
		return false
	}
	var id string
	if err := json.Unmarshal(msg.ID, &id); err != nil {
		return false
	}
	c.ask.send(c.ctx, askMsg{kind: askAnswerMsg, id: id, answer: askAnswer{result: msg.Result, err: msg.Error}})
	return true
}

// policyAsker returns the Ask of processID's proxies: a
// network/policyRequest to this connection's client.
func (c *conn) policyAsker(processID string) netproxy.AskFunc {
	a := c.startAsker()
	return func(ctx context.Context, r netproxy.AskRequest) (bool, string, error) {
		id := "runtimed-net-" + strconv.FormatUint(a.nextID.Add(1), 10)
		reply := make(chan askAnswer, 1)
		if !a.send(ctx, askMsg{kind: askRegister, id: id, reply: reply}) {
			return false, "", context.Cause(ctx)
		}
		b, err := wire.AppendRequest(nil, wire.ID(strconv.Quote(id)), wire.ServerRequestNetworkPolicy, wire.PolicyRequestParams{
			ProcessID: processID,
			Request:   wire.PolicyRequestTarget{Protocol: string(r.Protocol), Host: r.Host, Port: r.Port},
		})
		if err != nil {
			a.send(ctx, askMsg{kind: askWithdraw, id: id})
			return false, "", err
		}
		c.enqueue(outItem{b: b, size: len(b)})
		select {
		case ans, ok := <-reply:
			if !ok {
				return false, "", errAskRefused
			}
			if len(ans.err) > 0 && string(ans.err) != "null" {
				return false, "", errors.New("the client answered an error")
			}
			allow, reason := wire.ParsePolicyRequestResult(ans.result)
			if !allow && reason == netproxy.ReasonNotAllowed {
				return false, "", errors.New("malformed answer")
			}
			if len(reason) > maxPolicyReason || strings.IndexFunc(reason, unicode.IsControl) >= 0 {
				return false, "", errors.New("unusable reason") // as the reference: not_allowed
			}
			return allow, reason, nil
		case <-ctx.Done():
		case <-a.done:
		}
		// Withdraw without waiting on the caller's (ended) ctx.
		wctx, cancel := context.WithTimeout(context.Background(), time.Second)
		a.send(wctx, askMsg{kind: askWithdraw, id: id})
		cancel()
		return false, "", errors.New("no answer")
	}
}

// policyNotifier returns the Notify of processID's proxies.
func (c *conn) policyNotifier(processID string) func(netproxy.Event) {
	return func(e netproxy.Event) {
		c.notify(wire.NotifyNetworkPolicyDecision, policyDecisionParams(processID, e))
	}
}

func policyDecisionParams(processID string, e netproxy.Event) wire.PolicyDecisionParams {
	d := "deny"
	if e.Allow {
		d = "allow"
	}
	p := wire.PolicyDecisionParams{ProcessID: processID, Timestamp: e.Time.UTC().Format(wire.PolicyTimestampLayout), Scope: e.Scope, Decision: d,
		Source: e.Source, Reason: e.Reason, Protocol: string(e.Protocol), Host: e.Host, Port: e.Port, PolicyOverride: e.Override}
	if e.Method != "" {
		m := e.Method
		p.Method = &m
	}
	if e.Client != "" {
		cl := e.Client
		p.Client = &cl
	}
	return p
}
