package api

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/better-compute/commands/controlplane/internal/apierr"
	"github.com/better-compute/commands/controlplane/internal/errcode"
	"github.com/better-compute/commands/controlplane/trust/auth"
	"github.com/better-compute/commands/controlplane/trust/secrets"
	apiv1 "github.com/better-compute/commands/proto/bc/api/v1"
)

// secretsServer is bc.api.v1.Secrets: values go in, never out. The log
// lines name the secret and the caller, never the value.
type secretsServer struct {
	apiv1.UnimplementedSecretsServer
	s *Server
}

func secretProto(m secrets.Meta) *apiv1.Secret {
	return &apiv1.Secret{TenantId: m.TenantID, Name: m.Name, KeyId: m.KeyID, ValueBytes: int64(m.ValueBytes),
		CreatedAt: timestamppb.New(m.CreatedAt), UpdatedAt: timestamppb.New(m.UpdatedAt)}
}

func (x *secretsServer) fail(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		return apierr.New(errcode.InvalidInput, err.Error(), map[string]string{"reason": "invalid-secret"})
	case errors.Is(err, secrets.ErrNotFound):
		return apierr.New(errcode.NotFound, err.Error(), map[string]string{"reason": "secret-not-found"})
	}
	return x.s.fail(ctx, op, err)
}

// Put stores or replaces a secret.
func (x *secretsServer) Put(ctx context.Context, req *apiv1.PutSecretRequest) (*apiv1.Secret, error) {
	id, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermSecretsWrite)
	if err != nil {
		return nil, err
	}
	m, err := x.s.secrets.Put(ctx, req.GetTenantId(), req.GetName(), req.GetValue())
	if err != nil {
		return nil, x.fail(ctx, "secrets.put", err)
	}
	x.s.logger.Info("secret put", "tenant_id", m.TenantID, "name", m.Name, "bytes", m.ValueBytes, "by", id.Name)
	return secretProto(m), nil
}

// List returns the tenant's secrets' metadata.
func (x *secretsServer) List(ctx context.Context, req *apiv1.ListSecretsRequest) (*apiv1.ListSecretsResponse, error) {
	if _, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermSecretsRead); err != nil {
		return nil, err
	}
	ms, err := x.s.secrets.List(ctx, req.GetTenantId())
	if err != nil {
		return nil, x.fail(ctx, "secrets.list", err)
	}
	out := &apiv1.ListSecretsResponse{}
	for _, m := range ms {
		out.Items = append(out.Items, secretProto(m))
	}
	return out, nil
}

// Delete removes a secret.
func (x *secretsServer) Delete(ctx context.Context, req *apiv1.DeleteSecretRequest) (*apiv1.DeleteSecretResponse, error) {
	id, err := auth.AuthorizeTenant(ctx, req.GetTenantId(), auth.PermSecretsWrite)
	if err != nil {
		return nil, err
	}
	ok, err := x.s.secrets.Delete(ctx, req.GetTenantId(), req.GetName())
	if err != nil {
		return nil, x.fail(ctx, "secrets.delete", err)
	}
	if !ok {
		return nil, apierr.New(errcode.NotFound, "tenant "+req.GetTenantId()+" has no secret "+req.GetName(), map[string]string{"reason": "secret-not-found"})
	}
	x.s.logger.Info("secret deleted", "tenant_id", req.GetTenantId(), "name", req.GetName(), "by", id.Name)
	return &apiv1.DeleteSecretResponse{Deleted: true}, nil
}
