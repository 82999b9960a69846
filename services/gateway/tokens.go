package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// Project tokens for machines. Admission stores each token's digest in
// the projects bucket (api.TokenKey); every gateway replica watches those
// keys into tokenIndex, so a token works at a replica once its watch
// delivers it and stops the moment its revocation (the key's deletion) is
// delivered. A project token acts in its project only, with its role,
// never as a member of anything, and never manages tokens. Its use is
// reported to admission at most every api.TokenUsedEvery per replica, so
// no request waits on a write.

// tokenIndex maps token digests to their records, fed by the watch.
type tokenIndex struct {
	mu sync.RWMutex
	// byDigest holds each token by its secret's digest; mu must be held.
	byDigest map[[32]byte]*api.ProjectToken
	// digests holds each key's digest, to drop it when the key changes;
	// mu must be held.
	digests map[string][32]byte
	// reported holds when this replica last reported each digest's use;
	// mu must be held.
	reported map[[32]byte]time.Time
	// changed is closed, and replaced, at every change; mu must be held.
	changed chan struct{}
}

func newTokenIndex() *tokenIndex {
	return &tokenIndex{byDigest: map[[32]byte]*api.ProjectToken{}, digests: map[string][32]byte{},
		reported: map[[32]byte]time.Time{}, changed: make(chan struct{})}
}

// set replaces what the index holds at key with t (nil: deleted).
func (x *tokenIndex) set(key string, t *api.ProjectToken) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old, had := x.digests[key]
	if had {
		delete(x.byDigest, old)
		delete(x.digests, key)
	}
	var d [32]byte
	if t != nil {
		if b, err := hex.DecodeString(t.SHA256); err == nil && len(b) == 32 {
			copy(d[:], b)
			x.byDigest[d] = t
			x.digests[key] = d
		}
	}
	// A token's own last-use update keeps its report time: only a token
	// gone or replaced under its name forgets it.
	if had && (t == nil || d != old) {
		delete(x.reported, old)
	}
	close(x.changed)
	x.changed = make(chan struct{})
}

// lookup returns the token whose secret is secret.
func (x *tokenIndex) lookup(secret string) (*api.ProjectToken, [32]byte, bool) {
	d := sha256.Sum256([]byte(secret))
	x.mu.RLock()
	defer x.mu.RUnlock()
	t, ok := x.byDigest[d]
	return t, d, ok
}

// dueReport says whether the use of the token of digest d at now is to
// be reported, and notes it when it is.
func (x *tokenIndex) dueReport(d [32]byte, now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if last, ok := x.reported[d]; ok && now.Sub(last) < api.TokenUsedEvery {
		return false
	}
	x.reported[d] = now
	return true
}

// list returns project's tokens, by name.
func (x *tokenIndex) list(project string) []*api.ProjectToken {
	x.mu.RLock()
	var out []*api.ProjectToken
	for _, t := range x.byDigest {
		if t.Project == project {
			out = append(out, t)
		}
	}
	x.mu.RUnlock()
	slices.SortFunc(out, func(a, b *api.ProjectToken) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// get returns the token named name in project, and a channel closed at
// the index's next change.
func (x *tokenIndex) get(project, name string) (*api.ProjectToken, <-chan struct{}) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out *api.ProjectToken
	if d, ok := x.digests[api.TokenKey(project, name)]; ok {
		out = x.byDigest[d]
	}
	return out, x.changed
}

// startTokens mirrors the projects bucket's tokens into s.tokens and
// waits for its first replay.
func (s *Service) startTokens(ctx, runCtx context.Context) error {
	var mu sync.Mutex // holds onChange until the mirror is assigned
	mu.Lock()
	var m *bus.TypedMirror[*api.ProjectToken]
	decode := func(b []byte) (*api.ProjectToken, error) {
		var t api.ProjectToken
		return &t, json.Unmarshal(b, &t)
	}
	m, err := bus.MirrorOf(runCtx, s.bus, bus.BucketProjects, api.TokenFilter, decode, func(key string) {
		mu.Lock()
		mm := m
		mu.Unlock()
		e, found := mm.Get(key)
		if !found || e.Err != nil {
			if found {
				s.log.Warn("unreadable project token", "key", key, "err", e.Err)
			}
			s.tokens.set(key, nil)
			return
		}
		s.tokens.set(key, e.Value)
	})
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("mirror project tokens: %w", err)
	}
	select {
	case <-m.Ready():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("project tokens mirror not ready: %w", ctx.Err())
	}
}

// tokenSubject is the subject of a project token's identity: it names
// the token, and no member of any project can be it (the tokens' own
// subjects are never looked up among members).
func tokenSubject(t *api.ProjectToken) string { return "token:" + t.Project + "/" + t.Name }

// authenticateProjectToken resolves a bearer project token; handled is
// false when the header holds no project token.
func (s *Service) authenticateProjectToken(ctx context.Context, header string) (id *auth.Identity, handled bool, err error) {
	secret, ok := strings.CutPrefix(header, "Bearer ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.HasPrefix(secret, api.ProjectTokenPrefix) {
		return nil, false, nil
	}
	t, d, found := s.tokens.lookup(secret)
	if !found {
		return nil, true, &auth.Error{Reason: "unknown token"}
	}
	now := time.Now()
	if !now.Before(t.Expires) {
		return nil, true, &auth.Error{Reason: "token expired at " + t.Expires.UTC().Format(time.RFC3339) + "; ask the project's admins for a new one",
			Detail: tokenSubject(t)}
	}
	if s.tokens.dueReport(d, now) {
		s.reportTokenUse(ctx, t, now)
	}
	return &auth.Identity{Subject: tokenSubject(t), Roles: map[string]auth.Role{t.Project: auth.Role(t.Role)}, Token: t.Project + "/" + t.Name}, true, nil
}

// reportTokenUse tells admission, in the background, that t was used.
func (s *Service) reportTokenUse(ctx context.Context, t *api.ProjectToken, at time.Time) {
	req := api.TokenUsed{Project: t.Project, Name: t.Name, SHA256: t.SHA256, At: at.UTC()}
	h := nats.Header{}
	h.Set(bus.HeaderPrincipal, tokenSubject(t))
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := bus.TokenUsed.SendWithHeader(ctx, s.req, h, req); err != nil {
			s.log.Debug("token use not recorded", "project", t.Project, "token", t.Name, "err", err)
		}
	}()
}

// deleting answers 409 for a project being deleted with cascade (nothing
// new is created in it; admission deletes what a create racing the mark
// still adds) and says whether it did.
func (s *Service) deleting(w http.ResponseWriter, r *http.Request, project string) bool {
	doc, _ := s.members.get(project)
	if doc == nil || doc.Deleting == nil {
		return false
	}
	writeError(w, r, http.StatusConflict, "Deleting", "project "+project+" is being deleted")
	return true
}

// tokenAdmin authorizes a token request: an admin of a registered
// project, or a platform admin, and never a project token.
func (s *Service) tokenAdmin(w http.ResponseWriter, r *http.Request, project string) bool {
	if s.registered(w, r, project, auth.RoleAdmin) == nil {
		return false
	}
	if identity(r).Token != "" {
		writeError(w, r, http.StatusForbidden, "Forbidden", "a project token cannot manage tokens; a project admin signed in as a person can")
		return false
	}
	return true
}

func tokenView(t *api.ProjectToken) computeapi.ProjectToken {
	return computeapi.ProjectToken{Project: t.Project, Name: t.Name, Role: t.Role, Created: t.Created, CreatedBy: t.CreatedBy,
		Expires: t.Expires, LastUsed: t.LastUsed}
}

// ListTokens serves a project's tokens, without their secrets.
func (s *Service) ListTokens(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath) {
	if !s.tokenAdmin(w, r, project) {
		return
	}
	out := computeapi.ProjectTokenList{Items: []computeapi.ProjectToken{}}
	for _, t := range s.tokens.list(project) {
		out.Items = append(out.Items, tokenView(t))
	}
	writeJSON(w, http.StatusOK, out)
}

// CreateToken makes a project token and answers its secret, once.
func (s *Service) CreateToken(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath) {
	if !s.tokenAdmin(w, r, project) {
		return
	}
	var body computeapi.ProjectTokenCreate
	if !decodeBody(w, r, &body) {
		return
	}
	secret := api.ProjectTokenPrefix + strings.TrimPrefix(auth.NewToken(), "atl_")
	req := api.TokenCreate{Project: project, Name: body.Name, Role: body.Role, SHA256: auth.Digest(secret)}
	var fe api.FieldErrors
	ttl, err := time.ParseDuration(body.Ttl)
	if err != nil {
		fe = append(fe, api.FieldError{Field: "ttl", Code: api.CodeInvalid, Reason: fmt.Sprintf("%q: a duration such as 720h or 30m", body.Ttl)})
		ttl = time.Second // the other fields are still checked
	}
	req.TTL = ttl
	fe = append(fe, req.Validate()...)
	if len(fe) > 0 {
		writeInvalid(w, r, fe)
		return
	}
	if s.deleting(w, r, project) {
		return
	}
	t, err := call(s, r, bus.TokenCreate, req)
	if err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.waitToken(r.Context(), project, t.Name, func(got *api.ProjectToken) bool { return got != nil && got.SHA256 == t.SHA256 })
	v := tokenView(t)
	v.Secret = secret
	writeJSON(w, http.StatusCreated, v)
}

// RevokeToken revokes a project token.
func (s *Service) RevokeToken(w http.ResponseWriter, r *http.Request, project computeapi.ProjectPath, name string) {
	if !s.tokenAdmin(w, r, project) {
		return
	}
	req := api.TokenRef{Project: project, Name: name}
	if fe := req.Validate(); len(fe) > 0 {
		writeInvalid(w, r, fe)
		return
	}
	if err := send(s, r, bus.TokenRevoke, req); err != nil {
		writeRemoteError(w, r, err)
		return
	}
	s.waitToken(r.Context(), project, name, func(got *api.ProjectToken) bool { return got == nil })
	w.WriteHeader(http.StatusNoContent)
}

// waitToken waits, at most the read-your-writes bound, for this
// replica's index to hold a token of project named name that satisfies ok.
func (s *Service) waitToken(ctx context.Context, project, name string, ok func(*api.ProjectToken) bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadYourWrites)
	defer cancel()
	for {
		t, changed := s.tokens.get(project, name)
		if ok(t) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}
