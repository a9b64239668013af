package trust

import (
	"crypto/sha256"
	"sync"
	"time"
)

// maxCachedCerts bounds a WorkerCache: a control plane renews its worker
// key at half its life, so a node sees two or three certificates a day.
const maxCachedCerts = 64

// WorkerCache remembers the worker-key certificates it verified against a
// bundle, so a node checks one signature per command instead of two:
// every command a worker key signs in its day carries the same
// certificate. An entry holds for one bundle (the same *Bundle, which a
// node replaces when it takes a new version) and the exact certificate
// bytes; what time changes (the root's window, the certificate's) is
// checked again on every use. The zero value is ready to use.
type WorkerCache struct {
	// lock guards bundle and certs.
	lock   sync.Mutex
	bundle *Bundle
	certs  map[[32]byte]cachedCert
}

type cachedCert struct {
	cert WorkerCert
	root string
}

// VerifyWorkerSigned is the package's VerifyWorkerSigned, with the
// certificate's chain to the bundle remembered.
func (wc *WorkerCache) VerifyWorkerSigned(b *Bundle, certWire []byte, p Purpose, body, sig []byte, now time.Time) (WorkerCert, error) {
	if !b.HasRoots() || len(certWire) == 0 || len(sig) == 0 {
		return VerifyWorkerSigned(b, certWire, p, body, sig, now)
	}
	key := sha256.Sum256(certWire)
	wc.lock.Lock()
	if wc.bundle != b {
		wc.bundle, wc.certs = b, nil
	}
	cc, ok := wc.certs[key]
	wc.lock.Unlock()
	if ok {
		if _, err := b.Root(cc.root, now, DefaultClockSkew); err != nil {
			// The root's window closed since: check it all again, for the
			// error the uncached path gives.
			return VerifyWorkerSigned(b, certWire, p, body, sig, now)
		}
		return cc.cert, cc.cert.verifySigned(p, body, sig, now)
	}
	c, root, err := verifyWorkerCert(b, certWire, sig, now)
	if err != nil {
		return c, err
	}
	wc.lock.Lock()
	if wc.bundle == b {
		if wc.certs == nil || len(wc.certs) >= maxCachedCerts {
			wc.certs = map[[32]byte]cachedCert{}
		}
		wc.certs[key] = cachedCert{cert: c, root: root}
	}
	wc.lock.Unlock()
	return c, c.verifySigned(p, body, sig, now)
}
