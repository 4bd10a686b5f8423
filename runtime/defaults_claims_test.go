package runtime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runtimed/runtimed/actors"
)

// The defaults the documentation states are the code's: each claim is
// read from Config's field comments and README's budgets table and checked
// against what the code does (the budgets derived for a machine, the
// constants). A reworded claim that the test no longer finds fails it too:
// update the test with the text. README's and docs/operations.md's flag
// tables are checked against the binary's flags in cmd/runtimed.

// fieldDocs returns Config's field comments, by field name, as one line each.
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	af, err := parser.ParseFile(token.NewFileSet(), "server.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(af, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, f := range ts.Type.(*ast.StructType).Fields.List {
			text := strings.Join(strings.Fields(f.Doc.Text()+" "+f.Comment.Text()), " ")
			for _, n := range f.Names {
				out[n.Name] = text
			}
		}
		return false
	})
	return out
}

var fractions = map[string][2]int64{
	"half": {1, 2}, "a quarter": {1, 4}, "three quarters": {3, 4}, "an eighth": {1, 8},
	"a sixteenth": {1, 16}, "a thirty-second": {1, 32}, "a sixty-fourth": {1, 64},
}

const fractionRE = `(half|a quarter|three quarters|an eighth|a sixteenth|a thirty-second|a sixty-fourth)`

func parseBytes(t *testing.T, s string) int64 {
	t.Helper()
	f := strings.Fields(s)
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || len(f) != 2 {
		t.Fatalf("bad size %q", s)
	}
	unit := map[string]float64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[f[1]]
	return int64(v * unit)
}

// claim finds re in text, failing when the text no longer says it.
func claim(t *testing.T, where, text, re string) []string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s no longer states %q (update this test with its new wording):\n%s", where, re, text)
	}
	return m
}

func TestDocumentedDefaultsAreTheCode(t *testing.T) {
	docs := fieldDocs(t)
	// A machine on which each budget's own formula is the smaller one.
	m := Machine{OpenFiles: 1 << 20, OpenNow: 0, MemoryBytes: 1 << 50}
	b := Config{}.budgets(m)
	fdBudget := int64(m.OpenFiles - m.OpenNow - fdOverhead)
	mem := m.MemoryBytes

	c := claim(t, "Config.MaxConnections", docs["MaxConnections"], `default: the smaller of `+fractionRE+` of the descriptor budget`)
	if f := fractions[c[1]]; int64(b.MaxConnections) != fdBudget*f[0]/f[1]/actors.FDsPerConnection {
		t.Errorf("Config.MaxConnections says %s of the descriptor budget (%d); the code derives %d", c[1], fdBudget*f[0]/f[1], b.MaxConnections)
	}
	c = claim(t, "Config.MaxOpenFiles", docs["MaxOpenFiles"], `connections \((\d+) each\) and processes \((\d+) each\)`)
	if c[1] != strconv.Itoa(actors.FDsPerConnection) || c[2] != strconv.Itoa(actors.FDsPerProcess) {
		t.Errorf("Config.MaxOpenFiles charges connections %s and processes %s each; the code %d and %d", c[1], c[2], actors.FDsPerConnection, actors.FDsPerProcess)
	}
	c = claim(t, "Config.MaxProcessesTotal", docs["MaxProcessesTotal"], `without the reserve / (\d+)`)
	if c[1] != strconv.Itoa(actors.FDsPerProcess) {
		t.Errorf("Config.MaxProcessesTotal divides by %s; the code by %d", c[1], actors.FDsPerProcess)
	}
	c = claim(t, "Config.MaxRetainedBytes", docs["MaxRetainedBytes"], `read-ahead \((\d+) reads of up to (\d+ [KMG]iB)\)`)
	reads, _ := strconv.ParseInt(c[1], 10, 64)
	if got := actors.RetainedPerProcess(actors.ProcConfig{RetainBytes: DefaultRetainBytes}) - DefaultRetainBytes; reads*parseBytes(t, c[2]) != got {
		t.Errorf("Config.MaxRetainedBytes says a read-ahead of %s reads of %s; the code charges %d bytes", c[1], c[2], got)
	}
	for _, f := range []struct {
		field string
		got   int64
	}{{"MaxRetainedBytes", b.MaxRetainedBytes}, {"MaxOutboundBytes", b.MaxOutboundBytes}, {"MaxInboundBytes", b.MaxInboundBytes}} {
		c = claim(t, "Config."+f.field, docs[f.field], `[Dd]efault[^)]*?`+fractionRE+` of memory`)
		if fr := fractions[c[1]]; f.got != mem*fr[0]/fr[1] {
			t.Errorf("Config.%s says %s of memory (%d); the code derives %d", f.field, c[1], mem*fr[0]/fr[1], f.got)
		}
	}
	c = claim(t, "Config.MaxOutboundBytes", docs["MaxOutboundBytes"], `OutboundQueueBytes \(default (\d+ [KMG]iB)`)
	if parseBytes(t, c[1]) != DefaultOutboundQueueBytes {
		t.Errorf("Config.MaxOutboundBytes says a queue defaults to %s; the code %d", c[1], DefaultOutboundQueueBytes)
	}
	c = claim(t, "Config.MaxInboundBytes", docs["MaxInboundBytes"], `(twice|\d+ times) MaxMessageBytes \(per connection\)`)
	if c[1] != "twice" || b.ConnInboundBytes != 2*DefaultMaxMessageBytes {
		t.Errorf("Config.MaxInboundBytes says %s MaxMessageBytes per connection; the code derives %d", c[1], b.ConnInboundBytes)
	}
	c = claim(t, "Config.SlowConsumerTimeout", docs["SlowConsumerTimeout"], `\(default (\d+) s\)`)
	if n, _ := strconv.Atoi(c[1]); time.Duration(n)*time.Second != DefaultSlowConsumerTimeout {
		t.Errorf("Config.SlowConsumerTimeout says %s s; the code %v", c[1], DefaultSlowConsumerTimeout)
	}

	// README's budgets table.
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := func(flag string) string {
		for _, l := range strings.Split(string(readme), "\n") {
			if strings.HasPrefix(l, "| ") && strings.Contains(l, "(`"+flag+"`)") {
				return l
			}
		}
		t.Fatalf("README's budgets table has no row for %s", flag)
		return ""
	}
	for _, f := range []struct {
		flag, what string
		got        int64
		scale      int64
	}{
		{"--max-connections", "open files", int64(b.MaxConnections) * actors.FDsPerConnection, fdBudget},
		{"--max-retained-bytes", "memory", b.MaxRetainedBytes, mem},
		{"--max-outbound-bytes", "memory", b.MaxOutboundBytes, mem},
		{"--max-inbound-bytes", "memory", b.MaxInboundBytes, mem},
	} {
		c = claim(t, "README's "+f.flag+" row", row(f.flag), fractionRE+` of `+f.what)
		if fr := fractions[c[1]]; f.got != f.scale*fr[0]/fr[1] {
			t.Errorf("README: %s defaults to %s of %s (%d); the code derives %d", f.flag, c[1], f.what, f.scale*fr[0]/fr[1], f.got)
		}
	}
	c = claim(t, "README's --max-open-files row", row("--max-open-files"), `(\d+) per connection, (\d+) per active process`)
	if c[1] != strconv.Itoa(actors.FDsPerConnection) || c[2] != strconv.Itoa(actors.FDsPerProcess) {
		t.Errorf("README charges %s per connection and %s per process; the code %d and %d", c[1], c[2], actors.FDsPerConnection, actors.FDsPerProcess)
	}
	c = claim(t, "README's --max-outbound-bytes row", row("--max-outbound-bytes"), "`--outbound-queue-bytes` \\((\\d+ [KMG]iB)\\)")
	if parseBytes(t, c[1]) != DefaultOutboundQueueBytes {
		t.Errorf("README: a queue is %s; the code %d", c[1], DefaultOutboundQueueBytes)
	}
}
