package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

func TestFindMethodMapsSpecNamesOntoServices(t *testing.T) {
	t.Parallel()
	m, err := FindMethod("commands.run")
	require.NoError(t, err)
	require.Equal(t, "/bc.api.v1.Commands/Run", m.FullMethod)
	m, err = FindMethod("nodes.createTenant")
	require.NoError(t, err)
	require.Equal(t, "/bc.api.v1.Nodes/CreateTenant", m.FullMethod)
	m, err = FindMethod("events.watch")
	require.NoError(t, err)
	require.True(t, m.Desc.IsStreamingServer())

	_, err = FindMethod("commands.runn")
	require.ErrorContains(t, err, "commands.cancel, commands.get, commands.list, commands.run, events.watch")
}

func TestBuildRequestInTheSpecsForm(t *testing.T) {
	t.Parallel()
	m, err := FindMethod("commands.run")
	require.NoError(t, err)
	msg, err := BuildRequest(m.Desc.Input(), []string{
		"tenantId=tenant_1", "nodeId=123", "kind=node.reboot", "idempotencyKey=reboot-0412",
		`payload={"sections":["gpus"],"rescan":true}`, "notAfterSeconds=300",
	})
	require.NoError(t, err)
	req := msg.(*apiv1.RunCommandRequest)
	require.Equal(t, "tenant_1", req.GetTenantId())
	require.Equal(t, "123", req.GetNodeId(), "a string field keeps JSON-looking text as text")
	require.Equal(t, "reboot-0412", req.GetIdempotencyKey())
	require.Equal(t, int32(300), req.GetNotAfterSeconds())
	require.True(t, req.GetPayload().GetFields()["rescan"].GetBoolValue())
	require.Equal(t, "gpus", req.GetPayload().GetFields()["sections"].GetListValue().GetValues()[0].GetStringValue())

	msg, err = BuildRequest(m.Desc.Input(), []string{"node_id=n", "payload.rescan=true", "payload.sections=[\"gpus\"]", "payload.note=hello"})
	require.NoError(t, err, "proto names and dotted keys work too")
	req = msg.(*apiv1.RunCommandRequest)
	require.Equal(t, "n", req.GetNodeId())
	require.True(t, req.GetPayload().GetFields()["rescan"].GetBoolValue())
	require.Equal(t, "hello", req.GetPayload().GetFields()["note"].GetStringValue(), "a value that is not JSON is a string")
}

func TestBuildRequestRepeatedFields(t *testing.T) {
	t.Parallel()
	m, err := FindMethod("events.watch")
	require.NoError(t, err)
	msg, err := BuildRequest(m.Desc.Input(), []string{"types=command.settled", "types=node.command.queued"})
	require.NoError(t, err)
	require.Equal(t, []string{"command.settled", "node.command.queued"}, msg.(*apiv1.WatchEventsRequest).GetTypes())
	msg, err = BuildRequest(m.Desc.Input(), []string{`types=["a","b"]`})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, msg.(*apiv1.WatchEventsRequest).GetTypes())
}

func TestBuildRequestErrorsListTheValidFields(t *testing.T) {
	t.Parallel()
	m, err := FindMethod("commands.run")
	require.NoError(t, err)
	_, err = BuildRequest(m.Desc.Input(), []string{"nodeID=x"})
	require.ErrorContains(t, err, `unknown field "nodeID"`)
	require.ErrorContains(t, err, "valid fields: tenantId, nodeId, kind, payload, idempotencyKey, notAfterSeconds, batchId")
	_, err = BuildRequest(m.Desc.Input(), []string{"nodeId"})
	require.ErrorContains(t, err, "expected key=value")
	_, err = BuildRequest(m.Desc.Input(), []string{"nodeId=a", "nodeId=b"})
	require.ErrorContains(t, err, "set twice")
	_, err = BuildRequest(m.Desc.Input(), []string{"notAfterSeconds=soon"})
	require.Error(t, err)
	_, err = BuildRequest(m.Desc.Input(), []string{"kind.x=1"})
	require.ErrorContains(t, err, "is not a message")
}

func FuzzBuildRequest(f *testing.F) {
	f.Add("nodeId=node_1", `payload={"a":[1,2]}`, "notAfterSeconds=600")
	f.Add("payload.a.b=3", "payload.a=4", "kind=diag.nvml")
	f.Add("=", "x", "batchId=[]")
	m, err := FindMethod("commands.run")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		msg, err := BuildRequest(m.Desc.Input(), []string{a, b, c})
		if err == nil && msg == nil {
			t.Fatal("nil message without an error")
		}
	})
}
