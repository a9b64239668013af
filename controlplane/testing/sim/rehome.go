package sim

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"

	"github.com/better-compute/commands/controlplane/testing/fakedaemon"
)

// runNode holds node i's sessions until ctx ends: the first on conn, and,
// with Rehome, each next one on the next gateway once the last ended (its
// gateway died or closed it). first receives how the first session ended,
// which StartFleet reads while it waits for the Welcome.
func (f *Fleet) runNode(ctx context.Context, i int, d *fakedaemon.Daemon, conn *grpc.ClientConn, first chan<- error) {
	k := f.homes[i]
	for {
		err := d.Run(ctx, conn)
		_ = conn.Close()
		select {
		case first <- err:
		default: // told once; the channel holds one
		}
		if ctx.Err() != nil {
			return
		}
		lost := time.Now()
		f.mu.Lock()
		f.ended++
		f.mu.Unlock()
		f.logger.Warn("session ended", "node_id", d.NodeID, "gateway", f.addrs[k%len(f.addrs)], "error", err)
		if !f.cfg.Rehome {
			return
		}
		epoch := d.Welcome().GetSessionEpoch()
		k++
		// A jittered pause: ten thousand nodes of a dead gateway must not
		// land on the others in the same millisecond.
		delay := f.cfg.RehomeDelay + rand.N(f.cfg.RehomeDelay+1)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if conn, err = f.dial(i, k); err != nil {
			f.logger.Error("re-homing: no client", "node_id", d.NodeID, "error", err)
			return
		}
		f.mu.Lock()
		f.homes[i] = k % len(f.addrs)
		f.mu.Unlock()
		go f.timeRehome(ctx, d, epoch, lost)
	}
}

// timeRehome records how long the node took from its lost session to the
// Welcome of a new one.
func (f *Fleet) timeRehome(ctx context.Context, d *fakedaemon.Daemon, epoch int64, lost time.Time) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for d.Welcome().GetSessionEpoch() == epoch {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	f.mu.Lock()
	f.rehomes = append(f.rehomes, time.Since(lost))
	f.mu.Unlock()
}

// PerGateway counts the nodes whose current (or last) session is on each
// gateway, in Addrs order.
func (f *Fleet) PerGateway() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int, len(f.addrs))
	for _, k := range f.homes {
		out[k]++
	}
	return out
}

// Rehomes are how long each re-homed session took, from the end of the
// node's old session to its new Welcome, in the order they completed.
func (f *Fleet) Rehomes() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.rehomes...)
}
