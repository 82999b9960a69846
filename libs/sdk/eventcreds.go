package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"atoll.dev/libs/api"
)

// CreateEventCredentials issues NATS credentials that may read only
// project's events (its project's admins): the answer holds the secret,
// shown this once.
func (c *Client) CreateEventCredentials(ctx context.Context, project string, req api.EventCredentialRequest) (*api.EventCredential, error) {
	var out api.EventCredential
	if err := c.rawJSON(ctx, http.MethodPost, eventCredsPath(project), req, &out); err != nil {
		return nil, fmt.Errorf("create events credentials: %w", err)
	}
	return &out, nil
}

// EventCredentials lists project's events credentials, without secrets.
func (c *Client) EventCredentials(ctx context.Context, project string) ([]api.EventCredential, error) {
	var out struct {
		Items []api.EventCredential `json:"items"`
	}
	if err := c.rawJSON(ctx, http.MethodGet, eventCredsPath(project), nil, &out); err != nil {
		return nil, fmt.Errorf("list events credentials: %w", err)
	}
	return out.Items, nil
}

// RevokeEventCredentials revokes project's events credentials name: their
// connections are closed and their durable consumer deleted.
func (c *Client) RevokeEventCredentials(ctx context.Context, project, name string) error {
	if err := c.rawJSON(ctx, http.MethodDelete, eventCredsPath(project)+"/"+url.PathEscape(name), nil, nil); err != nil {
		return fmt.Errorf("revoke events credentials: %w", err)
	}
	return nil
}

func eventCredsPath(project string) string {
	return "/v1/projects/" + url.PathEscape(project) + "/events/credentials"
}

// rawJSON sends in (if any) as JSON to path and decodes a 2xx answer into
// out (if any); anything else is an *Error.
func (c *Client) rawJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.server, "/")+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.setHeaders(req.Header)
	resp, err := c.doer.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return errorFromResponse(resp)
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}
