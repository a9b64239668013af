package pgtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Proxy is a TCP proxy between the code under test and the PostgreSQL
// server of the PG* variables, which the test can cut and restore: a real
// database outage on demand (connections drop, new ones are refused) that
// leaves the shared cluster, which other tests use, running.
type Proxy struct {
	lis      net.Listener
	network  string // the upstream's network: "tcp" or "unix"
	upstream string

	// lock guards cut and conns.
	lock  sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy in front of the PG* server on a loopback port; it
// stops when the test ends.
func NewProxy(t testing.TB) *Proxy {
	t.Helper()
	pc, err := pgconn.ParseConfig("")
	if err != nil {
		t.Fatalf("pgtest: parsing PG* environment: %v", err)
	}
	p := &Proxy{network: "tcp", upstream: net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), conns: map[net.Conn]struct{}{}}
	if strings.HasPrefix(pc.Host, "/") {
		p.network, p.upstream = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", pc.Host, pc.Port)
	}
	if p.lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatalf("pgtest: proxy listen: %v", err)
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Host and Port are where the proxy listens.
func (p *Proxy) Host() string { return "127.0.0.1" }

// Port is the proxy's port.
func (p *Proxy) Port() uint16 { return uint16(p.lis.Addr().(*net.TCPAddr).Port) }

// DSN is a connection string for database name through the proxy; the
// user and password still come from the PG* variables.
func (p *Proxy) DSN(name string) string {
	return fmt.Sprintf("host=%s port=%d dbname=%s sslmode=disable", p.Host(), p.Port(), name)
}

// Config is a pool configuration for database name through the proxy.
func (p *Proxy) Config(t testing.TB, name string) *pgxpool.Config {
	t.Helper()
	cfg := Config(t, name)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = p.Host(), p.Port()
	// Plain TCP on loopback, and no fallback that would bypass the proxy.
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	return cfg
}

// Cut starts the outage: every proxied connection is dropped, and new ones
// are refused until Restore.
func (p *Proxy) Cut() {
	p.lock.Lock()
	defer p.lock.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore ends the outage: new connections reach the server again.
func (p *Proxy) Restore() {
	p.lock.Lock()
	defer p.lock.Unlock()
	p.cut = false
}

func (p *Proxy) close() {
	_ = p.lis.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.lock.Lock()
		if p.cut {
			p.lock.Unlock()
			refuse(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
		p.lock.Unlock()
	}
}

// refuse closes c with a reset, as a stopped server's port answers.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	var d net.Dialer
	up, err := d.DialContext(context.Background(), p.network, p.upstream)
	if err != nil {
		refuse(c)
		return
	}
	p.lock.Lock()
	if p.cut {
		p.lock.Unlock()
		refuse(c)
		_ = up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.lock.Unlock()
	done := make(chan struct{}, 2)
	// A copy ends when either side closes or Cut drops the pair; the
	// error says nothing a test needs.
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
	p.lock.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.lock.Unlock()
}
