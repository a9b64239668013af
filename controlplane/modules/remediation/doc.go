// Package remediation runs the platform's own destructive work on a node:
// one row per planned action (remediations), taken within the pool's
// disruption budget under the node's maintenance lock, sent under a
// platform batch whose leaf names the node and kind, then verified, and
// escalated instead of tried again when it did not help.
//
// The provision module's rule lives here too: "A GPU with RowRemapPending
// on a node: once no allocation is live on that GPU (no hold names it or
// its MIG instances or slots, and no VM has it passed through), queue
// gpu.reset for it under a platform batch whose leaf names the node and
// kind, within the pool's budget; after the reset, check the fresh
// inventory shows the condition cleared; if it did not, escalate (a node
// condition and an event) instead of resetting again."
package remediation
