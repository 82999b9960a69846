package clusters

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CredentialValidity is how long a service's member certificate is valid:
// joining the cluster again issues new ones.
const CredentialValidity = 365 * 24 * time.Hour

// Credential is a service's client certificate and key for one member
// cluster, PEM-encoded.
type Credential struct {
	Cert, Key []byte
}

// IssueCredential signs a client certificate for service's User (common
// name atoll-<service>, organization Group) with the member cluster's CA
// (PEM certificate and key, as kubeadm's and kwokctl's pki/ca.crt and
// ca.key): the API server authenticates it as that user, whose only
// rights are its ClusterRole (Apply).
func IssueCredential(caCertPEM, caKeyPEM []byte, service string, now time.Time) (Credential, error) {
	caCert, err := parseCert(caCertPEM)
	if err != nil {
		return Credential{}, fmt.Errorf("member CA certificate: %w", err)
	}
	caKey, err := parseKey(caKeyPEM)
	if err != nil {
		return Credential{}, fmt.Errorf("member CA key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Credential{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return Credential{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: User(service), Organization: []string{Group}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(CredentialValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return Credential{}, fmt.Errorf("sign %s's certificate: %w", User(service), err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Credential{}, err
	}
	return Credential{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(blk.Bytes)
}

func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}

// WriteKubeconfig writes, mode 0600, a kubeconfig for the member cluster
// at server (its CA certificate caPEM) that authenticates with cred
// (embedded, so the file is all a service needs).
func WriteKubeconfig(path, cluster, server string, caPEM []byte, service string, cred Credential) error {
	user := User(service)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cred.Cert, ClientKeyData: cred.Key}
	cfg.Contexts[user+"@"+cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user}
	cfg.CurrentContext = user + "@" + cluster
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("kubeconfig for %s: %w", user, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
