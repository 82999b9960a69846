package gateway

// Events credentials: NATS users a project's admins issue to their own
// services, which may read only the project's events (libs/bus
// eventcreds.go has the NATS side).
//
// The gateway keeps them in BucketEventCreds (key c.<project>.<name>:
// the secret's digest, never the secret) and answers nats-server's auth
// callout for every connection the server does not know: a credential's
// user and password get a user JWT, signed by the region's events issuer,
// with bus.EventsPermission and the credential's expiry; anything else is
// refused. Each connection it lets in is recorded in the credential first
// (compare-and-set), so a revoke, which deletes the credential by
// compare-and-set too, sees every connection it must kick: it kicks them
// through the system account ($SYS.REQ.SERVER.<id>.KICK) over a
// connection the callout places there for the gateway alone.
//
// Retention: each credential has one durable push consumer on the events
// stream, filtered to its project's events, made with the credential and
// deleted with it, which delivers into the credential's inbox
// (bus.EventsDeliverSubject) and takes no acks (its user may publish
// nothing, see bus.EventsPermission). JetStream pushes only while someone
// subscribes there, so a subscriber that was down resumes after the last
// event the server sent it, and gets what it missed as long as the events
// stream holds it: 7 days (bus.DefaultTopology) or the stream's size
// limit, whichever comes first. What was in flight when its connection
// dropped is lost (at most once): it dedupes nothing, it misses nothing
// the server did not hand to its connection.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
	"atoll.dev/libs/computeapi"
	"atoll.dev/services/gateway/auth"
)

// eventCredRecord is a credential as BucketEventCreds holds it.
type eventCredRecord struct {
	api.EventCredential
	// SHA256 is the hex digest of its secret.
	SHA256 string `json:"sha256"`
	// Conns are the connections the callout let in (the last
	// maxEventConns), which a revoke kicks.
	Conns []eventConn `json:"conns,omitempty"`
}

// eventConn is one connection a credential opened: its server and client id.
type eventConn struct {
	Server string `json:"server"`
	CID    uint64 `json:"cid"`
}

// maxEventConns bounds the connections a credential's record remembers.
const maxEventConns = 64

// eventCreds answers the auth callout and keeps the credentials.
type eventCreds struct {
	log     *slog.Logger
	bus     *bus.Bus
	kv      jetstream.KeyValue
	issuer  nkeys.KeyPair
	sysPass string // EventsSystemUser's password, derived from the issuer's seed
	servers string
	sub     *nats.Subscription

	mu  sync.Mutex
	sys *nats.Conn // mu must be held; the system account connection, made on first use
}

// calloutQueue is the queue group of the gateway replicas answering the
// auth callout: one answers each connection.
const calloutQueue = "atoll-auth-callout"

// startEventCreds loads the issuer and subscribes to the auth callout.
func startEventCreds(ctx context.Context, b *bus.Bus, log *slog.Logger, issuerFile, servers string) (*eventCreds, error) {
	kp, err := bus.LoadEventsIssuer(issuerFile)
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("events issuer: %w", err)
	}
	mac := hmac.New(sha256.New, seed)
	mac.Write([]byte(bus.EventsSystemUser)) // seed is the key pair's own: not cleared
	kv, err := b.KV(ctx, bus.BucketEventCreds)
	if err != nil {
		return nil, fmt.Errorf("events credentials bucket: %w", err)
	}
	e := &eventCreds{log: log.With("component", "eventcreds"), bus: b, kv: kv, issuer: kp,
		sysPass: hex.EncodeToString(mac.Sum(nil)), servers: servers}
	if e.sub, err = b.NC.QueueSubscribe(bus.AuthCalloutSubject, calloutQueue, e.answer); err != nil {
		return nil, fmt.Errorf("auth callout: %w", err)
	}
	return e, nil
}

// stop ends the callout's subscription and the system connection.
func (e *eventCreds) stop() {
	if e == nil {
		return
	}
	_ = e.sub.Unsubscribe()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sys != nil {
		e.sys.Close()
	}
}

// answer answers one auth callout request.
func (e *eventCreds) answer(m *nats.Msg) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		e.log.Warn("auth callout request undecodable", "err", err)
		return
	}
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	uc, err := e.authorize(ctx, req)
	if err == nil {
		resp.Jwt, err = uc.Encode(e.issuer)
	}
	if err != nil {
		e.log.Info("events connection refused", "user", req.ConnectOptions.Username, "client", req.ClientInformation.Host, "reason", err)
		resp.Error = err.Error()
	}
	tok, err := resp.Encode(e.issuer)
	if err != nil {
		e.log.Error("auth callout answer", "err", err)
		return
	}
	_ = m.Respond([]byte(tok))
}

// errUnknownCredentials refuses a connection whose credentials are not a
// live events credential.
var errUnknownCredentials = errors.New("unknown or revoked credentials")

// authorize is the user a connection becomes, or why it may not connect.
func (e *eventCreds) authorize(ctx context.Context, req *jwt.AuthorizationRequestClaims) (*jwt.UserClaims, error) {
	user, pass := req.ConnectOptions.Username, req.ConnectOptions.Password
	uc := jwt.NewUserClaims(req.UserNkey)
	if user == bus.EventsSystemUser {
		if subtle.ConstantTimeCompare([]byte(pass), []byte(e.sysPass)) != 1 {
			return nil, errUnknownCredentials
		}
		uc.Audience = bus.SystemAccount
		uc.Pub.Allow.Add("$SYS.REQ.SERVER.*.KICK")
		uc.Sub.Allow.Add("_INBOX.>")
		return uc, nil
	}
	project, name, ok := strings.Cut(user, "_")
	if !ok || !validToken(project) || !validToken(name) {
		return nil, errUnknownCredentials
	}
	key := eventCredKey(project, name)
	for range 5 {
		entry, err := e.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, errUnknownCredentials
		}
		if err != nil {
			return nil, fmt.Errorf("events credentials: %w", err)
		}
		var rec eventCredRecord
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			return nil, fmt.Errorf("events credentials: %w", err)
		}
		if subtle.ConstantTimeCompare([]byte(digest(pass)), []byte(rec.SHA256)) != 1 {
			return nil, errUnknownCredentials
		}
		if rec.Expires != nil && !time.Now().Before(*rec.Expires) {
			return nil, errors.New("credentials expired")
		}
		// Recorded before the answer: a revoke sees the connection.
		rec.Conns = append(rec.Conns, eventConn{Server: req.Server.ID, CID: req.ClientInformation.ID})
		rec.Conns = rec.Conns[max(0, len(rec.Conns)-maxEventConns):]
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("events credentials: %w", err)
		}
		if _, err := e.kv.Update(ctx, key, b, entry.Revision()); err != nil {
			continue // a concurrent connection or revoke: look again
		}
		p := bus.EventsPermission(project, user)
		uc.Audience = bus.GlobalAccount
		uc.Pub.Deny.Add(">") // no allow list would allow everything
		uc.Sub.Allow.Add(p.Subscribe...)
		if rec.Expires != nil {
			uc.Expires = rec.Expires.Unix()
		}
		return uc, nil
	}
	return nil, errors.New("events credentials busy, retry")
}

func eventCredKey(project, name string) string { return "c." + project + "." + name }

func digest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// kick disconnects the connections of a revoked credential.
func (e *eventCreds) kick(ctx context.Context, conns []eventConn) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sys == nil {
		nc, err := e.bus.Dial("atoll-gateway-events-system", nats.UserInfo(bus.EventsSystemUser, e.sysPass))
		if err != nil {
			return err
		}
		e.sys = nc
	}
	var errs []error
	for _, c := range conns {
		body, _ := json.Marshal(map[string]uint64{"cid": c.CID})
		m, err := e.sys.RequestWithContext(ctx, "$SYS.REQ.SERVER."+c.Server+".KICK", body)
		if err != nil {
			errs = append(errs, fmt.Errorf("kick %s/%d: %w", c.Server, c.CID, err))
			continue
		}
		var r struct {
			Error *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		// A connection that has gone already is no error.
		if json.Unmarshal(m.Data, &r) == nil && r.Error != nil && !strings.Contains(r.Error.Description, "not found") {
			errs = append(errs, fmt.Errorf("kick %s/%d: %s", c.Server, c.CID, r.Error.Description))
		}
	}
	return errors.Join(errs...)
}

// ListEventCredentials implements the contract's listEventCredentials
// (the handler reads the path's project).
func (s *Service) ListEventCredentials(w http.ResponseWriter, r *http.Request, _ computeapi.ProjectPath) {
	s.listEventCreds(w, r)
}

// CreateEventCredentials implements the contract's createEventCredentials.
func (s *Service) CreateEventCredentials(w http.ResponseWriter, r *http.Request, _ computeapi.ProjectPath) {
	s.createEventCred(w, r)
}

// RevokeEventCredentials implements the contract's revokeEventCredentials
// (the handler reads the path's project and name).
func (s *Service) RevokeEventCredentials(w http.ResponseWriter, r *http.Request, _ computeapi.ProjectPath, _ string) {
	s.revokeEventCred(w, r)
}

// eventsAdmin checks that events credentials are on and the caller is an
// admin of the path's project, whose name it returns.
func (s *Service) eventsAdmin(w http.ResponseWriter, r *http.Request) (string, bool) {
	project := chi.URLParam(r, "project")
	if !validToken(project) {
		writeError(w, r, http.StatusBadRequest, "Invalid", "project: must be lower-case letters, digits and dashes")
		return "", false
	}
	if !allow(w, r, project, auth.RoleAdmin, false) {
		return "", false
	}
	if s.events == nil {
		writeError(w, r, http.StatusNotImplemented, "NotImplemented", "events credentials are off in this region (no events issuer)")
		return "", false
	}
	return project, true
}

// createEventCred makes an events credential and its durable consumer and
// answers it with its secret, shown this once.
func (s *Service) createEventCred(w http.ResponseWriter, r *http.Request) {
	project, ok := s.eventsAdmin(w, r)
	if !ok {
		return
	}
	if s.deleting(w, r, project) {
		return
	}
	var req api.EventCredentialRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !validToken(req.Name) || len(project)+len(req.Name) > 120 {
		writeError(w, r, http.StatusBadRequest, "Invalid", "name: must be lower-case letters, digits and dashes")
		return
	}
	now := time.Now().UTC()
	var expires *time.Time
	if req.TTL != "" {
		ttl, err := time.ParseDuration(req.TTL)
		if err != nil || ttl <= 0 {
			writeError(w, r, http.StatusBadRequest, "Invalid", "ttl: must be a positive duration such as 720h")
			return
		}
		at := now.Add(ttl)
		expires = &at
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	secret := base64.RawURLEncoding.EncodeToString(raw[:])
	user := project + "_" + req.Name
	rec := eventCredRecord{EventCredential: api.EventCredential{
		Project: project, Name: req.Name, User: user, Creator: identity(r).Subject, Created: now, Expires: expires,
		Stream: bus.StreamEvents, Consumer: bus.EventsConsumerName(project, req.Name), Subject: bus.EventsFilter(project),
		InboxPrefix: bus.EventsInboxPrefix(user), Deliver: bus.EventsDeliverSubject(user), Servers: s.events.servers,
	}, SHA256: digest(secret)}
	b, err := json.Marshal(rec)
	if err != nil {
		writeFailure(w, r, http.StatusInternalServerError, "Internal", "encode the credentials", err)
		return
	}
	if _, err := s.events.kv.Create(r.Context(), eventCredKey(project, req.Name), b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			writeError(w, r, http.StatusConflict, "Conflict", "name: project "+project+" has events credentials named "+req.Name)
			return
		}
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "store the credentials", err)
		return
	}
	if _, err := s.js.CreateOrUpdateConsumer(r.Context(), bus.StreamEvents, jetstream.ConsumerConfig{
		Durable: rec.Consumer, FilterSubject: rec.Subject, DeliverSubject: rec.Deliver,
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverNewPolicy,
		Description: "events credentials " + project + "/" + req.Name,
	}); err != nil {
		_ = s.events.kv.Delete(context.WithoutCancel(r.Context()), eventCredKey(project, req.Name))
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "make the durable consumer", err)
		return
	}
	out := rec.EventCredential
	out.Password = secret
	writeJSON(w, http.StatusCreated, out)
}

// listEventCreds lists a project's events credentials, without secrets.
func (s *Service) listEventCreds(w http.ResponseWriter, r *http.Request) {
	project, ok := s.eventsAdmin(w, r)
	if !ok {
		return
	}
	items := []api.EventCredential{}
	keys, err := s.events.kv.ListKeysFiltered(r.Context(), "c."+project+".*")
	if err != nil {
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "list the credentials", err)
		return
	}
	for k := range keys.Keys() {
		entry, err := s.events.kv.Get(r.Context(), k)
		if err != nil {
			continue // revoked meanwhile
		}
		var rec eventCredRecord
		if json.Unmarshal(entry.Value(), &rec) == nil {
			items = append(items, rec.EventCredential)
		}
	}
	slices.SortFunc(items, func(a, b api.EventCredential) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// revoke deletes one of a project's events credentials (at the revision
// read: no connection recorded after it is missed), disconnects the
// connections made with it and deletes its durable consumer; false when
// there is none.
func (e *eventCreds) revoke(ctx context.Context, js jetstream.JetStream, project, name string) (bool, error) {
	key := eventCredKey(project, name)
	var rec eventCredRecord
	for {
		entry, err := e.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read the credentials: %w", err)
		}
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			return false, fmt.Errorf("decode the credentials: %w", err)
		}
		err = e.kv.Delete(ctx, key, jetstream.LastRevision(entry.Revision()))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("delete the credentials: %w", err)
		}
	}
	if err := e.kick(ctx, rec.Conns); err != nil {
		e.log.Warn("events credentials revoked, kicking their connections failed", "project", project, "name", name, "err", err)
	}
	if err := js.DeleteConsumer(ctx, bus.StreamEvents, rec.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		e.log.Warn("events credentials revoked, deleting their consumer failed", "project", project, "name", name, "err", err)
	}
	return true, nil
}

// revokeProject revokes every events credential of a project that is
// being deleted (or is gone), so that nothing of it is left: records,
// connections, durable consumers. Every gateway replica may run it for
// the same project at once: each revoke deletes at the revision it read.
func (e *eventCreds) revokeProject(ctx context.Context, js jetstream.JetStream, project string) {
	lister, err := e.kv.ListKeysFiltered(ctx, eventCredKey(project, "*"))
	if err != nil {
		e.log.Warn("list the events credentials of a deleted project", "project", project, "err", err)
		return
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, k[len(eventCredKey(project, "")):])
	}
	for _, name := range names {
		if _, err := e.revoke(ctx, js, project, name); err != nil {
			e.log.Warn("revoke the events credentials of a deleted project", "project", project, "name", name, "err", err)
			continue
		}
		e.log.Info("events credentials of a deleted project revoked", "project", project, "name", name)
	}
}

// revokeEventCred deletes a credential, kicks its connections and deletes
// its durable consumer.
func (s *Service) revokeEventCred(w http.ResponseWriter, r *http.Request) {
	project, ok := s.eventsAdmin(w, r)
	if !ok {
		return
	}
	name := chi.URLParam(r, "name")
	if !validToken(name) {
		writeError(w, r, http.StatusNotFound, "NotFound", "project "+project+" has no events credentials named "+name)
		return
	}
	found, err := s.events.revoke(r.Context(), s.js, project, name)
	switch {
	case err != nil:
		writeFailure(w, r, http.StatusServiceUnavailable, "Unavailable", "revoke the credentials", err)
		return
	case !found:
		writeError(w, r, http.StatusNotFound, "NotFound", "project "+project+" has no events credentials named "+name)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
