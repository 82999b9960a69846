// Package auth answers who a caller of the Compute API is and what it may
// do. Callers present a bearer token: an API token, kept only as its
// SHA-256 digest, or a JWT signed by a key of the configured JWKS. Roles are
// per project (viewer < developer < admin); platform admins may do anything.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"sigs.k8s.io/yaml"
)

// Role is what a caller may do in one project.
type Role string

// Roles, weakest first.
const (
	RoleViewer    Role = "viewer"
	RoleDeveloper Role = "developer"
	RoleAdmin     Role = "admin"
)

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleDeveloper:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Valid says whether r is a known role.
func (r Role) Valid() bool { return r.rank() > 0 }

// Identity is an authenticated caller.
type Identity struct {
	// Subject names the caller (a user or a service account).
	Subject string `json:"subject"`
	// PlatformAdmin may do anything in every project and manage the region.
	PlatformAdmin bool `json:"platformAdmin,omitempty"`
	// Roles maps a project to the caller's role in it.
	Roles map[string]Role `json:"roles,omitempty"`
}

// Decision is the outcome of an authorization check, as an HTTP status.
type Decision int

// Decisions.
const (
	Allow Decision = 200
	// Deny: the caller may not do this (403).
	Deny Decision = 403
	// Hide: the caller has no role in the project, and the object must look
	// missing (404).
	Hide Decision = 404
)

// Can decides whether id may act with role need in project. objectScoped
// says the request names one object (a workload), which must then be
// indistinguishable from a missing one when the caller has no role in the
// project.
func (id *Identity) Can(project string, need Role, objectScoped bool) Decision {
	if id.PlatformAdmin {
		return Allow
	}
	have, ok := id.Roles[project]
	if !ok || !have.Valid() {
		if objectScoped {
			return Hide
		}
		return Deny
	}
	if have.rank() < need.rank() {
		return Deny
	}
	return Allow
}

// ErrUnauthenticated means the credentials are missing or invalid.
var ErrUnauthenticated = errors.New("unauthenticated")

// TokenEntry is one API token in the tokens file.
type TokenEntry struct {
	Subject       string          `json:"subject"`
	SHA256        string          `json:"sha256"`
	PlatformAdmin bool            `json:"platformAdmin,omitempty"`
	Roles         map[string]Role `json:"roles,omitempty"`
}

// TokensFile is the YAML file of API tokens.
type TokensFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// Authenticator checks bearer credentials.
type Authenticator struct {
	mu     sync.RWMutex
	tokens map[[32]byte]*Identity // mu must be held

	jwks     *jose.JSONWebKeySet
	issuer   string
	audience string
	now      func() time.Time
}

// Config configures an Authenticator.
type Config struct {
	// TokensFile is a YAML TokensFile ("" for none).
	TokensFile string
	// JWKSFile is a JSON Web Key Set whose keys verify JWTs ("" disables JWTs).
	JWKSFile string
	// Issuer and Audience must match the JWT's iss and aud; both are
	// required with a JWKSFile.
	Issuer, Audience string
}

// New loads the configured credentials.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{tokens: map[[32]byte]*Identity{}, issuer: cfg.Issuer, audience: cfg.Audience, now: time.Now}
	if cfg.TokensFile != "" {
		b, err := os.ReadFile(cfg.TokensFile)
		if err != nil {
			return nil, fmt.Errorf("read tokens file: %w", err)
		}
		var f TokensFile
		if err := yaml.UnmarshalStrict(b, &f); err != nil {
			return nil, fmt.Errorf("parse tokens file %s: %w", cfg.TokensFile, err)
		}
		for i, t := range f.Tokens {
			if err := a.addEntry(t); err != nil {
				return nil, fmt.Errorf("tokens file %s, token %d: %w", cfg.TokensFile, i, err)
			}
		}
	}
	if cfg.JWKSFile != "" {
		// Without them, a token the identity provider issued to any other
		// application would do here.
		if cfg.Issuer == "" || cfg.Audience == "" {
			return nil, fmt.Errorf("JWTs need an issuer and an audience to check (JWKS file %s)", cfg.JWKSFile)
		}
		b, err := os.ReadFile(cfg.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("read JWKS file: %w", err)
		}
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(b, &set); err != nil {
			return nil, fmt.Errorf("parse JWKS file %s: %w", cfg.JWKSFile, err)
		}
		if len(set.Keys) == 0 {
			return nil, fmt.Errorf("JWKS file %s has no keys", cfg.JWKSFile)
		}
		a.jwks = &set
	}
	return a, nil
}

func (a *Authenticator) addEntry(t TokenEntry) error {
	raw, err := hex.DecodeString(t.SHA256)
	if err != nil || len(raw) != 32 {
		return fmt.Errorf("sha256 must be 64 hex digits")
	}
	if t.Subject == "" {
		return fmt.Errorf("subject is empty")
	}
	for p, r := range t.Roles {
		if !r.Valid() {
			return fmt.Errorf("project %s: unknown role %q (viewer, developer or admin)", p, r)
		}
	}
	var d [32]byte
	copy(d[:], raw)
	a.mu.Lock()
	a.tokens[d] = &Identity{Subject: t.Subject, PlatformAdmin: t.PlatformAdmin, Roles: t.Roles}
	a.mu.Unlock()
	return nil
}

// Digest returns the hex SHA-256 of a token, as stored in the tokens file.
func Digest(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// NewToken returns a fresh random API token.
func NewToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "atl_" + hex.EncodeToString(b)
}

// Mint creates a token for id, remembers only its digest, and returns it.
func (a *Authenticator) Mint(id Identity) (string, TokenEntry) {
	tok := NewToken()
	e := TokenEntry{Subject: id.Subject, SHA256: Digest(tok), PlatformAdmin: id.PlatformAdmin, Roles: id.Roles}
	_ = a.addEntry(e)
	return tok, e
}

// Authenticate resolves an Authorization header value.
func (a *Authenticator) Authenticate(header string) (*Identity, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return nil, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	tok = strings.TrimSpace(tok)
	if strings.Count(tok, ".") == 2 && a.jwks != nil {
		return a.verifyJWT(tok)
	}
	d := sha256.Sum256([]byte(tok))
	a.mu.RLock()
	defer a.mu.RUnlock()
	// Lookups are keyed by the digest: timing reveals nothing of the token.
	if id, ok := a.tokens[d]; ok {
		return id, nil
	}
	return nil, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
}

// Claims are the JWT claims Atoll reads.
type Claims struct {
	jwt.Claims
	// Roles maps projects to roles.
	Roles map[string]Role `json:"atoll.dev/roles,omitempty"`
	// PlatformAdmin grants everything.
	PlatformAdmin bool `json:"atoll.dev/platform-admin,omitempty"`
}

var jwtAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA, jose.PS256}

func (a *Authenticator) verifyJWT(raw string) (*Identity, error) {
	tok, err := jwt.ParseSigned(raw, jwtAlgs)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed JWT: %w", ErrUnauthenticated, err)
	}
	if len(tok.Headers) != 1 {
		return nil, fmt.Errorf("%w: JWT must have one signature", ErrUnauthenticated)
	}
	keys := a.jwks.Key(tok.Headers[0].KeyID)
	if tok.Headers[0].KeyID == "" {
		keys = a.jwks.Keys
	}
	var c Claims
	verified := false
	for _, k := range keys {
		if err := tok.Claims(k.Public().Key, &c); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, fmt.Errorf("%w: JWT signature not verified by any JWKS key", ErrUnauthenticated)
	}
	exp := jwt.Expected{Issuer: a.issuer, Time: a.now()}
	if a.audience != "" {
		exp.AnyAudience = jwt.Audience{a.audience}
	}
	if err := c.ValidateWithLeeway(exp, 30*time.Second); err != nil {
		return nil, fmt.Errorf("%w: JWT claims: %w", ErrUnauthenticated, err)
	}
	if c.Expiry == nil {
		return nil, fmt.Errorf("%w: JWT has no exp", ErrUnauthenticated)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: JWT has no sub", ErrUnauthenticated)
	}
	for p, r := range c.Roles {
		if !r.Valid() {
			return nil, fmt.Errorf("%w: JWT role %q for project %s", ErrUnauthenticated, r, p)
		}
	}
	return &Identity{Subject: c.Subject, PlatformAdmin: c.PlatformAdmin, Roles: c.Roles}, nil
}
