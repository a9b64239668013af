package kind

import (
	"google.golang.org/protobuf/types/known/durationpb"

	pluginv1 "github.com/better-compute/commands/sdk/proto/bc/plugin/v1"
)

var laneToProto = map[Lane]pluginv1.Lane{
	LaneControl:   pluginv1.Lane_LANE_CONTROL,
	LaneProvision: pluginv1.Lane_LANE_PROVISION,
	LaneBulk:      pluginv1.Lane_LANE_BULK,
}

// ManifestToProto converts a manifest for the wire.
func ManifestToProto(m Manifest) *pluginv1.Manifest {
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

// ManifestFromProto converts a manifest from the wire. The result is not
// validated: call Validate.
func ManifestFromProto(p *pluginv1.Manifest) Manifest {
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

// ResultToProto converts a result for the wire.
func ResultToProto(r Result) *pluginv1.Result {
	return &pluginv1.Result{Status: statusToProto[r.Status], Reason: r.Reason, Message: r.Message, Result: r.Data}
}

// ResultFromProto converts a result from the wire.
func ResultFromProto(p *pluginv1.Result) Result {
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
