// Package disk is the disk plugin's handlers: disk.wipe and deploy, on the
// engines in wipe/ and deploy/.
package disk

import (
	"context"
	"errors"
	"net/http"

	"github.com/better-compute/commands/plugins/disk/deploy"
	"github.com/better-compute/commands/plugins/disk/manifest"
	"github.com/better-compute/commands/plugins/disk/wipe"
	"github.com/better-compute/commands/sdk/kind"
)

// Kinds returns the plugin's kinds on deps (zero values: the real system).
func Kinds(wd wipe.Deps, dd deploy.Deps) []kind.Kind {
	return []kind.Kind{
		{Manifest: manifest.WipeManifest, Handler: WipeHandler(wd)},
		{Manifest: manifest.DeployManifest, Handler: DeployHandler(dd)},
	}
}

// WipeHandler runs disk.wipe. The result, success or failure, is the wipe
// record, which bcd signs.
func WipeHandler(d wipe.Deps) kind.Handler {
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		var p wipe.Request
		if err := req.Command.Decode(&p); err != nil {
			return nil, err
		}
		d := d
		d.Logger = req.Logger
		d.Progress = req.Progress.Report
		res, err := wipe.Run(ctx, d, p)
		if err != nil {
			var we *wipe.Error
			if errors.As(err, &we) {
				return nil, &kind.Failure{Reason: we.Reason, Message: we.Err.Error(), Result: res}
			}
			return nil, &kind.Failure{Reason: wipe.ReasonIO, Message: err.Error(), Result: res}
		}
		req.Logger.Info("disk wiped", "device", res.Device.Path, "mode", res.Method.Mode, "scope", res.Scope, "serial", res.Device.Serial)
		return res, nil
	})
}

// deployPayload is deploy's payload.
type deployPayload struct {
	deploy.Request
	AuthorizationSecretRef string `json:"authorizationSecretRef,omitempty"`
}

// DeployHandler runs deploy. An authorizationSecretRef's value is sent as
// the image request's Authorization header and appears nowhere else.
func DeployHandler(d deploy.Deps) kind.Handler {
	return kind.HandlerFunc(func(ctx context.Context, req kind.Request) (any, error) {
		var p deployPayload
		if err := req.Command.Decode(&p); err != nil {
			return nil, err
		}
		if p.AuthorizationSecretRef != "" {
			v, err := req.Command.Secret(p.AuthorizationSecretRef)
			if err != nil {
				return nil, kind.Fail(deploy.ReasonBadRequest, "authorizationSecretRef: %v", err)
			}
			p.Header = http.Header{"Authorization": []string{string(v)}}
		}
		d := d
		d.Logger = req.Logger
		d.Progress = req.Progress.Report
		res, err := deploy.Run(ctx, d, p.Request)
		if err != nil {
			var de *deploy.Error
			if errors.As(err, &de) {
				return nil, &kind.Failure{Reason: de.Reason, Message: de.Err.Error(), Result: res}
			}
			return nil, &kind.Failure{Reason: deploy.ReasonIO, Message: err.Error(), Result: res}
		}
		req.Logger.Info("image deployed", "device", res.Device.Path, "source", res.Source, "bytes", res.Written)
		return res, nil
	})
}
