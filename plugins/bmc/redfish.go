package bmc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/better-compute/commands/plugins/internal/site"
)

// redfishResetTypes maps a power action to the ResetTypes that do it, in
// order of preference (bmclib's mapping: off is ForceOff, soft is
// GracefulShutdown, cycle is PowerCycle where the BMC has it and
// ForceRestart otherwise).
var redfishResetTypes = map[string][]schemas.ResetType{
	"on":    {schemas.OnResetType, schemas.ForceOnResetType},
	"off":   {schemas.ForceOffResetType},
	"soft":  {schemas.GracefulShutdownResetType},
	"cycle": {schemas.PowerCycleResetType, schemas.ForceRestartResetType},
	"reset": {schemas.ForceRestartResetType},
}

var redfishBootTargets = map[BootDevice]schemas.BootSource{
	DevicePXE:  schemas.PxeBootSource,
	DeviceDisk: schemas.HddBootSource,
	DeviceCD:   schemas.CdBootSource,
}

// redfishProvider drives one ComputerSystem through gofish.
type redfishProvider struct {
	client *gofish.APIClient
	// system is the ComputerSystem's URI; every call reads it afresh with
	// the call's context.
	system string
}

// OpenRedfish connects to b's Redfish service at its pinned address with
// basic auth. Redirects are refused (a BMC that redirects elsewhere is not
// the one the inventory pins), no proxy from the environment is used, and
// the certificate is checked against the inventory's caFile (or the
// system roots).
func OpenRedfish(ctx context.Context, b site.BMC, cred site.Credential) (Provider, error) {
	ip, err := b.IP()
	if err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: b.Redfish.ServerName}
	if b.Redfish.CAFile != "" {
		pem, err := os.ReadFile(b.Redfish.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the BMC's CA file: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", b.Redfish.CAFile)
		}
		tlsCfg.RootCAs = roots
	}
	if tlsCfg.ServerName == "" {
		tlsCfg.ServerName = ip.String()
	}
	hc := &http.Client{
		Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: nil, ForceAttemptHTTP2: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the BMC answered with a redirect, which is not followed")
		},
	}
	endpoint := "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(b.RedfishPort()))
	c, err := gofish.ConnectContext(ctx, gofish.ClientConfig{Endpoint: endpoint, Username: cred.Username, Password: cred.Password,
		BasicAuth: true, HTTPClient: hc, NoModifyTransport: true})
	if err != nil {
		return nil, fmt.Errorf("connecting to Redfish at %s: %w", endpoint, err)
	}
	systems, err := c.WithContext(ctx).Service.Systems()
	if err != nil {
		return nil, fmt.Errorf("listing Redfish systems: %w", err)
	}
	var ids []string
	for _, s := range systems {
		ids = append(ids, s.ID)
		if b.Redfish.System == s.ID || (b.Redfish.System == "" && len(systems) == 1) {
			return &redfishProvider{client: c, system: s.ODataID}, nil
		}
	}
	if b.Redfish.System == "" {
		return nil, fmt.Errorf("the BMC has %d systems (%v): set redfish.system in the inventory", len(systems), ids)
	}
	return nil, fmt.Errorf("the BMC has no system %q (it has %v)", b.Redfish.System, ids)
}

func (r *redfishProvider) Name() string { return site.ProviderRedfish }

func (r *redfishProvider) get(ctx context.Context) (*schemas.ComputerSystem, error) {
	s, err := schemas.GetComputerSystem(r.client.WithContext(ctx), r.system)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", r.system, err)
	}
	return s, nil
}

func (r *redfishProvider) PowerState(ctx context.Context) (PowerState, error) {
	s, err := r.get(ctx)
	if err != nil {
		return "", err
	}
	if s.PowerState == "" {
		return "", fmt.Errorf("%s reports no PowerState", r.system)
	}
	return PowerState(s.PowerState), nil
}

func (r *redfishProvider) Power(ctx context.Context, action string) (string, error) {
	s, err := r.get(ctx)
	if err != nil {
		return "", err
	}
	allowed, err := s.GetSupportedResetTypes()
	if err != nil {
		return "", fmt.Errorf("reading the allowed reset types: %w", err)
	}
	want, ok := redfishResetTypes[action]
	if !ok {
		return "", fmt.Errorf("unknown power action %q", action)
	}
	rt, err := pick(want, allowed)
	if err != nil {
		return "", &NotAllowedError{Provider: site.ProviderRedfish, What: "power action", Requested: action, Allowed: resetNames(allowed)}
	}
	if _, err := s.Reset(rt); err != nil {
		return string(rt), fmt.Errorf("ComputerSystem.Reset %s: %w", rt, err)
	}
	return string(rt), nil
}

// pick returns the first of want that allowed holds; a BMC that lists no
// allowable values is taken to allow the first.
func pick(want, allowed []schemas.ResetType) (schemas.ResetType, error) {
	if len(allowed) == 0 {
		return want[0], nil
	}
	for _, w := range want {
		for _, a := range allowed {
			if a == w {
				return w, nil
			}
		}
	}
	return "", errors.New("not allowed")
}

func resetNames(rs []schemas.ResetType) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, string(r))
	}
	return out
}

func (r *redfishProvider) SetBoot(ctx context.Context, b BootSetting) (string, error) {
	s, err := r.get(ctx)
	if err != nil {
		return "", err
	}
	target, ok := redfishBootTargets[b.Device]
	if !ok {
		return "", fmt.Errorf("unknown boot device %q", b.Device)
	}
	if allowed := s.Boot.AllowableBootSourceOverrideTargetValues; len(allowed) > 0 {
		found := false
		names := make([]string, 0, len(allowed))
		for _, a := range allowed {
			names = append(names, string(a))
			found = found || a == target
		}
		if !found {
			return "", &NotAllowedError{Provider: site.ProviderRedfish, What: "boot device", Requested: string(b.Device) + " (" + string(target) + ")", Allowed: names}
		}
	}
	enabled := schemas.OnceBootSourceOverrideEnabled
	if b.Persistent {
		enabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	mode := schemas.UEFIBootSourceOverrideMode
	if !b.UEFI {
		mode = schemas.LegacyBootSourceOverrideMode
	}
	issued := fmt.Sprintf("Boot %s %s %s", target, enabled, mode)
	if err := s.SetBoot(&schemas.Boot{BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled, BootSourceOverrideMode: mode}); err != nil {
		return issued, fmt.Errorf("PATCH Boot: %w", err)
	}
	return issued, nil
}

func (r *redfishProvider) Boot(ctx context.Context) (BootSetting, error) {
	s, err := r.get(ctx)
	if err != nil {
		return BootSetting{}, err
	}
	var out BootSetting
	for d, t := range redfishBootTargets {
		if s.Boot.BootSourceOverrideTarget == t {
			out.Device = d
		}
	}
	if out.Device == "" {
		out.Device = BootDevice("redfish:" + string(s.Boot.BootSourceOverrideTarget))
	}
	out.Persistent = s.Boot.BootSourceOverrideEnabled == schemas.ContinuousBootSourceOverrideEnabled
	if s.Boot.BootSourceOverrideEnabled == schemas.DisabledBootSourceOverrideEnabled {
		out.Device = "none"
	}
	out.UEFI = s.Boot.BootSourceOverrideMode != schemas.LegacyBootSourceOverrideMode
	return out, nil
}

func (r *redfishProvider) Sensors(ctx context.Context) ([]Sensor, error) {
	s, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	chassis, err := s.Chassis()
	if err != nil {
		return nil, fmt.Errorf("reading the system's chassis: %w", err)
	}
	var out []Sensor
	for _, ch := range chassis {
		ss, err := ch.Sensors()
		if err != nil {
			return nil, fmt.Errorf("reading chassis %s's sensors: %w", ch.ID, err)
		}
		for _, x := range ss {
			out = append(out, Sensor{Name: x.Name, Reading: x.Reading, Units: x.ReadingUnits, Health: string(x.Status.Health), Type: string(x.ReadingType)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (r *redfishProvider) Events(ctx context.Context, limit int) ([]Event, error) {
	s, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	logs, err := s.LogServices()
	if err != nil {
		return nil, fmt.Errorf("reading the system's log services: %w", err)
	}
	var out []Event
	for _, l := range logs {
		es, err := l.Entries()
		if err != nil {
			return out, fmt.Errorf("reading log %s: %w", l.ID, err)
		}
		for _, e := range es {
			out = append(out, Event{ID: e.ID, Created: e.Created, Severity: string(e.Severity), Message: e.Message, Log: l.ID})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created > out[j].Created })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// Close drops the connections. Basic auth opened no session, so there is
// none to delete (gofish's Logout would DELETE an empty session URI).
func (r *redfishProvider) Close() { r.client.HTTPClient.CloseIdleConnections() }
