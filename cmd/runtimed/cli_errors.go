package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/runtimed/runtimed/runtime"
	"github.com/runtimed/runtimed/wire"
)

// explainDial turns a failed connection into a message that says what to
// do about it; other errors pass unchanged.
func explainDial(err error, url string, haveToken bool) error {
	if err == nil {
		return nil
	}
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var dialErr *wire.DialError
	switch {
	case errors.Is(err, runtime.ErrBadURL):
		return err
	case errors.Is(err, runtime.ErrUnauthorized) && haveToken:
		return fmt.Errorf("%s refused the token (HTTP 401): check the file given to --token-file or RUNTIMED_AUTH_TOKEN against the server's --auth-token-file", url)
	case errors.Is(err, runtime.ErrUnauthorized):
		return fmt.Errorf("%s requires a token (HTTP 401): pass --token-file FILE or set RUNTIMED_AUTH_TOKEN", url)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w\nthe server's certificate is not signed by an authority this machine trusts: pass --ca FILE (the server's certificate or its CA, PEM)", err)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%w\nthe server's certificate is not valid for the host in --connect: connect by a name or IP the certificate lists", err)
	case strings.HasPrefix(url, "ws://") && (errors.As(err, &dialErr) && dialErr.Status == http.StatusBadRequest || strings.Contains(err.Error(), "malformed HTTP response")):
		return fmt.Errorf("%w\nthe server seems to speak TLS (HTTP 400 to a plain upgrade): connect with wss://%s", err, strings.TrimPrefix(url, "ws://"))
	case strings.Contains(err.Error(), "connection refused"):
		return fmt.Errorf("%w\nis runtimed serving there? (runtimed serve prints its URL as the first line)", err)
	}
	return err
}

// setUsage sets fs's usage text: the synopsis, what the command does, and
// every flag with its default.
func setUsage(fs *flag.FlagSet, w io.Writer, synopsis, about string) {
	fs.Usage = func() {
		fmt.Fprintf(w, "usage: %s\n\n%s\n", synopsis, strings.TrimSpace(about))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
}

// parseArgs parses args; done reports that the command should return
// code (0 after -h/--help, 2 after a bad flag, which flag already printed).
func parseArgs(fs *flag.FlagSet, args []string) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return 0, true
	}
	return 2, true
}

// printProcessTable prints process/list as aligned columns.
func printProcessTable(w io.Writer, procs []runtime.ProcessInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tPID\tSTATE\tEXIT\tTTY\tNEXTSEQ\tCOMMAND")
	for _, p := range procs {
		exit := "-"
		if p.ExitCode != nil {
			exit = strconv.Itoa(*p.ExitCode)
		}
		tty := "no"
		if p.TTY {
			tty = "yes"
		}
		cmd := strings.Join(p.Argv, " ")
		if len(cmd) > 80 {
			cmd = cmd[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", p.ID, p.Pid, p.State, exit, tty, p.NextSeq, cmd)
	}
	_ = tw.Flush()
	if len(procs) == 0 {
		fmt.Fprintln(w, "(no processes in this session)")
	}
}
