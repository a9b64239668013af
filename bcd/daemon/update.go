package daemon

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/better-compute/commands/bcd/accept"
	"github.com/better-compute/commands/bcd/journal"
)

// Update is one report about a command: a state change, a progress step or
// the outcome. The session client turns each into a CommandUpdate.
type Update struct {
	// CommandID names the command.
	CommandID string `json:"commandId"`
	// Kind is the command's kind.
	Kind string `json:"kind"`
	// State is the command's state; progress steps carry running.
	State journal.State `json:"state"`
	// Reason is the failure reason (interrupted, plugin-crashed, ...) or,
	// for a rejected command, the refusal's explanation.
	Reason string `json:"reason,omitempty"`
	// RejectCode is set when State is rejected.
	RejectCode accept.Code `json:"rejectCode,omitempty"`
	// Message explains the outcome in words.
	Message string `json:"message,omitempty"`
	// Result is the kind's JSON result document and ResultSHA256 its hex
	// SHA-256.
	Result       json.RawMessage `json:"result,omitempty"`
	ResultSHA256 string          `json:"resultSha256,omitempty"`
	// Rebooted is set when a new boot completed a self-terminating kind.
	Rebooted bool `json:"rebooted,omitempty"`
	// NodeSig is the node key's signature over the outcome of an attested
	// kind (a trust.ResultStatement); nil otherwise.
	NodeSig []byte `json:"nodeSig,omitempty"`
	// Progress is set on progress steps, nil on state changes.
	Progress *Progress `json:"progress,omitempty"`
	// Duplicate is set when the update answers a duplicate delivery from
	// the journal or from the running command it re-attached to.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Progress is a step of a running command.
type Progress struct {
	// Percent is 0..100, or -1 when unknown.
	Percent int `json:"percent"`
	// Message says what the step is.
	Message string `json:"message,omitempty"`
}

// Terminal reports whether the update is the command's outcome.
func (u Update) Terminal() bool { return u.Progress == nil && u.State.Terminal() }

// updateOf is a record's state as an update.
func updateOf(r journal.Record) Update {
	return Update{
		CommandID:    r.ID,
		Kind:         r.Kind,
		State:        r.State,
		Reason:       r.Reason,
		RejectCode:   accept.Code(r.RejectCode),
		Message:      r.Message,
		Result:       r.Result,
		ResultSHA256: r.ResultSHA256,
		Rebooted:     r.Rebooted,
	}
}

// watcher receives one command's updates (or every command's, for a
// subscription). State changes are delivered until ctx ends; progress steps
// are dropped when the watcher is behind, since the next step supersedes
// them.
type watcher struct {
	ctx context.Context
	ch  chan Update
}

const watcherBuffer = 64

func newWatcher(ctx context.Context) *watcher {
	return &watcher{ctx: ctx, ch: make(chan Update, watcherBuffer)}
}

func (w *watcher) send(u Update) {
	if u.Progress != nil {
		select {
		case w.ch <- u:
		default:
		}
		return
	}
	select {
	case w.ch <- u:
	case <-w.ctx.Done():
	}
}

// subscribers are the daemon-wide watchers (the session client).
type subscribers struct {
	// lock guards set; it is held for reading while sending, and for
	// writing while a subscriber's channel is closed, so a send never
	// meets a closed channel.
	lock sync.RWMutex
	set  map[*watcher]struct{}
	// onState is Config.OnState.
	onState func(Update)
}

func (s *subscribers) publish(u Update) {
	if s.onState != nil && u.Progress == nil && !u.Duplicate {
		s.onState(u)
	}
	s.lock.RLock()
	defer s.lock.RUnlock()
	for w := range s.set {
		w.send(u)
	}
}

// Subscribe returns every command's updates, from now on, until ctx ends;
// then the channel is closed. The session client reads it to report
// outcomes, including those Recover settles, which no Submit waits for.
func (d *Daemon) Subscribe(ctx context.Context) <-chan Update {
	w := newWatcher(ctx)
	d.subs.lock.Lock()
	d.subs.set[w] = struct{}{}
	d.subs.lock.Unlock()
	go func() {
		<-ctx.Done()
		d.subs.lock.Lock()
		delete(d.subs.set, w)
		close(w.ch)
		d.subs.lock.Unlock()
	}()
	return w.ch
}
