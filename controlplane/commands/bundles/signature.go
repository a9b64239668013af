package bundles

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Query parameters of a DirStore URL. The signature covers the method, the
// key, the deadline and the cap, so none can be changed without the secret.
const (
	paramMethod    = "bc-method"
	paramExpires   = "bc-expires"
	paramMaxBytes  = "bc-max-bytes"
	paramSignature = "bc-signature"
)

// signatureVersion separates this MAC from any other use of the secret.
const signatureVersion = "bc-blob-v1"

// Refusals of a signed request, each wrapping errRefused.
var (
	errRefused      = errors.New("refused")
	errBadSignature = fmt.Errorf("%w: the URL's signature does not verify", errRefused)
	errExpired      = fmt.Errorf("%w: the URL's deadline has passed", errRefused)
	errWrongMethod  = fmt.Errorf("%w: the URL was signed for another method", errRefused)
	errMalformed    = fmt.Errorf("%w: the URL's signature parameters are malformed", errRefused)
)

// signedParams are a DirStore URL's signed query parameters.
type signedParams struct {
	Method    string
	Expires   time.Time
	MaxBytes  int64 // 0 on GET
	Signature []byte
}

// parseSignedQuery reads the signed parameters from a URL's query. Each must
// appear exactly once; it checks the form only, not the signature.
func parseSignedQuery(q url.Values) (signedParams, error) {
	one := func(name string) (string, error) {
		v, ok := q[name]
		if !ok || len(v) != 1 || v[0] == "" {
			return "", fmt.Errorf("%w: %s must appear once", errMalformed, name)
		}
		return v[0], nil
	}
	var p signedParams
	var err error
	if p.Method, err = one(paramMethod); err != nil {
		return p, err
	}
	if p.Method != http.MethodPut && p.Method != http.MethodGet {
		return p, fmt.Errorf("%w: %s %q", errMalformed, paramMethod, p.Method)
	}
	exp, err := one(paramExpires)
	if err != nil {
		return p, err
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || secs <= 0 || secs > 1<<40 {
		return p, fmt.Errorf("%w: %s %q", errMalformed, paramExpires, exp)
	}
	p.Expires = time.Unix(secs, 0).UTC()
	if p.Method == http.MethodPut {
		mb, err := one(paramMaxBytes)
		if err != nil {
			return p, err
		}
		if p.MaxBytes, err = strconv.ParseInt(mb, 10, 64); err != nil || p.MaxBytes <= 0 {
			return p, fmt.Errorf("%w: %s %q", errMalformed, paramMaxBytes, mb)
		}
	} else if _, ok := q[paramMaxBytes]; ok {
		return p, fmt.Errorf("%w: %s on a GET", errMalformed, paramMaxBytes)
	}
	sig, err := one(paramSignature)
	if err != nil {
		return p, err
	}
	if p.Signature, err = hex.DecodeString(sig); err != nil || len(p.Signature) != sha256.Size {
		return p, fmt.Errorf("%w: %s is not a hex SHA-256 HMAC", errMalformed, paramSignature)
	}
	return p, nil
}

// mac computes the signature of a request for key.
func mac(secret []byte, method, key string, expires time.Time, maxBytes int64) []byte {
	h := hmac.New(sha256.New, secret)
	fmt.Fprintf(h, "%s\n%s\n%s\n%d\n%d", signatureVersion, method, key, expires.Unix(), maxBytes)
	return h.Sum(nil)
}

// signedQuery is the query string of a URL for key.
func signedQuery(secret []byte, method, key string, expires time.Time, maxBytes int64) url.Values {
	q := url.Values{}
	q.Set(paramMethod, method)
	q.Set(paramExpires, strconv.FormatInt(expires.Unix(), 10))
	if method == http.MethodPut {
		q.Set(paramMaxBytes, strconv.FormatInt(maxBytes, 10))
	}
	q.Set(paramSignature, hex.EncodeToString(mac(secret, method, key, expires, maxBytes)))
	return q
}

// verify checks a request for key against its signed parameters: the method
// first (so a wrong method says so), then the MAC, then the deadline.
func verify(secret []byte, method, key string, p signedParams, now time.Time) error {
	want := p.Method
	if method == http.MethodHead && want == http.MethodGet {
		method = http.MethodGet
	}
	if method != want {
		return fmt.Errorf("%w: signed for %s, got %s", errWrongMethod, want, method)
	}
	if !hmac.Equal(p.Signature, mac(secret, p.Method, key, p.Expires, p.MaxBytes)) {
		return errBadSignature
	}
	if !now.Before(p.Expires) {
		return fmt.Errorf("%w (at %s)", errExpired, p.Expires.Format(time.RFC3339))
	}
	return nil
}
