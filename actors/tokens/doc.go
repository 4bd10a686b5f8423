// Package tokens holds the named bearer tokens of runtimed serve's
// --auth-token-file: one "NAME TOKEN" pair per line (blank lines and lines
// starting with # are skipped), or a file holding one bare token, which is
// named "default". It knows nothing of actors or the wire.
//
// # Usage
//
//	st, err := tokens.Load(path) // or tokens.NewStore(tokens.Single(tok))
//	name, ok := st.Lookup(presented)
//	err = st.Reload() // on SIGHUP: the file is read again; a bad file keeps the old table
//
// # Concurrency
//
// A [Table] is immutable. A [Store] holds the current table behind an
// atomic pointer: Reload (the signal goroutine) swaps it, Lookup (any HTTP
// handler) reads it; no lock, no I/O under one.
//
// # Failure semantics
//
// Parse refuses a malformed file with an error naming the line (never
// quoting a token): a name outside [A-Za-z0-9._-]{1,64}, a token with
// spaces or control characters, a duplicate name or token, an empty file.
// A failed Reload leaves the previous table in force and returns the error.
//
// # Backpressure
//
// None: lookups are constant-time compares against every token of the
// table (bounded by MaxTokens).
package tokens
