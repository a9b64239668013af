package bundles

import (
	"bytes"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// FuzzParseSignedQuery feeds arbitrary query strings to the DirStore's URL
// decoder: it must never panic, and nothing it accepts may verify without
// the secret's MAC.
func FuzzParseSignedQuery(f *testing.F) {
	secret := bytes.Repeat([]byte("s"), 32)
	exp := time.Unix(1900000000, 0)
	f.Add(signedQuery(secret, http.MethodPut, "support-bundles/n/k.bundle", exp, 1024).Encode())
	f.Add(signedQuery(secret, http.MethodGet, "support-bundles/n/k.bundle", exp, 0).Encode())
	f.Add("bc-method=PUT&bc-expires=1&bc-max-bytes=1&bc-signature=00")
	f.Add("bc-method=PUT&bc-method=GET")
	f.Add("")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := parseSignedQuery(q)
		if err != nil {
			return
		}
		if p.Method != http.MethodPut && p.Method != http.MethodGet {
			t.Fatalf("accepted method %q", p.Method)
		}
		if p.Method == http.MethodPut && p.MaxBytes <= 0 {
			t.Fatalf("accepted a PUT without a positive cap")
		}
		key := "support-bundles/n/k.bundle"
		err = verify(secret, p.Method, key, p, time.Unix(0, 0))
		want := mac(secret, p.Method, key, p.Expires, p.MaxBytes)
		if err == nil && !bytes.Equal(p.Signature, want) {
			t.Fatalf("verified a signature that is not the MAC")
		}
	})
}
