// Package bmctest runs fake BMCs for tests: DMTF's Redfish mockups served
// over TLS with state added (power transitions that apply after a delay, a
// Boot override that a later GET shows), and go-ipmi's own in-process BMC
// with a chassis whose power follows the same delays. The bmc plugin's
// tests and the e2e tests drive them through the real gofish and go-ipmi
// clients, exactly as a site agent drives a real BMC.
package bmctest

import (
	"embed"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

//go:embed testdata/mockups
var mockups embed.FS

// Mockups DMTF publishes that bmctest serves.
const (
	Rackmount1 = "public-rackmount1" // system 437XR1138R2; Reset without PowerCycle
	Catfish    = "public-catfish"    // system 1; no Cd boot target
)

// RedfishOptions configure a fake Redfish BMC.
type RedfishOptions struct {
	// Mockup is the DMTF mockup to serve (Rackmount1 by default).
	Mockup string
	// Username and Password are what basic auth must carry.
	Username, Password string
	// Delay is how long after a Reset its power change applies (a restart
	// goes Off after Delay and On after twice Delay). 300 ms by default.
	Delay time.Duration
	// AllowedResetTypes, when set, replaces every system's
	// ResetType@Redfish.AllowableValues (a BMC that allows less).
	AllowedResetTypes []string
	// RedirectTo, when set, answers every request with a 302 there.
	RedirectTo string
}

// Redfish is a running fake Redfish BMC.
type Redfish struct {
	*httptest.Server
	opts RedfishOptions
	// mu guards systems and log.
	mu      sync.Mutex
	systems map[string]*system
	log     []string
}

type transition struct {
	at    time.Time
	state string
}

type system struct {
	power   string
	pending []transition
	boot    map[string]any
}

// NewRedfish starts a fake Redfish BMC over TLS; it stops with the test.
func NewRedfish(t testing.TB, opts RedfishOptions) *Redfish {
	t.Helper()
	r := StartRedfish(opts)
	t.Cleanup(r.Close)
	return r
}

// StartRedfish starts a fake Redfish BMC over TLS on loopback, outside a
// test (bc-fake-bmc); Close stops it.
func StartRedfish(opts RedfishOptions) *Redfish {
	if opts.Mockup == "" {
		opts.Mockup = Rackmount1
	}
	if opts.Delay == 0 {
		opts.Delay = 300 * time.Millisecond
	}
	r := &Redfish{opts: opts, systems: map[string]*system{}}
	r.Server = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	return r
}

// CAFile writes the server's certificate as a PEM file in dir and returns
// its path, for the inventory's redfish.caFile.
func (r *Redfish) CAFile(t testing.TB, dir string) string {
	t.Helper()
	p, err := r.WriteCAFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteCAFile is CAFile outside a test.
func (r *Redfish) WriteCAFile(dir string) (string, error) {
	p := filepath.Join(dir, "bmc-ca-"+strings.ReplaceAll(r.Listener.Addr().String(), ":", "_")+".pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate().Raw})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", fmt.Errorf("writing the BMC's certificate: %w", err)
	}
	return p, nil
}

// Requests are the state-changing requests the BMC received, in order
// ("POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset ForceRestart").
func (r *Redfish) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// PowerState is the system's power state now.
func (r *Redfish) PowerState(systemID string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.system("/redfish/v1/Systems/" + systemID)
	if err != nil {
		return ""
	}
	return s.power
}

// SetPowerState sets the system's power state at once.
func (r *Redfish) SetPowerState(systemID, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, err := r.system("/redfish/v1/Systems/" + systemID); err == nil {
		s.power, s.pending = state, nil
	}
}

// Boot is the system's Boot override now.
func (r *Redfish) Boot(systemID string) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := r.system("/redfish/v1/Systems/" + systemID)
	if err != nil {
		return nil
	}
	out := map[string]any{}
	for k, v := range s.boot {
		out[k] = v
	}
	return out
}

func redfishError(w http.ResponseWriter, code int, msgID, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": "Base.1.18." + msgID, "message": msg,
		"@Message.ExtendedInfo": []map[string]any{{"MessageId": "Base.1.18." + msgID, "Message": msg}},
	}})
}

func (r *Redfish) file(uri string) ([]byte, error) {
	p := strings.TrimSuffix(strings.TrimPrefix(uri, "/redfish/v1"), "/")
	p = path.Clean("/" + p)
	return fs.ReadFile(mockups, path.Join("testdata/mockups", r.opts.Mockup, p, "index.json"))
}

// system returns the state of the system at uri, made from its file the
// first time. The caller holds mu.
func (r *Redfish) system(uri string) (*system, error) {
	uri = strings.TrimSuffix(uri, "/")
	if s, ok := r.systems[uri]; ok {
		r.apply(s)
		return s, nil
	}
	b, err := r.file(uri)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if t, _ := doc["@odata.type"].(string); !strings.HasPrefix(t, "#ComputerSystem.") {
		return nil, fs.ErrNotExist
	}
	s := &system{power: fmt.Sprint(doc["PowerState"]), boot: map[string]any{}}
	if b, ok := doc["Boot"].(map[string]any); ok {
		s.boot = b
	}
	r.systems[uri] = s
	return s, nil
}

// apply makes the transitions that are due. The caller holds mu.
func (r *Redfish) apply(s *system) {
	now := time.Now()
	for len(s.pending) > 0 && !s.pending[0].at.After(now) {
		s.power = s.pending[0].state
		s.pending = s.pending[1:]
	}
}

func (r *Redfish) serve(w http.ResponseWriter, req *http.Request) {
	if r.opts.RedirectTo != "" {
		http.Redirect(w, req, r.opts.RedirectTo, http.StatusFound)
		return
	}
	// The service root is open, as the Redfish specification has it.
	open := req.Method == http.MethodGet && (req.URL.Path == "/redfish/v1/" || req.URL.Path == "/redfish/v1")
	if u, p, ok := req.BasicAuth(); !open && (!ok || u != r.opts.Username || p != r.opts.Password) {
		redfishError(w, http.StatusUnauthorized, "InsufficientPrivilege", "basic authentication failed")
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	uri := strings.TrimSuffix(req.URL.Path, "/")
	switch {
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
		r.get(w, uri)
	case req.Method == http.MethodPost && strings.HasSuffix(uri, "/Actions/ComputerSystem.Reset"):
		r.reset(w, req, strings.TrimSuffix(uri, "/Actions/ComputerSystem.Reset"))
	case req.Method == http.MethodPatch:
		r.patch(w, req, uri)
	case req.Method == http.MethodDelete && strings.Contains(uri, "/SessionService/Sessions"):
		w.WriteHeader(http.StatusNoContent)
	default:
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", req.Method+" "+uri+" is not supported")
	}
}

func (r *Redfish) get(w http.ResponseWriter, uri string) {
	b, err := r.file(uri)
	if err != nil {
		redfishError(w, http.StatusNotFound, "ResourceNotFound", uri+" not found")
		return
	}
	if s, err := r.system(uri); err == nil {
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			redfishError(w, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		doc["PowerState"] = s.power
		doc["Boot"] = s.boot
		if len(r.opts.AllowedResetTypes) > 0 {
			if acts, ok := doc["Actions"].(map[string]any); ok {
				if rst, ok := acts["#ComputerSystem.Reset"].(map[string]any); ok {
					rst["ResetType@Redfish.AllowableValues"] = r.opts.AllowedResetTypes
				}
			}
		}
		b, _ = json.Marshal(doc)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("ETag", fmt.Sprintf(`W/"%x"`, len(b)))
	_, _ = w.Write(b)
}

func (r *Redfish) allowedResets(uri string) []string {
	if len(r.opts.AllowedResetTypes) > 0 {
		return r.opts.AllowedResetTypes
	}
	b, _ := r.file(uri)
	var doc struct {
		Actions struct {
			Reset struct {
				Allowed []string `json:"ResetType@Redfish.AllowableValues"`
			} `json:"#ComputerSystem.Reset"`
		}
	}
	_ = json.Unmarshal(b, &doc)
	return doc.Actions.Reset.Allowed
}

func (r *Redfish) reset(w http.ResponseWriter, req *http.Request, uri string) {
	s, err := r.system(uri)
	if err != nil {
		redfishError(w, http.StatusNotFound, "ResourceNotFound", uri+" not found")
		return
	}
	var body struct{ ResetType string }
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", err.Error())
		return
	}
	if allowed := r.allowedResets(uri); len(allowed) > 0 && !slices.Contains(allowed, body.ResetType) {
		redfishError(w, http.StatusBadRequest, "ActionParameterNotSupported", "ResetType "+body.ResetType+" is not supported")
		return
	}
	r.log = append(r.log, "POST "+req.URL.Path+" "+body.ResetType)
	now := time.Now()
	d := r.opts.Delay
	switch body.ResetType {
	case "On", "ForceOn":
		s.pending = []transition{{now.Add(d), "On"}}
	case "ForceOff", "GracefulShutdown":
		s.pending = []transition{{now.Add(d), "Off"}}
	case "ForceRestart", "GracefulRestart", "PowerCycle", "FullPowerCycle":
		if s.power == "Off" && body.ResetType != "PowerCycle" {
			redfishError(w, http.StatusConflict, "ActionNotSupported", "the system is off: it cannot restart")
			return
		}
		s.pending = []transition{{now.Add(d), "Off"}, {now.Add(2 * d), "On"}}
	case "PushPowerButton":
		to := "On"
		if s.power == "On" {
			to = "Off"
		}
		s.pending = []transition{{now.Add(d), to}}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *Redfish) patch(w http.ResponseWriter, req *http.Request, uri string) {
	s, err := r.system(uri)
	if err != nil {
		redfishError(w, http.StatusMethodNotAllowed, "OperationNotAllowed", "PATCH "+uri+" is not supported")
		return
	}
	var body struct {
		Boot map[string]any
	}
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil || body.Boot == nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "want {\"Boot\": {...}}")
		return
	}
	if t, ok := body.Boot["BootSourceOverrideTarget"].(string); ok {
		allowed, _ := s.boot["BootSourceOverrideTarget@Redfish.AllowableValues"].([]any)
		found := len(allowed) == 0
		for _, a := range allowed {
			found = found || a == t
		}
		if !found {
			redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", "BootSourceOverrideTarget "+t+" is not allowed")
			return
		}
	}
	for k, v := range body.Boot {
		s.boot[k] = v
	}
	b, _ := json.Marshal(body.Boot)
	r.log = append(r.log, "PATCH "+req.URL.Path+" "+string(b))
	w.WriteHeader(http.StatusNoContent)
}
