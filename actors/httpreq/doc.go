// Package httpreq makes the HTTP requests of http/request on the executor's
// own network: validation, sending with a timeout, buffered bodies with a
// cap, and bodies read piece by piece for streaming. It knows nothing of
// actors or the wire; the connection actor maps its errors to JSON-RPC
// errors and its pieces to http/request/bodyDelta notifications.
//
// # Usage
//
//	c := httpreq.NewClient(httpreq.Options{MaxBodyBytes: 16 << 20})
//	defer c.Close()
//	p, err := c.Prepare(httpreq.Request{Method: "GET", URL: u, Timeout: &d}) // *InvalidError
//	resp, err := p.Send(ctx)        // after the headers; *TimeoutError or the transport's error
//	body, err := resp.ReadAll()     // buffered, capped: ErrBodyTooLarge
//	n, err := resp.Read(buf)        // or streamed, as it arrives; io.EOF at the end
//
// Only http and https URLs are accepted. The method is sent as given (any
// RFC 9110 token). Request headers keep their order and repeats; a Host
// header sets the request's host. No User-Agent is added; Accept defaults to
// */*. A header's ValueEnvVar appends that variable of the executor's
// environment (Options.LookupEnv) to its value; ProtectedEnvVars (the
// executor's own credentials, any case), unset and empty variables are
// refused before anything is sent. Redirects are followed (at most 10)
// unless the request says StopRedirects: then the redirect is the answer.
// Bodies are not decompressed. Response header names are lower-cased
// and sorted, each name's values in arrival order.
//
// # Concurrency
//
// A Client may be used by any number of goroutines. A Prepared is sent
// once; a Response is read by one goroutine at a time.
//
// # Failure semantics
//
// Prepare fails with *InvalidError before anything is sent. Send fails
// with *TimeoutError when the request's Timeout elapsed, or with the
// transport's error (*url.Error: refused, DNS, TLS...). The Timeout covers
// the whole exchange, so a body read can also end with *TimeoutError.
// Cancelling Send's ctx aborts the exchange, body included. A buffered body
// larger than MaxBodyBytes is ErrBodyTooLarge: a Content-Length over the cap
// is refused before reading; otherwise reading stops one byte past it.
//
// # Backpressure
//
// Nothing is buffered beyond what the caller asks for: ReadAll holds at
// most MaxBodyBytes+1 bytes, and Read returns what the transport has; a
// caller that stops reading leaves the rest in the TCP connection, which
// slows the sender. Memory for a streamed body of any size is thus bounded
// by the caller's buffers.
package httpreq
