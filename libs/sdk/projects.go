package sdk

import (
	"context"
	"time"

	"atoll.dev/libs/computeapi"
)

// CreateProject creates a project (platform admins; any user where the
// region allows self-service), with its owner as its one admin and the
// region's default quota.
func (c *Client) CreateProject(ctx context.Context, p computeapi.ProjectCreate) (*computeapi.Project, error) {
	r, err := c.API.CreateProjectWithResponse(ctx, p)
	return decode[computeapi.Project]("create project", r, err)
}

// Project returns a registered project with its members.
func (c *Client) Project(ctx context.Context, project string) (*computeapi.Project, error) {
	r, err := c.API.GetProjectWithResponse(ctx, project)
	return decode[computeapi.Project]("get project", r, err)
}

// DeleteProject deletes a project that holds no workloads (409 while it
// holds any).
func (c *Client) DeleteProject(ctx context.Context, project string) error {
	r, err := c.API.DeleteProjectWithResponse(ctx, project, nil)
	return noContent("delete project", r, err)
}

// DeleteProjectCascade starts deleting a project with everything it
// holds (workloads, Configs, Secrets, tokens, members); the project is
// gone once Project answers 404.
func (c *Client) DeleteProjectCascade(ctx context.Context, project string) error {
	r, err := c.API.DeleteProjectWithResponse(ctx, project, &computeapi.DeleteProjectParams{Cascade: true})
	return noContent("delete project", r, err)
}

// CreateToken creates a project token for machines with role (viewer,
// developer, admin) for ttl; the reply's Secret is the only copy of it.
func (c *Client) CreateToken(ctx context.Context, project, name, role string, ttl time.Duration) (*computeapi.ProjectToken, error) {
	r, err := c.API.CreateTokenWithResponse(ctx, project, computeapi.ProjectTokenCreate{Name: name, Role: role, Ttl: ttl.String()})
	return decode[computeapi.ProjectToken]("create token", r, err)
}

// Tokens lists a project's tokens (never their secrets).
func (c *Client) Tokens(ctx context.Context, project string) ([]computeapi.ProjectToken, error) {
	r, err := c.API.ListTokensWithResponse(ctx, project)
	l, err := decode[computeapi.ProjectTokenList]("list tokens", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// RevokeToken revokes a project token; every gateway refuses it within a
// second.
func (c *Client) RevokeToken(ctx context.Context, project, name string) error {
	r, err := c.API.RevokeTokenWithResponse(ctx, project, name)
	return noContent("revoke token", r, err)
}

// Members returns a registered project's members.
func (c *Client) Members(ctx context.Context, project string) ([]computeapi.Member, error) {
	r, err := c.API.ListMembersWithResponse(ctx, project)
	l, err := decode[computeapi.MemberList]("list members", r, err)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// SetMember adds a user or group ("user", "group"; "" is a user) to a
// project with role (viewer, developer, admin), or changes its role.
func (c *Client) SetMember(ctx context.Context, project, kind, name, role string) (*computeapi.Member, error) {
	r, err := c.API.SetMemberWithResponse(ctx, project, name, computeapi.MemberChange{Kind: kind, Role: role})
	return decode[computeapi.Member]("set member", r, err)
}

// RemoveMember removes a user or group ("" is a user) from a project.
func (c *Client) RemoveMember(ctx context.Context, project, kind, name string) error {
	r, err := c.API.RemoveMemberWithResponse(ctx, project, name, &computeapi.RemoveMemberParams{Kind: kind})
	return noContent("remove member", r, err)
}
