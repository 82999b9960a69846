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
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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

// Max returns the stronger of r and o.
func (r Role) Max(o Role) Role {
	if o.rank() > r.rank() {
		return o
	}
	return r
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
	// Groups are the groups the identity provider puts the caller in (a
	// project's members may be groups).
	Groups []string `json:"groups,omitempty"`
	// Token names the project token ("<project>/<name>") the caller
	// presented; "" for a person's token or JWT.
	Token string `json:"token,omitempty"`
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

// Error is a refused credential. It is ErrUnauthenticated: Reason is what
// the caller may be told, Detail (for the log) may name parser internals.
type Error struct {
	// Reason is the refusal as the caller reads it.
	Reason string
	// Detail says more, for the log only.
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return "unauthenticated: " + e.Reason
	}
	return "unauthenticated: " + e.Reason + ": " + e.Detail
}

// Is makes every Error match ErrUnauthenticated.
func (e *Error) Is(target error) bool { return target == ErrUnauthenticated }

// Reason is what a caller refused with err may be told: the Reason of an
// Error, "invalid token" for anything else.
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return reasonInvalid
}

const reasonInvalid = "invalid token"

func refuse(reason, detail string) error { return &Error{Reason: reason, Detail: detail} }

// TokenEntry is one API token in the tokens file.
type TokenEntry struct {
	// Subject names the token's holder.
	Subject string `json:"subject"`
	// SHA256 is the hex digest of the token; the token itself is kept nowhere.
	SHA256 string `json:"sha256"`
	// PlatformAdmin may do anything.
	PlatformAdmin bool `json:"platformAdmin,omitempty"`
	// Roles maps a project to the holder's role in it.
	Roles map[string]Role `json:"roles,omitempty"`
	// Groups are the holder's groups (a project's members may be groups).
	Groups []string `json:"groups,omitempty"`
	// Expires is when the token stops working (RFC 3339); required.
	Expires time.Time `json:"expires"`
}

// TokensFile is the YAML file of API tokens.
type TokensFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// ReadTokensFile reads and checks a tokens file.
func ReadTokensFile(path string) (TokensFile, error) {
	var f TokensFile
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own tokens file, named by flag
	if err != nil {
		return f, fmt.Errorf("read tokens file: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return f, fmt.Errorf("parse tokens file %s: %w", path, err)
	}
	for i, t := range f.Tokens {
		if _, _, err := resolve(t); err != nil {
			return f, fmt.Errorf("tokens file %s, token %d: %w", path, i, err)
		}
	}
	return f, nil
}

// WriteTokensFile replaces the tokens file at path with f, whole (a
// rename), so that a gateway reading it never sees half of it.
func WriteTokensFile(path string, f TokensFile) error {
	out, err := yaml.Marshal(f)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	if err := os.WriteFile(path+".tmp", out, 0o600); err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	return nil
}

// DefaultTokenLifetime is the lifetime of a token Mint makes.
const DefaultTokenLifetime = 30 * 24 * time.Hour

// DefaultReloadInterval is how often the tokens file is checked for a
// change by default.
const DefaultReloadInterval = 2 * time.Second

// DefaultMaxJWTLifetime is the longest a JWT may live by default.
const DefaultMaxJWTLifetime = 24 * time.Hour

// token is one API token, resolved.
type token struct {
	id      *Identity
	expires time.Time
}

// Authenticator checks bearer credentials. The tokens file is read again
// when it changes: a request finding the last check older than the
// reload interval reads the file and compares its digest (modification
// times are too coarse to tell quick writes apart), so a token removed
// from the file stops working within that interval.
type Authenticator struct {
	mu     sync.RWMutex
	tokens map[[32]byte]token // the tokens file's; mu must be held
	minted map[[32]byte]token // Mint's, kept across reloads; mu must be held

	tokensFile     string
	reloadInterval time.Duration
	reloadMu       sync.Mutex   // held while the file is checked or read
	fileDigest     [32]byte     // of the file's content in tokens; reloadMu must be held
	nextCheck      atomic.Int64 // when the file is next checked, in Unix nanoseconds
	log            *slog.Logger

	jwks           *jose.JSONWebKeySet
	issuer         string
	audience       string
	maxJWTLifetime time.Duration
	now            func() time.Time
}

// Config configures an Authenticator.
type Config struct {
	// TokensFile is a YAML TokensFile ("" for none), read again when it changes.
	TokensFile string `json:"tokensFile"`
	// ReloadInterval is how often the tokens file is checked for a change
	// (default DefaultReloadInterval; at most 10 s).
	ReloadInterval time.Duration `json:"reloadInterval"`
	// JWKSFile is a JSON Web Key Set whose keys verify JWTs ("" disables JWTs).
	JWKSFile string `json:"jwksFile"`
	// Issuer and Audience must match the JWT's iss and aud; both are
	// required with a JWKSFile.
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`
	// MaxJWTLifetime is the longest a JWT may live: one whose exp is more
	// than this after its iat, or after now, is refused (default
	// DefaultMaxJWTLifetime).
	MaxJWTLifetime time.Duration `json:"maxJWTLifetime"`
	// Logger receives the tokens file's reloads and their failures
	// (slog.Default() when nil).
	Logger *slog.Logger `json:"-"`
}

// New loads the configured credentials.
func New(cfg Config) (*Authenticator, error) {
	if cfg.ReloadInterval <= 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	if cfg.ReloadInterval > 10*time.Second {
		return nil, fmt.Errorf("tokens file reload interval %s is over 10s", cfg.ReloadInterval)
	}
	if cfg.MaxJWTLifetime <= 0 {
		cfg.MaxJWTLifetime = DefaultMaxJWTLifetime
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Authenticator{tokens: map[[32]byte]token{}, minted: map[[32]byte]token{}, tokensFile: cfg.TokensFile,
		reloadInterval: cfg.ReloadInterval, log: cfg.Logger.With("component", "auth"),
		issuer: cfg.Issuer, audience: cfg.Audience, maxJWTLifetime: cfg.MaxJWTLifetime, now: time.Now}
	if cfg.TokensFile != "" {
		if err := a.Reload(); err != nil {
			return nil, err
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

// Reload reads the tokens file now and replaces the file's tokens with
// its entries; on an error the tokens in use stay.
func (a *Authenticator) Reload() error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	return a.reloadLocked()
}

// reloadLocked is Reload; reloadMu must be held.
func (a *Authenticator) reloadLocked() error {
	a.nextCheck.Store(time.Now().Add(a.reloadInterval).UnixNano())
	b, err := os.ReadFile(a.tokensFile)
	if err != nil {
		return fmt.Errorf("read tokens file: %w", err)
	}
	_, err = a.load(b)
	return err
}

// load replaces the file's tokens with those of b, the file's content,
// unless b is what was loaded last; it says whether it replaced them.
// reloadMu must be held.
func (a *Authenticator) load(b []byte) (bool, error) {
	digest := sha256.Sum256(b)
	if digest == a.fileDigest && a.fileDigest != ([32]byte{}) {
		return false, nil
	}
	var f TokensFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return false, fmt.Errorf("parse tokens file %s: %w", a.tokensFile, err)
	}
	tokens := make(map[[32]byte]token, len(f.Tokens))
	for i, t := range f.Tokens {
		d, tok, err := resolve(t)
		if err != nil {
			return false, fmt.Errorf("tokens file %s, token %d: %w", a.tokensFile, i, err)
		}
		tokens[d] = tok
	}
	a.mu.Lock()
	a.tokens = tokens
	a.mu.Unlock()
	a.fileDigest = digest
	return true, nil
}

// maybeReload reads the tokens file again if the last check is older
// than the reload interval and the file changed since. A request that
// finds another one checking goes on with the tokens in use.
func (a *Authenticator) maybeReload() {
	if a.tokensFile == "" || time.Now().UnixNano() < a.nextCheck.Load() || !a.reloadMu.TryLock() {
		return
	}
	defer a.reloadMu.Unlock()
	if time.Now().UnixNano() < a.nextCheck.Load() {
		return // another request checked meanwhile
	}
	a.nextCheck.Store(time.Now().Add(a.reloadInterval).UnixNano())
	b, err := os.ReadFile(a.tokensFile)
	if err != nil {
		a.log.Error("tokens file unreadable; the tokens in use stay", "file", a.tokensFile, "err", err)
		return
	}
	changed, err := a.load(b)
	if err != nil {
		a.log.Error("tokens file not reloaded; the tokens in use stay", "file", a.tokensFile, "err", err)
		return
	}
	if !changed {
		return
	}
	a.mu.RLock()
	n := len(a.tokens)
	a.mu.RUnlock()
	a.log.Info("tokens file reloaded", "file", a.tokensFile, "tokens", n)
}

// resolve checks a tokens file entry and returns its digest and token.
func resolve(t TokenEntry) ([32]byte, token, error) {
	var d [32]byte
	raw, err := hex.DecodeString(t.SHA256)
	if err != nil || len(raw) != 32 {
		return d, token{}, errors.New("sha256 must be 64 hex digits")
	}
	if t.Subject == "" {
		return d, token{}, errors.New("subject is empty")
	}
	if t.Expires.IsZero() {
		return d, token{}, fmt.Errorf("subject %s: expires is required (RFC 3339, e.g. %s)", t.Subject, time.Now().Add(DefaultTokenLifetime).UTC().Format(time.RFC3339))
	}
	for p, r := range t.Roles {
		if !r.Valid() {
			return d, token{}, fmt.Errorf("project %s: unknown role %q (viewer, developer or admin)", p, r)
		}
	}
	copy(d[:], raw)
	return d, token{id: &Identity{Subject: t.Subject, PlatformAdmin: t.PlatformAdmin, Roles: t.Roles, Groups: t.Groups}, expires: t.Expires}, nil
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

// Entry makes a tokens file entry for id, valid until expires, and
// returns the token with it. Nothing is remembered: the entry works once
// it is in the tokens file.
func Entry(id Identity, expires time.Time) (string, TokenEntry) {
	tok := NewToken()
	return tok, TokenEntry{Subject: id.Subject, SHA256: Digest(tok), PlatformAdmin: id.PlatformAdmin, Roles: id.Roles, Groups: id.Groups, Expires: expires.UTC()}
}

// Mint creates a token for id, valid for DefaultTokenLifetime, remembers
// only its digest (apart from the tokens file, across its reloads), and
// returns it.
func (a *Authenticator) Mint(id Identity) (string, TokenEntry) {
	tok, e := Entry(id, a.now().Add(DefaultTokenLifetime))
	d, t, err := resolve(e)
	if err == nil {
		a.mu.Lock()
		a.minted[d] = t
		a.mu.Unlock()
	}
	return tok, e
}

// Authenticate resolves an Authorization header value. A refusal is an
// *Error: its Reason may be shown to the caller.
func (a *Authenticator) Authenticate(header string) (*Identity, error) {
	tok, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || tok == "" {
		return nil, refuse("no bearer token", "")
	}
	tok = strings.TrimSpace(tok)
	if strings.Count(tok, ".") == 2 && a.jwks != nil {
		return a.verifyJWT(tok)
	}
	a.maybeReload()
	d := sha256.Sum256([]byte(tok))
	a.mu.RLock()
	// Lookups are keyed by the digest: timing reveals nothing of the token.
	t, ok := a.tokens[d]
	if !ok {
		t, ok = a.minted[d]
	}
	a.mu.RUnlock()
	if !ok {
		return nil, refuse("unknown token", "")
	}
	if !a.now().Before(t.expires) {
		return nil, refuse("token expired at "+t.expires.UTC().Format(time.RFC3339)+"; ask a platform admin for a new one", "subject "+t.id.Subject)
	}
	return t.id, nil
}

// Claims are the JWT claims Atoll reads.
type Claims struct {
	jwt.Claims
	// Roles maps projects to roles.
	Roles map[string]Role `json:"atoll.dev/roles,omitempty"`
	// PlatformAdmin grants everything.
	PlatformAdmin bool `json:"atoll.dev/platform-admin,omitempty"`
	// Groups are the caller's groups, as identity providers name the claim.
	Groups []string `json:"groups,omitempty"`
}

var jwtAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.EdDSA, jose.PS256}

func (a *Authenticator) verifyJWT(raw string) (*Identity, error) {
	tok, err := jwt.ParseSigned(raw, jwtAlgs)
	if err != nil {
		return nil, refuse(reasonInvalid, "malformed JWT: "+err.Error())
	}
	if len(tok.Headers) != 1 {
		return nil, refuse(reasonInvalid, "JWT must have one signature")
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
		return nil, refuse(reasonInvalid, "JWT signature not verified by any JWKS key")
	}
	now := a.now()
	exp := jwt.Expected{Issuer: a.issuer, Time: now}
	if a.audience != "" {
		exp.AnyAudience = jwt.Audience{a.audience}
	}
	const leeway = 30 * time.Second
	if err := c.ValidateWithLeeway(exp, leeway); err != nil {
		if errors.Is(err, jwt.ErrExpired) {
			return nil, refuse("token expired; sign in again", "JWT claims: "+err.Error())
		}
		return nil, refuse(reasonInvalid, "JWT claims: "+err.Error())
	}
	if c.Expiry == nil {
		return nil, refuse("token without an expiry", "JWT has no exp")
	}
	tooLong := "token lifetime over the region's maximum of " + a.maxJWTLifetime.String()
	if c.IssuedAt != nil && c.Expiry.Time().Sub(c.IssuedAt.Time()) > a.maxJWTLifetime {
		return nil, refuse(tooLong, fmt.Sprintf("JWT exp - iat = %s", c.Expiry.Time().Sub(c.IssuedAt.Time())))
	}
	if c.Expiry.Time().After(now.Add(a.maxJWTLifetime + leeway)) {
		return nil, refuse(tooLong, "JWT exp "+c.Expiry.Time().UTC().Format(time.RFC3339)+" is further than that from now")
	}
	if c.Subject == "" {
		return nil, refuse(reasonInvalid, "JWT has no sub")
	}
	for p, r := range c.Roles {
		if !r.Valid() {
			return nil, refuse(reasonInvalid, fmt.Sprintf("JWT role %q for project %s", r, p))
		}
	}
	return &Identity{Subject: c.Subject, PlatformAdmin: c.PlatformAdmin, Roles: c.Roles, Groups: c.Groups}, nil
}
