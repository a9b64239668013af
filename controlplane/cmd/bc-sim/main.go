// Command bc-sim is the fleet simulator: it provisions N nodes in the control
// plane's database, issues them certificates from the node CA, opens one
// FakeDaemon session per node against a gateway, and drives a workload:
//
//	bc-sim --gateway 127.0.0.1:7443 --ca /var/lib/bc/ca --nodes 1000 \
//	       --database-url postgres://... --workload steady --commands 300
//
// Workloads: steady (one command at a time per enqueuer to a random node;
// dispatch latency from commit to the node receiving it), fanout (one
// command to every node in one transaction; the time until all are
// received and settled), both (steady, then fanout), idle (sessions only,
// held for --duration). The
// output is readable text, or one JSON object with --json.
package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/better-compute/commands/controlplane/commands/kinds"
	"github.com/better-compute/commands/controlplane/commands/queue"
	"github.com/better-compute/commands/controlplane/internal/store"
	"github.com/better-compute/commands/controlplane/testing/sim"
	"github.com/better-compute/commands/controlplane/trust/pki"
)

// options are the command line.
type options struct {
	gateway, caDir, serverCA, serverName, databaseURL, workload, logLevel, cpuProfile string
	nodes, commands, concurrency, fanouts                                             int
	duration, timeout                                                                 time.Duration
	jsonOut, waitStdin, marks                                                         bool
}

// Report is what a run measured; --json prints it as one object.
type Report struct {
	Workload string `json:"workload"`
	Nodes    int    `json:"nodes"`
	// ConnectNs is how long opening every session took.
	ConnectNs time.Duration `json:"connectNs"`
	// SessionsEnded counts sessions the gateway closed during the run.
	SessionsEnded int                `json:"sessionsEnded"`
	Steady        *sim.SteadyResult  `json:"steady,omitempty"`
	Fanouts       []sim.FanoutResult `json:"fanouts,omitempty"`
	// SimHeapInuseBytes is the simulator's own heap with every session open.
	SimHeapInuseBytes uint64 `json:"simHeapInuseBytes"`
}

func main() {
	// bc-sim holds thousands of nodes' sessions in one process, where a real
	// fleet spreads them over as many machines, and each of its collections
	// marks the whole fleet's heap: on a machine shared with the gateway it
	// measures, that CPU comes out of the gateway's (a collection during a
	// fan-out to 10,000 nodes cost bc-sim about a second). It lets its heap
	// grow five-fold between collections, not two-fold, unless GOGC says
	// otherwise.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bc-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.gateway, "gateway", "", "gateway address host:port, or several, comma-separated: the nodes spread across them round-robin and a node whose gateway goes away reconnects to the next (required)")
	fs.StringVar(&o.caDir, "ca", "", "node CA directory holding ca.pem and ca-key.pem, to issue the simulated nodes' certificates (required)")
	fs.StringVar(&o.serverCA, "server-ca", "", "PEM file that verifies the gateway's certificate (default: the node CA's ca.pem)")
	fs.StringVar(&o.serverName, "server-name", "", "name in the gateway's certificate (default: the host of --gateway)")
	fs.StringVar(&o.databaseURL, "database-url", "", "the control plane's PostgreSQL, where nodes are created and commands enqueued (required except for --workload idle)")
	fs.StringVar(&o.workload, "workload", "steady", "steady, fanout, both (steady, then fanout) or idle")
	fs.IntVar(&o.nodes, "nodes", 100, "simulated nodes, one session each")
	fs.IntVar(&o.commands, "commands", 0, "steady: commands to send in all (0: until --duration)")
	fs.IntVar(&o.concurrency, "concurrency", 1, "steady: enqueuers at once")
	fs.IntVar(&o.fanouts, "fanouts", 1, "fanout: fan-outs to run, one after another")
	fs.DurationVar(&o.duration, "duration", 0, "steady: how long to send; idle: how long to hold the sessions (0 with idle: until interrupted)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "fanout: how long one fan-out may take to settle")
	fs.BoolVar(&o.jsonOut, "json", false, "print the report as one JSON object")
	fs.BoolVar(&o.marks, "marks", false, "write a line to stderr when the steady workload starts and ends (mark steady-started, mark steady-finished) and when the fan-out commits and settles (mark fanout-committed, mark fanout-settled), for a caller that measures what happens in between")
	fs.BoolVar(&o.waitStdin, "wait-stdin", false, "after every session is open, wait for a line on stdin before the workload (a benchmark measures the idle fleet meanwhile)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level on stderr")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the workload (from the end of the idle wait to the report) to this file, for go tool pprof")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.gateway == "":
		return o, errors.New("--gateway is required")
	case o.caDir == "":
		return o, errors.New("--ca is required: the node CA directory")
	case o.nodes <= 0:
		return o, errors.New("--nodes must be positive")
	case o.workload != "steady" && o.workload != "fanout" && o.workload != "both" && o.workload != "idle":
		return o, fmt.Errorf("--workload %q: want steady, fanout, both or idle", o.workload)
	case o.workload != "idle" && o.databaseURL == "":
		return o, fmt.Errorf("--workload %s needs --database-url", o.workload)
	case (o.workload == "steady" || o.workload == "both") && o.commands <= 0 && o.duration <= 0:
		return o, fmt.Errorf("--workload %s needs --commands or --duration", o.workload)
	}
	return o, nil
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bc-sim:", err)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "bc-sim", Level: hclog.LevelFromString(o.logLevel), Output: stderr})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := simulate(ctx, o, stdin, stderr, logger)
	if err != nil {
		fmt.Fprintln(stderr, "bc-sim:", err)
		return 1
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "bc-sim:", err)
			return 1
		}
		return 0
	}
	printReport(stdout, rep)
	return 0
}

func simulate(ctx context.Context, o options, stdin io.Reader, stderr io.Writer, logger hclog.Logger) (Report, error) {
	rep := Report{Workload: o.workload, Nodes: o.nodes}
	if lim, err := sim.RaiseFileLimit(); err != nil {
		logger.Warn("open-file limit", "error", err)
	} else if lim < uint64(o.nodes)+64 {
		return rep, fmt.Errorf("the open-file limit %d is below the %d sessions asked for: raise ulimit -n", lim, o.nodes)
	}
	if _, err := os.Stat(filepath.Join(o.caDir, "ca-key.pem")); err != nil {
		return rep, fmt.Errorf("--ca %s: the node CA's key is needed to issue node certificates: %w", o.caDir, err)
	}
	ca, err := pki.LoadOrCreateCA(o.caDir)
	if err != nil {
		return rep, err
	}
	roots := ca.Pool()
	if o.serverCA != "" {
		b, err := os.ReadFile(o.serverCA)
		if err != nil {
			return rep, fmt.Errorf("--server-ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return rep, fmt.Errorf("--server-ca %s: no PEM certificate", o.serverCA)
		}
	}

	var (
		pool     *pgxpool.Pool
		q        *queue.Queue
		tenantID string
		nodeIDs  []string
	)
	if o.databaseURL != "" {
		cfg, err := pgxpool.ParseConfig(o.databaseURL)
		if err != nil {
			return rep, fmt.Errorf("--database-url: %w", err)
		}
		cfg.MaxConns = int32(max(4, o.concurrency+2))
		store.ConfigurePool(cfg)
		// The control plane owns the schema: the simulator never migrates.
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return rep, fmt.Errorf("connecting to postgres: %w", err)
		}
		defer pool.Close()
		if err := pool.Ping(ctx); err != nil {
			return rep, fmt.Errorf("connecting to postgres: %w", err)
		}
		reg, err := kinds.NewRegistry(sim.Kind)
		if err != nil {
			return rep, err
		}
		q = queue.New(reg, logger)
		if tenantID, nodeIDs, err = sim.Provision(ctx, pool, q, o.nodes); err != nil {
			return rep, err
		}
		logger.Info("nodes provisioned", "nodes", len(nodeIDs), "tenant_id", tenantID)
	} else {
		for i := range o.nodes {
			nodeIDs = append(nodeIDs, "node_sim_"+strconv.Itoa(i))
		}
	}
	certs, err := sim.IssueCerts(ca, nodeIDs)
	if err != nil {
		return rep, err
	}
	fleet, err := sim.StartFleet(ctx, sim.FleetConfig{
		Addrs: gateways(o.gateway), Rehome: len(gateways(o.gateway)) > 1, ServerName: o.serverName, RootCAs: roots, NodeIDs: nodeIDs, Certs: certs, Logger: logger,
	})
	if err != nil {
		return rep, err
	}
	defer fleet.Close()
	rep.ConnectNs = fleet.ConnectTime
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.SimHeapInuseBytes = ms.HeapInuse
	if o.waitStdin {
		logger.Info("every session is open; waiting for a line on stdin")
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil && !errors.Is(err, io.EOF) {
			return rep, fmt.Errorf("reading stdin: %w", err)
		}
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return rep, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return rep, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	target := sim.Target{Pool: pool, Queue: q, TenantID: tenantID, Fleet: fleet}
	if o.marks {
		// One write a line: a pipe's reader sees it whole, between the
		// logger's lines.
		target.Mark = func(name string) { _, _ = io.WriteString(stderr, "mark "+name+"\n") }
	}
	if o.workload == "steady" || o.workload == "both" {
		res, err := sim.Steady(ctx, target, sim.SteadyOptions{Commands: o.commands, Duration: o.duration, Concurrency: o.concurrency})
		if err != nil {
			return rep, err
		}
		rep.Steady = &res
	}
	if o.workload == "fanout" || o.workload == "both" {
		for i := 0; i < o.fanouts; i++ {
			res, err := sim.Fanout(ctx, target, o.timeout)
			if err != nil {
				return rep, err
			}
			rep.Fanouts = append(rep.Fanouts, res)
		}
	}
	if o.workload == "idle" {
		if o.duration > 0 {
			t := time.NewTimer(o.duration)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		} else if !o.waitStdin {
			<-ctx.Done()
		}
	}
	rep.SessionsEnded = fleet.Ended()
	return rep, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func printReport(w io.Writer, r Report) {
	fmt.Fprintf(w, "workload        %s\n", r.Workload)
	fmt.Fprintf(w, "nodes           %d (sessions open in %s; %d ended during the run)\n", r.Nodes, r.ConnectNs.Round(time.Millisecond), r.SessionsEnded)
	fmt.Fprintf(w, "sim heap        %.1f KiB per session (%d MiB in use)\n", float64(r.SimHeapInuseBytes)/1024/float64(r.Nodes), r.SimHeapInuseBytes>>20)
	if s := r.Steady; s != nil {
		fmt.Fprintf(w, "dispatch        p50 %s  p99 %s  max %s  (commit to node receipt; %d commands, %d lost, %s)\n",
			ms(s.Dispatch.P50), ms(s.Dispatch.P99), ms(s.Dispatch.Max), s.Dispatch.Count, s.Lost, s.Elapsed.Round(time.Millisecond))
		fmt.Fprintf(w, "enqueue tx      p50 %s  p99 %s\n", ms(s.Enqueue.P50), ms(s.Enqueue.P99))
	}
	for i, f := range r.Fanouts {
		fmt.Fprintf(w, "fan-out %-7d %d nodes: enqueued in %s, all received in %s (p50 %s, p99 %s), settled in %s (%d succeeded)\n",
			i+1, f.Nodes, f.Enqueue.Round(time.Millisecond), f.Received.Round(time.Millisecond), ms(f.Receipt.P50), ms(f.Receipt.P99),
			f.Settled.Round(time.Millisecond), f.Succeeded)
	}
}

// gateways splits --gateway's comma-separated addresses.
func gateways(flag string) []string {
	var out []string
	for _, a := range strings.Split(flag, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
