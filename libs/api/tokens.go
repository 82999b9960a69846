package api

import (
	"encoding/hex"
	"strings"
	"time"
)

// Project tokens are credentials for machines (CI, services), made by a
// project's admins. Each is one key of the projects bucket (admission is
// its only writer), beside the project's document:
//
//	t.<project>.<name>   ProjectToken: the token's digest, role and times
//
// The secret itself is made by the gateway, shown once to its creator and
// stored nowhere: the record holds its SHA-256 digest only. Every gateway
// replica watches these keys, so a revocation (the key's deletion) holds
// everywhere as soon as the watch delivers it.
const (
	// TokenKeyPrefix starts every ProjectToken key.
	TokenKeyPrefix = "t."
	// TokenFilter matches every ProjectToken key (a KV watch filter).
	TokenFilter = TokenKeyPrefix + ">"
	// ProjectTokenPrefix starts every project token's secret, so that a
	// gateway tells it from a tokens file token or a JWT at a glance.
	ProjectTokenPrefix = "atp_"
	// MaxTokenTTL is the longest a project token may live.
	MaxTokenTTL = 366 * 24 * time.Hour
	// MaxProjectTokens is the most tokens a project may hold.
	MaxProjectTokens = 100
	// TokenUsedEvery is how often, at most, a gateway reports a token's
	// use (its LastUsed is that coarse).
	TokenUsedEvery = time.Minute
)

// TokenKey is the projects bucket key of a project's token.
func TokenKey(project, name string) string { return TokenKeyPrefix + project + "." + name }

// TokenProjectFilter matches the keys of project's tokens.
func TokenProjectFilter(project string) string { return TokenKeyPrefix + project + ".>" }

// TokenOfKey returns the project and name of a ProjectToken key.
func TokenOfKey(key string) (project, name string, ok bool) {
	rest, ok := strings.CutPrefix(key, TokenKeyPrefix)
	if !ok {
		return "", "", false
	}
	project, name, ok = strings.Cut(rest, ".")
	return project, name, ok && project != "" && name != ""
}

// ProjectToken is a project token as stored at TokenKey.
type ProjectToken struct {
	// Project and Name name the token (Name is a DNS label, unique in
	// the project).
	Project string `json:"project"`
	Name    string `json:"name"`
	// Role is what the token may do in Project (viewer, developer, admin).
	Role string `json:"role"`
	// SHA256 is the hex digest of the secret; the secret is kept nowhere.
	SHA256 string `json:"sha256"`
	// Created is when, and CreatedBy by whom, the token was made.
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"createdBy"`
	// Expires is when the token stops working.
	Expires time.Time `json:"expires"`
	// LastUsed is when a gateway last reported the token's use (at most
	// every TokenUsedEvery; zero: never).
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// TokenCreate asks admission to store a project token. The gateway made
// the secret and sends only its digest.
type TokenCreate struct {
	Project string        `json:"project"`
	Name    string        `json:"name"`
	Role    string        `json:"role"`
	TTL     time.Duration `json:"ttl"`
	SHA256  string        `json:"sha256"`
}

// TokenRef names a project token (revoke).
type TokenRef struct {
	Project string `json:"project"`
	Name    string `json:"name"`
}

// TokenUsed reports that a token was used at At (a gateway, at most every
// TokenUsedEvery per token).
type TokenUsed struct {
	Project string    `json:"project"`
	Name    string    `json:"name"`
	SHA256  string    `json:"sha256"`
	At      time.Time `json:"at"`
}

// Validate names every problem of a token creation.
func (c *TokenCreate) Validate() FieldErrors {
	var fe FieldErrors
	if code, reason, ok := CheckProject(c.Project); !ok {
		fe = append(fe, FieldError{Field: "project", Code: code, Reason: reason})
	}
	checkTokenName(c.Name, &fe)
	if RoleRank(c.Role) == 0 {
		fe.add("role", CodeUnsupported, "%q: one of viewer, developer, admin", c.Role)
	}
	switch {
	case c.TTL <= 0:
		fe.add("ttl", CodeRequired, "a lifetime above zero is required (e.g. 720h)")
	case c.TTL > MaxTokenTTL:
		fe.add("ttl", CodeInvalid, "at most %s", MaxTokenTTL)
	}
	if b, err := hex.DecodeString(c.SHA256); err != nil || len(b) != 32 {
		fe.add("sha256", CodeInvalid, "64 hex digits")
	}
	return fe
}

// Validate names every problem of a token reference.
func (r *TokenRef) Validate() FieldErrors {
	var fe FieldErrors
	checkTokenName(r.Name, &fe)
	return fe
}

func checkTokenName(name string, fe *FieldErrors) {
	switch {
	case name == "":
		fe.add("name", CodeRequired, "a token name is required")
	case len(name) > 63 || !IsDNSLabel(name):
		fe.add("name", CodeInvalid, "%q: a DNS label (lower-case letters, digits and '-', at most 63)", name)
	}
}
