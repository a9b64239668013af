package fakedaemon

import agentv1 "github.com/better-compute/commands/proto/bc/agent/v1"

// SecretResponses returns every SecretResponse the gateway sent so far.
func (d *Daemon) SecretResponses() []*agentv1.SecretResponse {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.SecretResponse(nil), d.secretResponses...)
}

// Received returns every command delivered so far, duplicates included.
func (d *Daemon) Received() []*agentv1.Command {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.Command(nil), d.received...)
}

// Runs reports how often the fake ran command id (duplicates answered from
// the journal do not count).
func (d *Daemon) Runs(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.runs[id]
}

// Cancels returns the ids of the Cancel messages received.
func (d *Daemon) Cancels() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.cancels...)
}

// Acks reports how many of its updates for command id the gateway
// acknowledged: an acknowledged update was processed, landed or fenced.
func (d *Daemon) Acks(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acks[id]
}

// Specs returns the Spec messages received, in order.
func (d *Daemon) Specs() []*agentv1.Spec {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.Spec(nil), d.specs...)
}

// Welcome returns the last Welcome.
func (d *Daemon) Welcome() *agentv1.Welcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.welcome
}

// Envelopes returns every command envelope received, as received.
func (d *Daemon) Envelopes() []*agentv1.CommandEnvelope {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*agentv1.CommandEnvelope(nil), d.envelopes...)
}
