package kind

// The converters between kind's types and bc.plugin.v1's messages. Plugins
// need none of them (Serve converts); bcd and harnesses reach them through
// sdk/wire/kindpb, which imports kind for its types and so cannot hold code
// that kind's own server calls: they live here, unexported, and
// sdk/internal/bridge hands them to kindpb.

import (
	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

var laneToProto = map[Lane]pluginv1.Lane{
	LaneControl:   pluginv1.Lane_LANE_CONTROL,
	LaneProvision: pluginv1.Lane_LANE_PROVISION,
	LaneBulk:      pluginv1.Lane_LANE_BULK,
}

// manifestToProto converts a manifest for the wire.
func manifestToProto(m Manifest) *pluginv1.Manifest {
	return &pluginv1.Manifest{
		Kind:    m.Kind,
		Lane:    laneToProto[m.Lane],
		Timeout: durationpb.New(m.Timeout.D()),
		Roles:   append([]string(nil), m.Roles...),
		Flags: &pluginv1.Flags{
			RetrySafe:       m.Flags.RetrySafe,
			Destructive:     m.Flags.Destructive,
			SelfTerminating: m.Flags.SelfTerminating,
			Attested:        m.Flags.Attested,
		},
		ApiRunnable:        m.APIRunnable,
		PayloadSchema:      append([]byte(nil), m.PayloadSchema...),
		Version:            m.Version,
		CompatibleVersions: m.CompatibleVersions,
		Description:        m.Description,
	}
}

// manifestFromProto converts a manifest from the wire. The result is not
// validated: call Validate.
func manifestFromProto(p *pluginv1.Manifest) Manifest {
	m := Manifest{
		Kind:               p.GetKind(),
		Roles:              append([]string(nil), p.GetRoles()...),
		APIRunnable:        p.GetApiRunnable(),
		PayloadSchema:      append([]byte(nil), p.GetPayloadSchema()...),
		Version:            p.GetVersion(),
		Description:        p.GetDescription(),
		CompatibleVersions: p.GetCompatibleVersions(),
	}
	for l, pl := range laneToProto {
		if pl == p.GetLane() {
			m.Lane = l
		}
	}
	if p.GetTimeout() != nil {
		m.Timeout = Duration(p.GetTimeout().AsDuration())
	}
	if f := p.GetFlags(); f != nil {
		m.Flags = Flags{RetrySafe: f.GetRetrySafe(), Destructive: f.GetDestructive(), SelfTerminating: f.GetSelfTerminating(), Attested: f.GetAttested()}
	}
	if len(m.PayloadSchema) == 0 {
		m.PayloadSchema = nil
	}
	return m
}

var statusToProto = map[Status]pluginv1.Status{
	StatusSucceeded: pluginv1.Status_STATUS_SUCCEEDED,
	StatusFailed:    pluginv1.Status_STATUS_FAILED,
	StatusCancelled: pluginv1.Status_STATUS_CANCELLED,
}

// resultToProto converts a result for the wire.
func resultToProto(r Result) *pluginv1.Result {
	return &pluginv1.Result{Status: statusToProto[r.Status], Reason: r.Reason, Message: r.Message, Result: r.Data}
}

// resultFromProto converts a result from the wire.
func resultFromProto(p *pluginv1.Result) Result {
	r := Result{Reason: p.GetReason(), Message: p.GetMessage(), Data: p.GetResult()}
	r.Status = StatusFailed
	for s, ps := range statusToProto {
		if ps == p.GetStatus() {
			r.Status = s
		}
	}
	if len(r.Data) == 0 {
		r.Data = nil
	}
	return r
}
