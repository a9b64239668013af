// Package nodespec is the part of a node's desired state that commands lean
// on: GPU holds and instances with passthrough GPUs. The control plane stores
// it as a generation-numbered, signed document; bcd applies it and hands it to
// plugins through the Host service (kind.Host.NodeSpec), where gpu.reset and
// diag.dcgm read it to refuse work on a GPU in use.
package nodespec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Spec is one generation of a node's spec.
type Spec struct {
	// Holds are GPU assignments: on a whole GPU, a MIG instance or a slot.
	Holds []Hold `json:"holds,omitempty"`
	// Instances are VMs or containers, some with GPUs passed through.
	Instances []Instance `json:"instances,omitempty"`
	// RebootRequired is set by desired state when a host setting waits for a boot.
	RebootRequired bool `json:"rebootRequired,omitempty"`
}

// HoldState says whether a hold is in force.
type HoldState string

// Hold states. Only a live hold makes a GPU busy.
const (
	HoldLive     HoldState = "live"
	HoldReleased HoldState = "released"
)

// Hold is an assignment of a GPU, or of part of one, to an allocation.
type Hold struct {
	// GPU is the UUID of the physical GPU (GPU-…), always set, also for MIG and slot holds.
	GPU string `json:"gpu"`
	// MIG is the MIG device UUID (MIG-…) when the hold is on a MIG instance.
	MIG string `json:"mig,omitempty"`
	// Slot names a time-sliced slot of the GPU when the hold is on one.
	Slot string `json:"slot,omitempty"`
	// Allocation names who holds it.
	Allocation string `json:"allocation,omitempty"`
	// State is live or released.
	State HoldState `json:"state"`
}

// Instance is a VM or container on the node.
type Instance struct {
	// Name identifies the instance (inst_…).
	Name string `json:"name"`
	// PassthroughGPUs are the UUIDs of GPUs passed through to it.
	PassthroughGPUs []string `json:"passthroughGpus,omitempty"`
}

// Parse reads a spec document; an empty document is the empty spec.
func Parse(b []byte) (Spec, error) {
	var s Spec
	if len(strings.TrimSpace(string(b))) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("node spec: %w", err)
	}
	return s, s.Validate()
}

// Validate reports holds without a GPU or with an unknown state.
func (s Spec) Validate() error {
	var errs []error
	for i, h := range s.Holds {
		if h.GPU == "" {
			errs = append(errs, fmt.Errorf("holds[%d]: gpu is required", i))
		}
		if h.State != HoldLive && h.State != HoldReleased {
			errs = append(errs, fmt.Errorf("holds[%d]: state %q must be live or released", i, h.State))
		}
	}
	for i, in := range s.Instances {
		if in.Name == "" {
			errs = append(errs, fmt.Errorf("instances[%d]: name is required", i))
		}
	}
	return errors.Join(errs...)
}

// BusyReason says why the GPU with uuid is in use, in the spec's words
// ("<uuid> has a live assignment", "<uuid> is passed through to <instance>"),
// or "" when nothing in the spec holds it.
func (s Spec) BusyReason(uuid string) string {
	for _, h := range s.Holds {
		if h.State == HoldLive && strings.EqualFold(h.GPU, uuid) {
			return uuid + " has a live assignment"
		}
	}
	for _, in := range s.Instances {
		for _, g := range in.PassthroughGPUs {
			if strings.EqualFold(g, uuid) {
				return uuid + " is passed through to " + in.Name
			}
		}
	}
	return ""
}
