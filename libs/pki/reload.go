package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// Reloader serves the certificate in a pair of files and reads them again
// when either's modification time or size changes, checked at most once
// per CheckEvery, so a rotated certificate is served without a restart.
// A pair that fails to load (half written) leaves the last good one in use.
type Reloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate // the last good pair; mu must be held
	stamp   [2]fileStamp     // the files' stamps when cert was loaded; mu must be held
	checked time.Time        // when the stamps were last compared; mu must be held
}

// CheckEvery bounds how often a Reloader looks at its files.
const CheckEvery = time.Second

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewReloader loads the certificate and key files; they must be a valid pair.
func NewReloader(certFile, keyFile string) (*Reloader, error) {
	r := &Reloader{certFile: certFile, keyFile: keyFile}
	stamp, err := r.stamps()
	if err != nil {
		return nil, err
	}
	if err := r.load(stamp); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reloader) stamps() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return s, fmt.Errorf("tls certificate: %w", err)
		}
		s[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return s, nil
}

// load reads the pair; mu must be held (or r not yet shared).
func (r *Reloader) load(stamp [2]fileStamp) error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls certificate %s: %w", r.certFile, err)
	}
	r.cert, r.stamp = &c, stamp
	return nil
}

// Certificate returns the current certificate, reloading it when the
// files changed.
func (r *Reloader) Certificate() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= CheckEvery {
		r.checked = now
		if s, err := r.stamps(); err == nil && s != r.stamp {
			_ = r.load(s) // a pair caught half written is read again at the next check
		}
	}
	return r.cert, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate()
}

// ServerConfig is a TLS server configuration serving r's certificate:
// TLS 1.2 at least.
func ServerConfig(r *Reloader) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
