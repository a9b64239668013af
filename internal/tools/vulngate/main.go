// Command vulngate reads govulncheck's JSON (-format json) on stdin and
// fails when the code calls a vulnerable function that the accepted file
// does not name: make lint's gate. An accepted entry is one line, the
// OSV id and after "#" why it is accepted (a fix that needs a Go this
// machine cannot have, say); a finding the code does not call is listed
// but never fails the gate, as govulncheck's own text output says.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// message is the part of one govulncheck JSON message the gate reads.
type message struct {
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: govulncheck -format json ./... | vulngate ACCEPTED-FILE")
		os.Exit(2)
	}
	accepted, err := readAccepted(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulngate:", err)
		os.Exit(2)
	}
	called, err := calledFindings(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vulngate:", err)
		os.Exit(2)
	}
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	failed := 0
	for _, id := range ids {
		if why, ok := accepted[id]; ok {
			fmt.Printf("accepted %s (%s): %s\n", id, called[id], why)
			continue
		}
		failed++
		fmt.Printf("VULNERABLE %s (%s): https://pkg.go.dev/vuln/%s\n", id, called[id], id)
	}
	fmt.Printf("govulncheck: %d vulnerabilities the code calls, %d accepted in %s\n", len(ids), len(ids)-failed, os.Args[1])
	if failed > 0 {
		os.Exit(1)
	}
}

// calledFindings returns each OSV id whose trace reaches a function (the
// code calls it), with what it is in and the version that fixes it.
func calledFindings(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var m message
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("reading govulncheck's JSON: %w", err)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		out[f.OSV] = fmt.Sprintf("%s %s, fixed in %s", f.Trace[0].Module, f.Trace[0].Package, f.FixedVersion)
	}
}

// readAccepted reads "ID # why" lines; a line without a why is refused.
func readAccepted(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, why, _ := strings.Cut(line, "#")
		if strings.TrimSpace(why) == "" {
			return nil, fmt.Errorf("%s:%d: %s is accepted without a reason after #", path, n+1, strings.TrimSpace(id))
		}
		out[strings.TrimSpace(id)] = strings.TrimSpace(why)
	}
	return out, nil
}
