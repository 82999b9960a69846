// Package pki makes a region's certificates offline, with Go's crypto
// only: a local certificate authority, server certificates for the
// gateway and the NATS servers (their DNS names and IP addresses as SANs),
// and client certificates. Keys are ECDSA P-256. It also serves a
// certificate from files that may change (Reloader), so a rotated
// certificate is used without a restart.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of what NewCA and Issue make when none is given.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// File names in a directory written by WriteCA and (*CA).WriteCert.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// CA is a certificate authority: its certificate and signing key.
type CA struct {
	// Cert is the CA's certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded: what clients trust.
	CertPEM []byte
	// Key signs the certificates the CA issues.
	Key crypto.Signer
}

// NewCA makes a self-signed CA named commonName, valid for validity
// (DefaultCAValidity when 0).
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if validity == 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"Atoll"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), Key: key}, nil
}

// Request describes a certificate to issue.
type Request struct {
	// CommonName is the subject's name.
	CommonName string
	// Hosts are the subject alternative names: each an IP address or a
	// DNS name.
	Hosts []string
	// Server and Client are the extended key usages: a server certificate,
	// a client certificate, or both.
	Server, Client bool
	// Validity is how long the certificate is valid (DefaultCertValidity when 0).
	Validity time.Duration
}

// Cert is an issued certificate and its key, PEM-encoded.
type Cert struct {
	// CertPEM is the certificate.
	CertPEM []byte
	// KeyPEM is its private key (PKCS #8).
	KeyPEM []byte
}

// Issue makes a certificate for req signed by ca.
func (ca *CA) Issue(req Request) (*Cert, error) {
	if !req.Server && !req.Client {
		return nil, errors.New("issue certificate: neither a server nor a client certificate")
	}
	if req.Validity == 0 {
		req.Validity = DefaultCertValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certificate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: []string{"Atoll"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(req.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue certificate %s: %w", req.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certificate key: %w", err)
	}
	return &Cert{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", keyDER)}, nil
}

// Pool is a certificate pool holding only the CA: what a client of the
// region's servers trusts.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// LoadOrCreateCA loads the CA kept in dir (ca.crt and ca.key), or makes
// one named commonName and writes it there (dir 0700, the key 0600).
func LoadOrCreateCA(dir, commonName string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile)) //nolint:gosec // G304: the directory the operator named
	if errors.Is(err, fs.ErrNotExist) {
		ca, err := NewCA(commonName, 0)
		if err != nil {
			return nil, err
		}
		return ca, ca.write(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("load ca: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile)) //nolint:gosec // G304: the directory the operator named
	if err != nil {
		return nil, fmt.Errorf("load ca: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load ca %s: %w", dir, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("load ca %s: key cannot sign", dir)
	}
	return &CA{Cert: pair.Leaf, CertPEM: certPEM, Key: signer}, nil
}

func (ca *CA) write(dir string) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return fmt.Errorf("ca key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write ca: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), pemBlock("PRIVATE KEY", keyDER), 0o600); err != nil {
		return fmt.Errorf("write ca: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, CACertFile), ca.CertPEM, 0o644); err != nil { //nolint:gosec // G306: a certificate is public
		return fmt.Errorf("write ca: %w", err)
	}
	return nil
}

// Write writes c as <dir>/<name>.crt (0644) and <dir>/<name>.key (0600)
// and returns their paths.
func (c *Cert) Write(dir, name string) (certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("write certificate: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writeAtomic(keyFile, c.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeAtomic(certFile, c.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// writeAtomic replaces path with data through a rename, so a reader never
// sees half a file.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// LoadPool reads a PEM file of CA certificates into a pool.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file) //nolint:gosec // G304: the CA file the operator named
	if err != nil {
		return nil, fmt.Errorf("load ca file: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("load ca file %s: no PEM certificate in it", file)
	}
	return p, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}
