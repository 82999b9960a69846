package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"atoll.dev/libs/api"
	"atoll.dev/libs/bus"
)

// Project tokens (api.ProjectToken): admission stores them in the
// projects bucket, of which it is the one writer. The gateway has made
// the secret and checked its caller; admission keeps what must hold: a
// registered project that is not being deleted, one token per name, at
// most api.MaxProjectTokens, and a digest only.

// CreateToken stores a project token.
func (s *Service) CreateToken(ctx context.Context, req api.TokenCreate, p Principal) (*api.ProjectToken, error) {
	if fe := req.Validate(); len(fe) > 0 {
		return nil, invalid(fe)
	}
	kv, err := s.projects(ctx)
	if err != nil {
		return nil, err
	}
	doc, _, err := getProject(ctx, kv, req.Project)
	if err != nil {
		return nil, err
	}
	if doc.Deleting != nil {
		return nil, projectDeleting(req.Project)
	}
	n, err := countKeys(ctx, kv, api.TokenProjectFilter(req.Project))
	if err != nil {
		return nil, unavailable(err)
	}
	if n >= api.MaxProjectTokens {
		return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "TooManyTokens",
			Message: fmt.Sprintf("project %s holds %d tokens, the most a project may hold; revoke one first", req.Project, n)}}
	}
	now := time.Now().UTC()
	t := &api.ProjectToken{Project: req.Project, Name: req.Name, Role: req.Role, SHA256: req.SHA256,
		Created: now, CreatedBy: p.Name, Expires: now.Add(req.TTL)}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, unavailable(err)
	}
	if _, err := kv.Create(ctx, api.TokenKey(req.Project, req.Name), b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, &Error{Status: api.StatusConflict, Body: api.ErrorBody{Code: "AlreadyExists", Message: fmt.Sprintf("project %s has a token named %s", req.Project, req.Name),
				Fields: api.FieldErrors{{Field: "name", Code: api.CodeDuplicate, Reason: "a token of this name exists; revoke it or choose another name"}}}}
		}
		return nil, unavailable(fmt.Errorf("create token %s/%s: %w", req.Project, req.Name, err))
	}
	s.log.Info("project token created", "project", req.Project, "token", req.Name, "role", req.Role, "expires", t.Expires, "by", p.Name)
	return t, nil
}

// RevokeToken deletes a project token: every gateway refuses it once its
// watch delivers the deletion.
func (s *Service) RevokeToken(ctx context.Context, req api.TokenRef, p Principal) error {
	if fe := req.Validate(); len(fe) > 0 {
		return invalid(fe)
	}
	kv, err := s.projects(ctx)
	if err != nil {
		return err
	}
	key := api.TokenKey(req.Project, req.Name)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Error{Status: api.StatusNotFound, Body: api.ErrorBody{Code: "NotFound", Message: fmt.Sprintf("project %s has no token named %s", req.Project, req.Name)}}
	}
	if err != nil {
		return unavailable(err)
	}
	if err := kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil {
		return writeError(fmt.Errorf("revoke token %s/%s: %w", req.Project, req.Name, err), "token "+req.Name)
	}
	s.log.Info("project token revoked", "project", req.Project, "token", req.Name, "by", p.Name)
	return nil
}

// MarkTokenUsed records a token's last use, if the token stored under its
// name is still the one used and the use is newer.
func (s *Service) MarkTokenUsed(ctx context.Context, req api.TokenUsed) error {
	kv, err := s.projects(ctx)
	if err != nil {
		return err
	}
	_, err = bus.Update(ctx, kv, api.TokenKey(req.Project, req.Name), func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, bus.ErrNoChange
		}
		var t api.ProjectToken
		if err := json.Unmarshal(cur, &t); err != nil {
			return nil, unavailable(fmt.Errorf("decode token %s/%s: %w", req.Project, req.Name, err))
		}
		if t.SHA256 != req.SHA256 || !req.At.After(t.LastUsed) {
			return nil, bus.ErrNoChange
		}
		t.LastUsed = req.At.UTC()
		return json.Marshal(&t)
	})
	if err != nil && !errors.Is(err, bus.ErrNoChange) {
		return writeError(err, "token "+req.Name)
	}
	return nil
}

// countKeys counts the live keys of kv matching filter.
func countKeys(ctx context.Context, kv jetstream.KeyValue, filter string) (int, error) {
	keys, err := listKeys(ctx, kv, filter)
	return len(keys), err
}

// listKeys returns the live keys of kv matching filter.
func listKeys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list keys %s: %w", filter, err)
	}
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out, nil
}

func (s *Service) tokenCreate(ctx context.Context, req api.TokenCreate, r micro.Request) (*api.ProjectToken, error) {
	return s.CreateToken(ctx, req, principal(r))
}

func (s *Service) tokenRevoke(ctx context.Context, req api.TokenRef, r micro.Request) (api.Ack, error) {
	if err := s.RevokeToken(ctx, req, principal(r)); err != nil {
		return nil, err
	}
	return api.Ack{"revoked": true}, nil
}

func (s *Service) tokenUsed(ctx context.Context, req api.TokenUsed, _ micro.Request) (api.Ack, error) {
	if err := s.MarkTokenUsed(ctx, req); err != nil {
		return nil, err
	}
	return api.Ack{}, nil
}
