package bmc

import (
	"context"
	"fmt"

	"github.com/better-compute/commands/sdk/kind"
)

// DefaultEvents is how many event log entries bmc.sensors returns.
const DefaultEvents = 50

// SensorsResult is bmc.sensors' result.
type SensorsResult struct {
	BMC     string   `json:"bmc"`
	Machine string   `json:"machine,omitempty"`
	Power   string   `json:"power,omitempty"`
	Sensors []Sensor `json:"sensors"`
	Events  []Event  `json:"events"`
	// EventsError says why the event log could not be read (the sensors
	// still count).
	EventsError string `json:"eventsError,omitempty"`
	Metadata
}

type sensorsPayload struct {
	BMC    string `json:"bmc"`
	Events *int   `json:"events"`
}

func (p *Plugin) sensors(ctx context.Context, req kind.Request) (any, error) {
	var pl sensorsPayload
	if err := req.Command.Decode(&pl); err != nil {
		return nil, kind.Fail(ReasonBadPayload, "%v", err)
	}
	limit := DefaultEvents
	if pl.Events != nil {
		limit = *pl.Events
	}
	b, cred, err := p.target(ctx, req, pl.BMC)
	if err != nil {
		return nil, err
	}
	res := &SensorsResult{BMC: b.ID, Machine: b.Machine}
	_, md, closeProv, err := p.withProviders(ctx, b, cred, func(pctx context.Context, prov Provider) error {
		ss, err := prov.Sensors(pctx)
		if err != nil {
			return fmt.Errorf("reading sensors: %w", err)
		}
		res.Sensors = ss
		if st, err := prov.PowerState(pctx); err == nil {
			res.Power = string(st)
		}
		if limit > 0 {
			ev, err := prov.Events(pctx, limit)
			if err != nil {
				res.EventsError = err.Error()
			}
			res.Events = ev
		}
		return nil
	})
	closeProv()
	res.Metadata = md
	if res.Sensors == nil {
		res.Sensors = []Sensor{}
	}
	if res.Events == nil {
		res.Events = []Event{}
	}
	if err != nil {
		return nil, &kind.Failure{Reason: ReasonUnreachable, Message: fmt.Sprintf("BMC %s: %v", b.ID, err), Result: res}
	}
	return res, nil
}
